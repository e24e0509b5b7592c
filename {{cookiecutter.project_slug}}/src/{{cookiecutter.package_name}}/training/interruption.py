"""Ctrl-C and SIGTERM stop a run between two training steps, with its work saved.

Lightning's own Ctrl-C raises wherever the code is (inside an optimizer step, say) and exits
1; its SIGTERM stops without a checkpoint. Here a signal only asks for a stop: the run ends
the step in progress, writes last.ckpt there (every DDP process stops at the same step) and
raises ``TrainingInterrupted``, which train.py turns into a summary, the command that resumes
the run and exit code 130 or 143. A second Ctrl-C stops at once.
"""

from __future__ import annotations

import logging
import shlex
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from .checkpoints import run_dir

log = logging.getLogger(__name__)

# What a shell reports for a process ended by each signal (128 + the signal's number).
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class TrainingInterrupted(Exception):
    """A stop asked for by a signal, raised after ``checkpoint`` was written."""

    def __init__(self, signum: signal.Signals, checkpoint: Path) -> None:
        self.signum = signum
        self.checkpoint = checkpoint
        self.exit_code = EXIT_CODES[signum]
        super().__init__(f"stopped by {NAMES[signum]}")


def lightning_stop(exit: SystemExit) -> tuple[str, int]:
    """The reason and exit code of Lightning's own stop on a signal (before training, or a
    second Ctrl-C), which it raises as SystemExit: SIGTERMException for SIGTERM."""
    signum = signal.SIGTERM if isinstance(exit, SIGTERMException) else signal.SIGINT
    return f"stopped by {NAMES[signum]}", EXIT_CODES[signum]


class StopOnSignal(L.Callback):
    """On SIGINT or SIGTERM during training: finish the optimizer step, write last.ckpt,
    stop. In place for the training loop only: before and after it, Lightning's own handling
    applies, with no training state to keep."""

    def __init__(self) -> None:
        self.requested: int | None = None
        self.previous: dict[int, Any] = {}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After Lightning's own SIGTERM handler is in place: this one replaces it in training.
        if threading.current_thread() is threading.main_thread():  # where signals arrive
            self.requested = None
            self.previous = {signum: signal.signal(signum, self.on_signal) for signum in NAMES}

    def on_signal(self, signum: int, frame: Any) -> None:
        if self.requested is None:
            self.requested = signum
            log.warning(
                "%s: stopping after this training step and saving last.ckpt (Ctrl-C again to "
                "stop at once, without saving)",
                NAMES[signal.Signals(signum)],
            )
        elif signum == signal.SIGINT:
            self.restore()
            raise KeyboardInterrupt

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # A step boundary: the optimizer has stepped (not mid-way through accumulating
        # gradients, which checkpoints do not hold).
        last = batch_idx + 1 == trainer.num_training_batches
        if (batch_idx + 1) % trainer.accumulate_grad_batches and not last:
            return
        # Collective under DDP: the processes stop at the same step whichever got the signal.
        if not trainer.strategy.reduce_boolean_decision(self.requested is not None, all=False):
            return
        # The signal's name for the summary, also on a process that did not get it.
        asked = torch.tensor(self.requested or 0, device=trainer.strategy.root_device)
        signum = signal.Signals(int(trainer.strategy.reduce(asked, reduce_op="max")))
        path = run_dir(trainer) / "checkpoints" / "last.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # rank zero writes; all take part
        self.restore()
        raise TrainingInterrupted(signum, path)

    def missed_request(self) -> tuple[str, int] | None:
        """(reason, exit code) of a signal that came after the last training step (during the
        final validation), which the fit finished without acting on; None if none did. A
        sweep must stop there rather than start its next trial."""
        if self.requested is None:
            return None
        signum = signal.Signals(self.requested)
        return f"stopped by {NAMES[signum]}", EXIT_CODES[signum]

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.restore()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.restore()

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}


def resume_command(args: Sequence[str], checkpoint: Path, script: str = "train.py") -> str:
    """The command that goes on from ``checkpoint``: the run's own arguments, any earlier
    ``--ckpt_path`` replaced."""
    kept: list[str] = []
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
        elif arg == "--ckpt_path":
            skip_next = True
        elif not arg.startswith("--ckpt_path="):
            kept.append(arg)
    try:
        shown = checkpoint.resolve().relative_to(Path.cwd())
    except ValueError:
        shown = checkpoint.resolve()
    return shlex.join(["python", script, *kept, "--ckpt_path", str(shown)])
