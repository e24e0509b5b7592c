"""Refuse, before anything is built, a configuration that asks for hardware this machine lacks:
Lightning would fail later with a long traceback (or, for 16-mixed on a CPU, quietly train in
bf16 instead)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

CPU_PRESETS = "configs/cpu.yaml or configs/ddp-cpu.yaml"


class HardwareError(RuntimeError):
    """The configuration asks for an accelerator, device count or precision not available."""


def gpu_kind() -> str | None:
    """'cuda' or 'mps' when this machine has that GPU backend, else None."""
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else None


def check_hardware(
    accelerator: Any, devices: Any, precision: Any, sources: Sequence[str] = ()
) -> None:
    """Raise HardwareError naming the config (``sources``) and an alternative."""
    where = " + ".join(sources) or "the configuration"
    wanted = str(accelerator).lower() if isinstance(accelerator, str) else "auto"
    found = gpu_kind()
    if wanted in ("gpu", "cuda", "mps") and found is None:
        raise HardwareError(
            f"{where} needs a {'CUDA ' if wanted == 'cuda' else ''}GPU "
            f"(accelerator '{wanted}'), none found: use {CPU_PRESETS}"
        )
    if wanted in ("cuda", "mps") and found != wanted:
        raise HardwareError(f"{where} asks for accelerator '{wanted}', this machine has {found}")
    on_cuda = found == "cuda" and wanted in ("gpu", "cuda", "auto")
    if on_cuda and isinstance(devices, int) and devices > torch.cuda.device_count():
        raise HardwareError(
            f"trainer.devices {devices} asks for {devices} GPUs, {torch.cuda.device_count()} "
            "found: use --trainer.devices -1 (all of them)"
        )
    if on_cuda and str(precision).startswith("bf16") and not torch.cuda.is_bf16_supported():
        raise HardwareError(
            f"precision {precision} needs a GPU with bf16 (Ampere or later), this one has "
            "none: use configs/16-mixed.yaml"
        )
    if str(precision).startswith("16") and (wanted == "cpu" or found is None):
        raise HardwareError(
            f"precision {precision} needs a GPU (on the CPU Lightning would train in bf16 "
            "instead): use configs/bf16-mixed.yaml, or --trainer.precision 32-true"
        )
