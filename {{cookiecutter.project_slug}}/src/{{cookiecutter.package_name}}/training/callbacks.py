"""Guards for a run, each a small Lightning callback on in configs/default.yaml: every random
state in checkpoints, gradient and loss sanity, memory growth. Seeding itself is Lightning's
``seed_everything`` and the norms are Lightning's ``grad_norm``.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator
from typing import Any, Literal, cast

import lightning as L
import numpy as np
import psutil
import torch
from lightning.pytorch.utilities import grad_norm
from torch import nn

log = logging.getLogger(__name__)

MIB = 2**20


class NonFiniteError(RuntimeError):
    """The loss or the gradient norm became NaN or infinite."""


class UnusedParameterError(RuntimeError):
    """Trainable parameters that can never be trained (see ``GradientMonitor``)."""


# --- randomness -----------------------------------------------------------------------


def collect_rng_states() -> dict[str, Any]:
    """Every global RNG state, as plain types and tensors (loadable with weights_only=True)."""
    # The legacy (tuple) form, which get_state returns by default; typed as either form.
    legacy = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    kind, keys, position, has_gauss, cached = legacy
    version, internal, gauss = random.getstate()
    states: dict[str, Any] = {
        "python": (version, torch.tensor(internal, dtype=torch.int64), gauss),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["torch.cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    version, internal, gauss = states["python"]
    internal = internal.tolist() if isinstance(internal, torch.Tensor) else internal
    random.setstate((version, tuple(internal), gauss))
    kind, keys, position, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    if "torch.cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch.cuda"])


class RandomState(L.Callback):
    """Records the run's seed and carries every global RNG state through checkpoints.

    Lightning's checkpoints hold no RNG state, so a resumed run would drop out and augment
    differently from an uninterrupted one; these states are restored before training goes on.
    """

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        seed = os.environ.get("PL_GLOBAL_SEED")
        if seed is None:
            _warn_once(trainer, "run is not seeded: set `seed_everything: <int>` in the config")
        elif os.environ.get("PL_SEED_WORKERS") != "1":
            _warn_once(
                trainer, "dataloader workers are not seeded: use seed_everything(workers=True)."
            )
        pl_module.hparams["seed"] = None if seed is None else int(seed)

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        checkpoint["rng_states"] = collect_rng_states()

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if "rng_states" in checkpoint:
            restore_rng_states(checkpoint["rng_states"])


# --- gradients ------------------------------------------------------------------------


EXPLODING = (
    "exploding gradients: lower the learning rate or clip them (--trainer.gradient_clip_val 1.0)"
)


class GradientMonitor(L.Callback):
    """Logs gradient norms and stops a run whose loss or gradients are not finite.

    After the first backward pass it names every parameter that cannot learn: those with
    no gradient (an unused branch) and layers kept in a plain Python list or dict, which
    PyTorch never registers, so they are neither trained nor saved.
    """

    def __init__(
        self,
        log_every_n_steps: int = 50,
        per_layer: bool = True,
        check_finite: bool = True,
        on_unused: Literal["warn", "error", "ignore"] = "warn",
    ) -> None:
        """
        Args:
            log_every_n_steps: log norms every N optimizer steps (0 turns logging off);
                norms are taken before any gradient clipping.
            per_layer: log one norm per parameter as well as the total.
            check_finite: stop, before the optimizer step, when the loss is NaN/inf (every
                step) or the total gradient norm is (on the steps it is logged).
            on_unused: what to do about parameters that cannot learn.
        """
        self.log_every_n_steps = log_every_n_steps
        self.per_layer = per_layer
        self.check_finite = check_finite
        self.on_unused = on_unused
        self._checked_unused = False
        self._loss: torch.Tensor | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._checked_unused = False
        self._loss = None

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        self._loss = loss.detach()  # checked before the optimizer step: one host sync

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if not self._checked_unused:
            self._checked_unused = True
            self._report_unused(trainer, pl_module)
        total: torch.Tensor | None = None
        if self.log_every_n_steps > 0 and trainer.global_step % self.log_every_n_steps == 0:
            norms = grad_norm(pl_module, norm_type=2)
            total = torch.as_tensor(norms.get("grad_2.0_norm_total", 0.0))
            _log_to_loggers(trainer, norms if self.per_layer else {"grad_2.0_norm_total": total})
        if not self.check_finite:
            return
        if self._loss is not None and not torch.isfinite(self._loss).all():
            raise NonFiniteError(self._loss_message(trainer))
        if total is not None and not torch.isfinite(total):
            raise NonFiniteError(
                f"gradient norm is {total.item()} at {_where(trainer)}; the weights were not "
                f"updated by this step. Usual causes: {EXPLODING}. To find the operation: "
                "--trainer.detect_anomaly true."
            )

    def _loss_message(self, trainer: L.Trainer) -> str:
        assert self._loss is not None
        what = f"loss is {self._loss.float().mean().item()} at {_where(trainer)}"
        if all(torch.isfinite(p).all() for p in trainer.lightning_module.parameters()):
            return (
                f"{what}; the weights were not updated by this step. Usual causes: a learning "
                "rate too high, NaN/inf in the inputs, or log(0) or a division by zero in the "
                "loss. To find the operation: --trainer.detect_anomaly true."
            )
        return (
            f"{what}, and the weights are already NaN/inf: an earlier step had non-finite "
            f"gradients. Usual causes: {EXPLODING}. Gradients are checked on the steps their "
            f"norms are logged (every {self.log_every_n_steps}); set log_every_n_steps: 1 to "
            "stop at the step itself."
        )

    def _report_unused(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.on_unused == "ignore":
            return
        no_grad = [
            name for name, p in pl_module.named_parameters() if p.requires_grad and p.grad is None
        ]
        unregistered = list(unregistered_modules(pl_module))
        if not (no_grad or unregistered):
            return
        parts = []
        if no_grad:
            parts.append(
                f"parameters with no gradient after the first backward pass: "
                f"{', '.join(no_grad)} (unused in forward, or detached from the loss)"
            )
        if unregistered:
            parts.append(
                f"layers or parameters in plain Python containers: {', '.join(unregistered)} "
                "(never trained nor saved: use nn.ModuleList / nn.ModuleDict / nn.ParameterList)"
            )
        message = "untrainable parameters at " + _where(trainer) + ": " + "; ".join(parts)
        if self.on_unused == "error":
            raise UnusedParameterError(message)
        _warn_once(trainer, message)


def unregistered_modules(module: nn.Module) -> Iterator[str]:
    """Names of modules/parameters held in plain lists, tuples or dicts of any submodule."""
    for prefix, sub in module.named_modules():
        for attribute, value in vars(sub).items():
            if attribute.startswith("_") or not isinstance(value, (list, tuple, dict)):
                continue
            items = value.values() if isinstance(value, dict) else value
            if any(isinstance(item, (nn.Module, nn.Parameter)) for item in items):
                yield f"{prefix}.{attribute}" if prefix else attribute


# --- memory ---------------------------------------------------------------------------


class MemoryMonitor(L.Callback):
    """Logs memory once per epoch (process RSS, or CUDA memory) and warns when it keeps
    growing: the signature of tensors kept alive with their autograd graph, e.g.
    ``losses.append(loss)`` instead of ``losses.append(loss.item())``.
    """

    def __init__(
        self,
        every_n_steps: int = 0,
        growth_epochs: int = 4,
        min_growth_mib: float = 1.0,
    ) -> None:
        """
        Args:
            every_n_steps: also log every N training steps (0: once per epoch only).
            growth_epochs: warn after memory grew in this many consecutive epochs.
            min_growth_mib: growth below this per epoch is noise, not a leak.
        """
        self.every_n_steps = every_n_steps
        self.growth_epochs = growth_epochs
        self.min_growth_mib = min_growth_mib
        self._process = psutil.Process()
        self._previous: float | None = None
        self._growing = 0
        self._warned = False

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any
    ) -> None:
        if self.every_n_steps > 0 and trainer.global_step % self.every_n_steps == 0:
            _log_to_loggers(trainer, self._measure(pl_module))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        figures = self._measure(pl_module)
        if trainer.world_size > 1:
            # Under DDP: the largest process's figure, the one that runs out of memory.
            values = torch.tensor(list(figures.values()), device=pl_module.device)
            values = trainer.strategy.reduce(values, reduce_op="max")
            figures = dict(zip(figures, values.tolist(), strict=True))
        _log_to_loggers(trainer, figures)
        current = figures.get("memory/cuda_allocated_mib", figures["memory/rss_mib"])
        if self._previous is not None and current - self._previous >= self.min_growth_mib:
            self._growing += 1
        else:
            self._growing = 0
        self._previous = current
        if self._growing >= self.growth_epochs and not self._warned:
            self._warned = True
            _warn_once(
                trainer,
                f"memory grew in each of the last {self._growing} epochs (now {current:.0f} "
                f"MiB, at {_where(trainer)}). Likely cause: tensors kept alive with their "
                "autograd graph, e.g. a loss or outputs stored in a list or a running total: "
                "store `loss.item()` or `loss.detach()` instead.",
            )

    def _measure(self, pl_module: L.LightningModule) -> dict[str, float]:
        figures = {
            "memory/rss_mib": self._process.memory_info().rss / MIB,
            "memory/peak_rss_mib": _peak_rss_bytes(self._process) / MIB,
        }
        if pl_module.device.type == "cuda":
            device = pl_module.device
            figures["memory/cuda_allocated_mib"] = torch.cuda.memory_allocated(device) / MIB
            figures["memory/cuda_reserved_mib"] = torch.cuda.memory_reserved(device) / MIB
            figures["memory/cuda_peak_mib"] = torch.cuda.max_memory_allocated(device) / MIB
        return figures


def _peak_rss_bytes(process: psutil.Process) -> float:
    """Peak RSS: ru_maxrss is KiB on Linux, bytes on macOS; Windows reports peak_wset."""
    info = process.memory_info()
    if hasattr(info, "peak_wset"):
        return float(info.peak_wset)
    import resource  # POSIX only

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak if os.uname().sysname == "Darwin" else peak * 1024)


# --- helpers --------------------------------------------------------------------------


def _where(trainer: L.Trainer) -> str:
    return f"global step {trainer.global_step} (epoch {trainer.current_epoch})"


def _log_to_loggers(trainer: L.Trainer, metrics: dict[str, Any]) -> None:
    """Write step metrics now, whatever the Trainer's log_every_n_steps (rank zero only)."""
    if trainer.is_global_zero:
        values = {key: float(value) for key, value in metrics.items()}
        for logger in trainer.loggers:
            logger.log_metrics(values, step=trainer.global_step)


def _warn_once(trainer: L.Trainer, message: str) -> None:
    """Log on rank zero only, so a DDP run prints each message once."""
    if trainer.is_global_zero:
        log.warning(message)
