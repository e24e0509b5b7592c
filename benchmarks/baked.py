"""Shared by the benchmarks: bake the template's defaults and import the generated package."""

from __future__ import annotations

import importlib
import os
import platform
import sys
from pathlib import Path
from types import ModuleType

from cookiecutter.main import cookiecutter

TEMPLATE_DIR = Path(__file__).resolve().parents[1]
PACKAGE = "digits_classifier"


def bake(workdir: Path) -> Path:
    """A fresh project with the default answers; returns its folder."""
    return Path(cookiecutter(str(TEMPLATE_DIR), no_input=True, output_dir=str(workdir)))


def import_modules(project: Path, *names: str) -> dict[str, ModuleType]:
    """Import modules of the baked package (lightning is imported only from here on)."""
    sys.path.insert(0, str(project / "src"))
    return {name: importlib.import_module(f"{PACKAGE}.{name}") for name in names}


def machine() -> str:
    """CPU model and the cores this process may use (affinity, not the host's count)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        model = names[0].split(":", 1)[1].strip() if names else model
    return f"{model}, {cores} cores"


def epoch_timer():
    """An epoch_clock.EpochClock: each epoch's full wall time in ``.times`` (imported on
    call: lightning is imported only after the bake)."""
    from epoch_clock import EpochClock

    return EpochClock()
