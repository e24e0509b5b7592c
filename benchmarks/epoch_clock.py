"""Each epoch's full wall time: training, validation, the epoch-end callbacks and checkpoint
writes (from an epoch's start to the next one's; the sanity check is not an epoch).

Benchmarks add it to a Trainer they build (``baked.epoch_timer()``), or to a real
`python train.py` run from the command line, where rank zero writes the times and the
training samples of an epoch (every process's together) to ``out`` as JSON,
``{"seconds": [...], "train_samples": N}``:

    PYTHONPATH=<project>/src:benchmarks python train.py \
        --trainer.callbacks+=epoch_clock.EpochClock --trainer.callbacks.out=epochs.json

Timing inside the process keeps start-up, test and export out of throughput figures without
subtracting two noisy runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning as L


class EpochClock(L.Callback):
    def __init__(self, out: str | None = None) -> None:
        self.out = Path(out) if out else None
        self.times: list[float] = []
        self.train_samples = 0
        self._start: float | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._lap()
        self.train_samples = len(trainer.train_dataloader.dataset)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._lap()
        if self.out is not None and trainer.is_global_zero:
            figures = {"seconds": self.times, "train_samples": self.train_samples}
            self.out.write_text(json.dumps(figures))

    def _lap(self) -> None:
        now = time.perf_counter()
        if self._start is not None:
            self.times.append(now - self._start)
        self._start = now


class FitClock(L.Callback):
    """The seconds of each fit, from its setup to its end, appended to the JSON list in
    ``out`` (one entry per fit: a sweep's trials, in order)."""

    def __init__(self, out: str) -> None:
        self.out = Path(out)
        self._start = 0.0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._start = time.perf_counter()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        seconds = time.perf_counter() - self._start
        if trainer.is_global_zero:
            times = json.loads(self.out.read_text()) if self.out.exists() else []
            self.out.write_text(json.dumps([*times, seconds]))
