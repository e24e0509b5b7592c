"""A callback that sweep tests add to every trial (`--trainer.callbacks+=...`)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import lightning as L


class SignalInTrial(L.Callback):
    """Sends ``signal`` (a name: SIGINT, SIGKILL) to its own process in the first training
    step of sweep trial ``trial``, which its run folder names: Ctrl-C or a kill, at the same
    place every time, whatever the logger."""

    def __init__(self, trial: int, signal: str = "SIGINT") -> None:
        self.trial, self.signal = trial, signal

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        folder = Path(trainer.default_root_dir).name
        if folder == f"trial-{self.trial:03d}" and trainer.global_step == 1:
            os.kill(os.getpid(), getattr(signal, self.signal))
