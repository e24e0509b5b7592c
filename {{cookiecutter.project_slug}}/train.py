"""Train, test the best checkpoint, export it (verified), and write summary.json.

To run:
    python train.py                              # configs/default.yaml
    python train.py --trainer.max_epochs 5       # override any key
    python train.py --config my.yaml             # layer your own YAML on top
    python train.py --config configs/ddp-cpu.yaml  # a preset: see configs/ and the README
    python train.py --print_config               # the full resolved configuration
    python train.py --ckpt_path last             # resume the newest run's last.ckpt
    python train.py --export.formats [int8]      # export only int8 ([] for no export)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from {{ cookiecutter.package_name }}.callbacks import NonFiniteError, UnusedParameterError
from {{ cookiecutter.package_name }}.cli import STARTUP_ERRORS, build_cli
from {{ cookiecutter.package_name }}.interruption import (
    TrainingInterrupted,
    lightning_stop,
    resume_command,
)
from {{ cookiecutter.package_name }}.report import finish, stop
from {{ cookiecutter.package_name }}.runtime import (
    configure_logging,
    configure_threads,
    describe_run,
    freeze_imports,
    keep_wandb_offline_safe,
    leave_process_group,
    quiet_known_noise,
)

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "default.yaml"
# Raised by training for reasons in the run's data or settings, with the fix in the message:
# printed in one line, no traceback. Anything else is a bug and keeps its traceback.
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
    keep_wandb_offline_safe(trainer.loggers)
    describe_run(trainer, cli.model, cli.datamodule)
    try:
        trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.ckpt_path)
    except RUN_ERRORS as error:
        leave_process_group()
        stop(cli, start, "failed", str(error), exit_code=1)
    except TrainingInterrupted as interrupted:  # a signal during training: last.ckpt saved
        leave_process_group()
        checkpoint = interrupted.checkpoint
        resume = resume_command(cli.args, checkpoint)
        stop(cli, start, "interrupted", str(interrupted), interrupted.exit_code, resume, checkpoint)
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
    confusion = cli.model.test_confusion.compute()  # on every rank: it syncs under DDP
    leave_process_group()  # that was the last collective call
    if not trainer.is_global_zero:
        return None
    return finish(cli, tested[0], confusion, start)


if __name__ == "__main__":
    freeze_imports()  # a script: nothing of an earlier run is alive to keep
    main()
