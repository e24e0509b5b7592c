"""Guards for a run, each a small Lightning callback on in configs/default.yaml: every random
state in checkpoints, gradient and loss sanity, memory growth. (Seeding itself is Lightning's
``seed_everything``, the norms Lightning's ``grad_norm``.)"""

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
EXPLODING = "exploding gradients: lower the learning rate or clip (--trainer.gradient_clip_val 1)"


class NonFiniteError(RuntimeError):
    """The loss or the gradient norm became NaN or infinite."""


class UnusedParameterError(RuntimeError):
    """Trainable parameters that can never be trained (see ``GradientMonitor``)."""


class RandomState(L.Callback):
    """Records the run's seed and carries every global random state through checkpoints:
    Lightning's hold none, so a resumed run would drop out and augment differently."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        seed = os.environ.get("PL_GLOBAL_SEED")
        if seed is None:
            warn(trainer, "run is not seeded: set `seed_everything: <int>` in the config")
        pl_module.hparams["seed"] = None if seed is None else int(seed)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        # Plain types and tensors only: checkpoints load with weights_only=True.
        state = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True))
        kind, keys, position, has_gauss, cached = state
        version, internal, gauss = random.getstate()
        checkpoint["rng_states"] = {
            "python": (version, torch.tensor(internal), gauss),
            "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached),
            "torch": torch.get_rng_state(),
            **({"cuda": torch.cuda.get_rng_state_all()} if torch.cuda.is_available() else {}),
        }

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        states = checkpoint.get("rng_states")
        if states is None:
            return
        version, internal, gauss = states["python"]
        random.setstate((version, tuple(internal.tolist()), gauss))
        kind, keys, position, has_gauss, cached = states["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, cached))
        torch.set_rng_state(states["torch"])
        if "cuda" in states and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(states["cuda"])


class GradientMonitor(L.Callback):
    """Logs gradient norms; stops a run whose loss or gradient norm is not finite, before the
    optimizer step. After the first backward pass it names every parameter that cannot learn:
    those with no gradient (an unused branch) and layers kept in a plain Python list or dict,
    which PyTorch never registers, so they are neither trained nor saved."""

    def __init__(
        self,
        log_every_n_steps: int = 50,
        check_finite: bool = True,
        on_unused: Literal["warn", "error", "ignore"] = "warn",
    ) -> None:
        """
        Args:
            log_every_n_steps: log norms (before any clipping) every N optimizer steps; 0: off.
            check_finite: stop when the loss (every step) or the total gradient norm (on the
                steps it is logged) is NaN or infinite.
            on_unused: what to do about parameters that cannot learn.
        """
        self.log_every_n_steps = log_every_n_steps
        self.check_finite = check_finite
        self.on_unused = on_unused
        self.loss: torch.Tensor | None = None
        self.checked_unused = False

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.checked_unused, self.loss = False, None

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        self.loss = loss.detach()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if not self.checked_unused:
            self.checked_unused = True
            self.report_unused(trainer, pl_module)
        total = None
        if self.log_every_n_steps > 0 and trainer.global_step % self.log_every_n_steps == 0:
            norms = grad_norm(pl_module, norm_type=2)
            total = torch.as_tensor(norms.get("grad_2.0_norm_total", 0.0))
            log_now(trainer, norms)
        if not self.check_finite:
            return
        if self.loss is not None and not torch.isfinite(self.loss).all():
            what = f"loss is {self.loss.float().mean().item()} at {where(trainer)}"
            if all(torch.isfinite(p).all() for p in pl_module.parameters()):
                raise NonFiniteError(
                    f"{what}; the weights were not updated by this step. Usual causes: a "
                    "learning rate too high, NaN/inf in the inputs, log(0) or a division by "
                    "zero in the loss. To find the operation: --trainer.detect_anomaly true."
                )
            raise NonFiniteError(
                f"{what}, and the weights are already NaN/inf: an earlier step had non-finite "
                f"gradients ({EXPLODING}). Gradients are checked every {self.log_every_n_steps} "
                "steps; log_every_n_steps: 1 stops at the step itself."
            )
        if total is not None and not torch.isfinite(total):
            raise NonFiniteError(
                f"gradient norm is {total.item()} at {where(trainer)}; the weights were not "
                f"updated by this step. Usual causes: {EXPLODING}."
            )

    def report_unused(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.on_unused == "ignore":
            return
        parts = []
        no_grad = [n for n, p in pl_module.named_parameters() if p.requires_grad and p.grad is None]
        if no_grad:
            parts.append(
                f"parameters with no gradient after the first backward pass: "
                f"{', '.join(no_grad)} (unused in forward, or detached from the loss)"
            )
        unregistered = list(unregistered_modules(pl_module))
        if unregistered:
            parts.append(
                f"layers or parameters in plain Python containers: {', '.join(unregistered)} "
                "(never trained nor saved: use nn.ModuleList / nn.ModuleDict / nn.ParameterList)"
            )
        if not parts:
            return
        message = f"untrainable parameters at {where(trainer)}: {'; '.join(parts)}"
        if self.on_unused == "error":
            raise UnusedParameterError(message)
        warn(trainer, message)


def unregistered_modules(module: nn.Module) -> Iterator[str]:
    """Names of modules and parameters held in plain lists, tuples or dicts of a submodule."""
    for prefix, sub in module.named_modules():
        for attribute, value in vars(sub).items():
            if attribute.startswith("_") or not isinstance(value, (list, tuple, dict)):
                continue
            items = value.values() if isinstance(value, dict) else value
            if any(isinstance(item, (nn.Module, nn.Parameter)) for item in items):
                yield f"{prefix}.{attribute}" if prefix else attribute


class MemoryMonitor(L.Callback):
    """Logs memory once per epoch (process RSS, and CUDA memory on a GPU) and warns when it
    grows epoch after epoch: the signature of tensors kept alive with their autograd graph,
    e.g. ``losses.append(loss)`` instead of ``losses.append(loss.item())``."""

    def __init__(self, growth_epochs: int = 4, min_growth_mib: float = 1.0) -> None:
        """
        Args:
            growth_epochs: warn after memory grew in this many consecutive epochs.
            min_growth_mib: growth below this per epoch is noise, not a leak.
        """
        self.growth_epochs = growth_epochs
        self.min_growth_mib = min_growth_mib
        self.previous: float | None = None
        self.growing = 0

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        figures = {"memory/rss_mib": psutil.Process().memory_info().rss / 2**20}
        if pl_module.device.type == "cuda":
            figures["memory/cuda_allocated_mib"] = torch.cuda.memory_allocated() / 2**20
            figures["memory/cuda_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        # Under DDP the largest process's figures: the one that runs out of memory.
        values = torch.tensor(list(figures.values()), device=pl_module.device)
        values = trainer.strategy.reduce(values, reduce_op="max")
        figures = dict(zip(figures, values.tolist(), strict=True))
        log_now(trainer, figures)
        current = figures.get("memory/cuda_allocated_mib", figures["memory/rss_mib"])
        grew = self.previous is not None and current - self.previous >= self.min_growth_mib
        self.growing, self.previous = (self.growing + 1 if grew else 0), current
        if self.growing == self.growth_epochs:
            warn(
                trainer,
                f"memory grew in each of the last {self.growing} epochs (now {current:.0f} "
                f"MiB, at {where(trainer)}). Likely cause: tensors kept alive with their "
                "autograd graph, e.g. a loss or outputs stored in a list or a running total: "
                "store `loss.item()` or `loss.detach()` instead.",
            )


def where(trainer: L.Trainer) -> str:
    return f"global step {trainer.global_step} (epoch {trainer.current_epoch})"


def log_now(trainer: L.Trainer, metrics: dict[str, Any]) -> None:
    """Write step metrics now, whatever the Trainer's log_every_n_steps (rank zero only)."""
    if trainer.is_global_zero:
        values = {key: float(value) for key, value in metrics.items()}
        for logger in trainer.loggers:
            logger.log_metrics(values, step=trainer.global_step)


def warn(trainer: L.Trainer, message: str) -> None:
    """Log on rank zero only, so a DDP run prints each message once."""
    if trainer.is_global_zero:
        log.warning(message)
