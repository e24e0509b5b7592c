"""A callback that benchmarks add to real `python train.py` runs from the command line:

    PYTHONPATH=<project>/src:benchmarks python train.py \
        --trainer.callbacks+=epoch_clock.EpochClock --trainer.callbacks.out=epochs.json

Rank zero writes each epoch's wall time (start to the next start: training, validation,
epoch-end callbacks and checkpoint writes) to ``out``. Timing inside the process keeps
start-up, test and export out of throughput figures without subtracting two noisy runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning as L


class EpochClock(L.Callback):
    def __init__(self, out: str) -> None:
        self.out = Path(out)
        self.times: list[float] = []
        self._start: float | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._lap()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._lap()
        if trainer.is_global_zero:
            self.out.write_text(json.dumps(self.times))

    def _lap(self) -> None:
        now = time.perf_counter()
        if self._start is not None:
            self.times.append(now - self._start)
        self._start = now
