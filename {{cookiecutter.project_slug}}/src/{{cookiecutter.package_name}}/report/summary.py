"""The end of a run, on rank zero: plots, the verified export, baselines, summary.json and the
lines a person reads; or, for a run stopped early, a summary.json that says why."""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import lightning as L
import torch

from ..export.verify import export_checkpoint, load_model
from ..training.checkpoints import run_dir
from ..training.loggers import end_logger_run, how_to_view_logs, log_dir
from .plots import MetricHistory, write_curves

PACKAGES = ("torch", "lightning", "torchmetrics", "scikit-learn", "numpy")
PREDICT_PREFERENCE = ("torch.export", "torchscript", "onnx", "int8")


def finish(cli: Any, tested: Mapping[str, float], start: float) -> Path:
    """Plots, the export of the best checkpoint (verified), baselines and summary.json."""
    trainer, data, task = cli.trainer, cli.datamodule, cli.model.task
    folder = run_dir(trainer)
    best = getattr(trainer.checkpoint_callback, "best_model_path", "")
    model = load_model(best) if best else cli.model.model.cpu().eval()
    test_x, test_y = map(torch.from_numpy, data.split_arrays("test"))
    with torch.inference_mode():
        outputs = model(test_x)  # the tested model on the test split, for the plots
    history = next((c.history for c in trainer.callbacks if isinstance(c, MetricHistory)), [])
    plots = {
        "curves": write_curves(history, folder / "curves.png"),
        "confusion_matrix": task.plot_test(outputs, test_y, folder / "confusion_matrix.png"),
    }
    formats = cli.config.export.formats  # None: the default formats
    exported = None
    if best and formats != []:
        exported = export_checkpoint(best, folder / "export", formats, data, model)
    summary = build_summary(
        trainer,
        cli.config.get("seed_everything"),
        tested,
        time.perf_counter() - start,
        exported=exported,
        plots={name: str(path) for name, path in plots.items() if path},
        predict_inputs=predict_inputs(data),
        class_names=data.class_names,
        baselines=task.baselines(data.split_arrays("train"), data.split_arrays("test")),
    )
    path = write_summary(summary, folder)
    print("\n".join(format_summary(summary, task)))
    print(f"summary: {path}")
    end_logger_run(trainer.loggers)
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
    """A run that ended before its test: summary.json with the status and the reason, the
    reason in one line (no traceback: it names the fix), how to resume it; then exit."""
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
    end_logger_run(trainer.loggers)
    raise SystemExit(exit_code)


def build_summary(
    trainer: L.Trainer,
    seed: int | None,
    test_metrics: Mapping[str, float],
    wall_time_s: float,
    exported: dict[str, Any] | None = None,
    plots: dict[str, str] | None = None,
    predict_inputs: str = "INPUTS",
    status: str = "completed",
    reason: str | None = None,
    class_names: list[str] | None = None,
    resume: str | None = None,
    last_checkpoint: Path | None = None,
    baselines: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the run did. ``status``: completed (trained, tested, exported), failed (an error
    stopped it: ``reason``) or interrupted (``resume`` goes on from ``last_checkpoint``)."""
    checkpoint = trainer.checkpoint_callback
    best = getattr(checkpoint, "best_model_path", "") or None
    best_score = getattr(checkpoint, "best_model_score", None)
    monitor = getattr(checkpoint, "monitor", None)
    if last_checkpoint is None:
        found = run_dir(trainer) / "checkpoints" / "last.ckpt"
        last_checkpoint = found if found.is_file() else None
    metrics = {key: round(float(value), 6) for key, value in test_metrics.items()}
    if best_score is not None:
        metrics[f"best/{monitor}"] = round(float(best_score), 6)
    return {
        "status": status,
        "reason": reason,
        "resume": resume,
        "metrics": metrics,
        "baselines": baselines,
        "seed": seed,
        "epochs": trainer.current_epoch,
        "global_step": trainer.global_step,
        "wall_time_s": round(wall_time_s, 2),
        "versions": package_versions(),
        "paths": {
            "run_dir": str(run_dir(trainer)),
            "best_checkpoint": str(Path(best).resolve()) if best else None,
            "last_checkpoint": str(last_checkpoint.resolve()) if last_checkpoint else None,
            "logs": log_dir(trainer),
            "export_report": exported["report"] if exported else None,
            "export_metadata": exported["metadata"] if exported else None,
            "plots": plots or {},
        },
        "view_logs": how_to_view_logs(trainer),
        "class_names": class_names,
        "predict_inputs": predict_inputs,
        "export": exported["formats"] if exported else {},
    }


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def write_summary(summary: dict[str, Any], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path


def format_summary(summary: dict[str, Any], task: Any) -> list[str]:
    """The lines a person reads at the end of a run."""
    paths = summary["paths"]
    first, *notes = task.summary_lines(summary["metrics"], summary.get("baselines"))
    lines = [
        f"{first} after {summary['epochs']} epochs in {summary['wall_time_s']:.1f} s "
        f"(seed {summary['seed']})",
        *notes,
        f"best checkpoint: {paths['best_checkpoint']}",
    ]
    if paths["plots"]:
        lines.append(f"plots: {', '.join(paths['plots'].values())}")
    logs = paths["logs"] or "none (no logger: --trainer.logger false)"
    lines += [f"logs: {hint}" for hint in summary["view_logs"]] or [f"logs: {logs}"]
    exported = {name: report for name, report in summary["export"].items() if report["path"]}
    if exported:
        lines.append(f"exports ({', '.join(exported)}), verified: {paths['export_report']}")
        # The fastest exact format written: any of them predicts the same classes.
        preferred = [fmt for fmt in PREDICT_PREFERENCE if fmt in exported] or list(exported)
        artifact = exported[preferred[0]]["path"]
        lines.append(f"predict: python predict.py {artifact} {summary['predict_inputs']}")
    return lines


def predict_inputs(data: Any) -> str:
    """What predict.py takes for this data: a real file when there is one, else what it
    must hold."""
    shape = ", ".join(map(str, data.input_shape))
    preprocessing = data.preprocessing
    if preprocessing.get("kind") == "image":
        example = data.example_file()
        if example:
            return f"{example}  (any image files, or folders of them)"
        ink = ", dark ink on light" if preprocessing.get("invert") else ""
        return f"IMAGES  (image files or folders{ink}; or an .npy of shape (N, {shape}))"
    return f"INPUTS  (.npy or .csv, rows of {shape} numbers without the label)"
