"""The end of a run, on rank zero: export, plots, baselines, summary.json and the lines a
person reads; or, for a run that stopped early, a summary.json that says why."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .baselines import compute_baselines
from .export import export_checkpoint
from .plots import write_plots
from .runtime import end_wandb_run
from .summary import build_summary, format_summary, predict_inputs, run_dir, write_summary


def finish(cli: Any, tested: Mapping[str, float], confusion: torch.Tensor, start: float) -> Path:
    """Export the best checkpoint (verified), draw the plots, write and print the summary."""
    trainer, data = cli.trainer, cli.datamodule
    best = getattr(trainer.checkpoint_callback, "best_model_path", "")
    formats = cli.config.export.formats  # None: every available format
    exported = None
    if best and formats != []:  # rank zero only: one writer per file
        exported = export_checkpoint(best, run_dir(trainer) / "export", formats, data)
    plots = write_plots(trainer, confusion, data.class_names)
    baselines = compute_baselines(data)  # what the network must beat, on its test split
    summary = build_summary(
        trainer,
        cli.config.get("seed_everything"),
        tested,
        time.perf_counter() - start,
        exported,
        plots,
        predict_inputs(data.preprocessing, data.input_shape, data.example_file()),
        class_names=data.class_names,
        baselines=baselines,
    )
    path = write_summary(summary, run_dir(trainer))
    print(format_summary(summary))
    print(f"summary: {path}")
    end_wandb_run(trainer.loggers)
    return path


def stop(
    cli: Any,
    start: float,
    status: str,
    reason: str,
    exit_code: int,
    resume: str | None = None,
    checkpoint: Path | None = None,
) -> None:
    """A run that ended before its test: summary.json with the status, the reason and where
    it stopped; the reason in one line (no traceback: it names the fix), the command that
    resumes it if there is one; then exit."""
    trainer = cli.trainer
    if trainer.is_global_zero:
        summary = build_summary(
            trainer,
            cli.config.get("seed_everything"),
            {},
            time.perf_counter() - start,
            status=status,
            reason=reason,
            resume=resume,
            last_checkpoint=checkpoint,
            class_names=cli.datamodule.class_names,
        )
        path = write_summary(summary, run_dir(trainer))
        print(f"{'error' if status == 'failed' else status}: {reason}", file=sys.stderr)
        if resume:
            print(f"resume: {resume}", file=sys.stderr)
        print(f"summary: {path}")
    end_wandb_run(trainer.loggers)
    raise SystemExit(exit_code)
