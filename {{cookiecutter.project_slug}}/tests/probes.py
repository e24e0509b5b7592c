"""Callbacks that tests add to real `python train.py` runs to see inside each process.

Added from the command line (`--trainer.callbacks+=tests.probes.RankProbe
--trainer.callbacks.out_dir DIR`), so the run under test is the real entry point and launcher.
"""

from __future__ import annotations

import json
import os
import signal as signal_module
from pathlib import Path
from typing import Any

import lightning as L
import torch


def datamodule(trainer: L.Trainer) -> Any:
    """The run's data module (Lightning sets trainer.datamodule when fit starts)."""
    return trainer.datamodule  # type: ignore[attr-defined]


class RankProbe(L.Callback):
    """Each rank writes ``rank-<N>.json``: its place in the world, CPU threads, distributed
    backend, the dataset indices its training sampler yields in every epoch, the epoch
    metrics it logged, and the test samples its (synced) test metrics count."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self.facts: dict[str, Any] = {"indices": {}}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.facts.update(
            global_rank=trainer.global_rank,
            local_rank=trainer.local_rank,
            world_size=trainer.world_size,
            threads=torch.get_num_threads(),
            backend=torch.distributed.get_backend() if distributed else None,
            strategy=type(trainer.strategy).__name__,
            train_size=len(datamodule(trainer).train_set),
        )

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning has already called sampler.set_epoch(epoch): this is the epoch's order.
        loader = trainer.train_dataloader
        assert loader is not None
        sampler = loader.sampler
        self.facts["sampler"] = type(sampler).__name__
        self.facts["indices"][trainer.current_epoch] = [int(i) for i in sampler]

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metrics = trainer.callback_metrics
        self.facts["metrics"] = {k: float(v) for k, v in metrics.items() if "/" in k}
        self._write(trainer)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The test loss's weight (its samples), synced over the processes as compute() does:
        # collective, so every rank calls it.
        metrics: Any = pl_module.test_metrics
        loss = metrics["loss"]
        loss.sync()
        self.facts["test_samples_total"] = int(loss.weight)
        loss.unsync()
        self.facts["test_size"] = len(datamodule(trainer).test_set)
        self._write(trainer)

    def _write(self, trainer: L.Trainer) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"rank-{trainer.global_rank}.json"
        path.write_text(json.dumps(self.facts))


class SendSignal(L.Callback):
    """Sends ``signal`` (a name, e.g. SIGINT) to its own process ``times`` times once
    ``step`` optimizer steps have run: a real signal at a known step, for runs that a test
    must interrupt at the same place every time."""

    def __init__(
        self, step: int, signal: str = "SIGINT", times: int = 1, rank: int | None = None
    ) -> None:
        """``rank``: only this DDP process sends it (None: every process, to itself)."""
        self.step = step
        self.signal = getattr(signal_module, signal)
        self.times = times
        self.rank = rank

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        chosen = self.rank is None or trainer.global_rank == self.rank
        if trainer.global_step == self.step and chosen:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signal)


class SignalAtLastValidation(L.Callback):
    """Sends SIGINT to its own process at the end of the last epoch's validation: after the
    last training step, where training no longer stops for it."""

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        last_epoch = (trainer.max_epochs or 0) - 1
        if not trainer.sanity_checking and trainer.current_epoch == last_epoch:
            os.kill(os.getpid(), signal_module.SIGINT)


class StepAtStop(L.Callback):
    """Each process writes ``stop-rank-<N>.json`` when fit ends on an exception: the step
    it stopped at and the exception's type."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)

    def on_exception(self, trainer: L.Trainer, pl_module: Any, exception: BaseException) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        facts = {"global_step": trainer.global_step, "exception": type(exception).__name__}
        (self.out_dir / f"stop-rank-{trainer.global_rank}.json").write_text(json.dumps(facts))
