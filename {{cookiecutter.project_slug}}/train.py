"""Train, test the best checkpoint, export it (verified), and write summary.json.

To run:
    python train.py                              # configs/default.yaml
    python train.py --trainer.max_epochs 5       # override any key
    python train.py --config configs/ddp-cpu.yaml  # a preset: see configs/ and the README
    python train.py --print_config               # the full resolved configuration
    python train.py --ckpt_path last             # resume the newest run's last.ckpt
    python train.py --export.formats [onnx]      # other export formats ([] for none)
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import torch

from {{ cookiecutter.package_name }}.report.summary import finish, stop
from {{ cookiecutter.package_name }}.runtime import (
    configure_logging,
    configure_threads,
    describe_run,
    leave_process_group,
    quiet_known_noise,
)
from {{ cookiecutter.package_name }}.training.callbacks import NonFiniteError, UnusedParameterError
from {{ cookiecutter.package_name }}.training.cli import STARTUP_ERRORS, build_cli
from {{ cookiecutter.package_name }}.training.interruption import (
    TrainingInterrupted,
    lightning_stop,
    resume_command,
)

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "default.yaml"
# Raised by training for reasons in the data or settings, the fix in the message: one line,
# no traceback. Anything else is a bug and keeps its traceback.
RUN_ERRORS = (NonFiniteError, UnusedParameterError, torch.OutOfMemoryError)


def main(args: list[str] | None = None) -> Path | None:
    """Run fit -> test -> export; return the path of summary.json (None on ranks but zero)."""
    start = time.perf_counter()
    quiet_known_noise()
    configure_logging()
    configure_threads()
    try:
        cli = build_cli(args, DEFAULT_CONFIG)
    except STARTUP_ERRORS as error:  # raised before any training
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    trainer = cli.trainer
    describe_run(trainer, cli.model, cli.datamodule)
    try:
        trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.ckpt_path)
    except RUN_ERRORS as error:
        leave_process_group()
        stop(cli, start, "failed", str(error), exit_code=1)
    except TrainingInterrupted as interrupted:  # a signal during training: last.ckpt saved
        leave_process_group()
        resume = resume_command(cli.args, interrupted.checkpoint)
        stop(cli, start, "interrupted", str(interrupted), interrupted.exit_code, resume=resume)
    except SystemExit as exit:  # Lightning's: a signal before training, or a 2nd Ctrl-C
        if not trainer.interrupted:
            raise
        reason, exit_code = lightning_stop(exit)
        stop(cli, start, "interrupted", reason, exit_code=exit_code)
    best = getattr(trainer.checkpoint_callback, "best_model_path", "")
    # verbose=False: the summary below prints the test metrics once, in plain lines.
    tested = trainer.test(
        cli.model, datamodule=cli.datamodule, ckpt_path=best or None, verbose=False
    )
    leave_process_group()  # that was the last collective call
    if not trainer.is_global_zero:
        return None
    return finish(cli, tested[0], start)


if __name__ == "__main__":
    # Out of the garbage collector's sight for good: the imported modules' millions of objects
    # live until the process ends anyway, and its collections then scan only the run's own.
    gc.freeze()
    main()
