"""The end of a run, on rank zero: plots, the verified export, baselines, summary.json and the
lines a person reads; or, for a run stopped early, a summary.json that says why."""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

from ..export.verify import export_checkpoint, load_module
from ..training.checkpoints import run_dir
from ..training.loggers import end_logger_run, how_to_view_logs, log_dir
from .plots import MetricHistory, write_curves

PACKAGES = ("torch", "lightning", "torchmetrics", "scikit-learn", "numpy")
PREDICT_PREFERENCE = ("torch.export", "torchscript", "onnx", "int8")


def finish(cli: Any, tested: Mapping[str, float], start: float) -> Path:
    """Plots, the export of the best checkpoint (verified), baselines and summary.json."""
    trainer, data = cli.trainer, cli.datamodule
    folder = run_dir(trainer)
    best = trainer.checkpoint_callback.best_model_path
    module = load_module(best) if best else cli.model.cpu().eval()
    task = module.task
    test_x, test_y = map(torch.from_numpy, data.split_arrays("test"))
    with torch.inference_mode():
        outputs = module.model(test_x)  # the tested model on the test split
    history = next((c.history for c in trainer.callbacks if isinstance(c, MetricHistory)), [])
    plots = {
        "curves": write_curves(history, folder / "curves.png"),
        task.plot_name: task.plot_test(outputs, test_y, folder / f"{task.plot_name}.png"),
    }
    formats = cli.config.export.formats  # None: the default formats
    exported = None
    if best and formats != []:
        exported = export_checkpoint(best, folder / "export", formats, data, module)
    summary = build_summary(cli, start, "completed", metrics=dict(tested), exported=exported)
    summary["paths"]["plots"] = {name: str(path) for name, path in plots.items() if path}
    train = data.split_arrays("train")
    summary["baselines"] = task.baselines(train, data.split_arrays("test"), outputs)
    path = write_summary(summary, folder)
    print("\n".join(format_summary(summary, task)))
    print(f"summary: {path}")
    end_logger_run(trainer.loggers)
    return path


def stop(cli: Any, start: float, status: str, reason: str, exit_code: int, **more: Any) -> None:
    """A run that ended before its test: summary.json with the status and the reason, the
    reason in one line (no traceback: it names the fix), how to resume it; then exit."""
    if cli.trainer.is_global_zero:
        summary = build_summary(cli, start, status, reason=reason, **more)
        path = write_summary(summary, run_dir(cli.trainer))
        print(f"{'error' if status == 'failed' else status}: {reason}", file=sys.stderr)
        if summary["resume"]:
            print(f"resume: {summary['resume']}", file=sys.stderr)
        print(f"summary: {path}")
    end_logger_run(cli.trainer.loggers)
    raise SystemExit(exit_code)


def build_summary(
    cli: Any,
    start: float,
    status: str,
    metrics: dict[str, float] | None = None,
    reason: str | None = None,
    resume: str | None = None,
    checkpoint: Path | None = None,
    exported: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the run did. ``status``: completed (trained, tested, exported), failed (an error
    stopped it: ``reason``) or interrupted (``resume`` goes on from ``checkpoint``)."""
    trainer, data = cli.trainer, cli.datamodule
    callback = trainer.checkpoint_callback
    best = callback.best_model_path or None
    metrics = {key: round(float(value), 6) for key, value in (metrics or {}).items()}
    if callback.best_model_score is not None:
        metrics[f"best/{callback.monitor}"] = round(float(callback.best_model_score), 6)
    last = checkpoint or run_dir(trainer) / "checkpoints" / "last.ckpt"
    return {
        "status": status,
        "reason": reason,
        "resume": resume,
        "metrics": metrics,
        "baselines": None,
        "seed": cli.config.get("seed_everything"),
        "epochs": trainer.current_epoch,
        "global_step": trainer.global_step,
        "wall_time_s": round(time.perf_counter() - start, 2),
        "versions": {"python": platform.python_version(), **{p: version(p) for p in PACKAGES}},
        "paths": {
            "run_dir": str(run_dir(trainer)),
            "best_checkpoint": str(Path(best).resolve()) if best else None,
            "last_checkpoint": str(last.resolve()) if last.is_file() else None,
            "logs": log_dir(trainer),
            "export_report": exported["report"] if exported else None,
            "export_metadata": exported["metadata"] if exported else None,
            "plots": {},
        },
        "view_logs": how_to_view_logs(trainer),
        "task": data.task,
        "output_names": data.output_names,
        **({"class_names": data.output_names} if data.task == "classification" else {}),
        "predict_inputs": predict_inputs(data),
        "export": exported["formats"] if exported else {},
    }


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
    if data.preprocessing.get("kind") != "image":
        target = "label" if data.task == "classification" else "target"
        return f"INPUTS  (.npy or .csv, rows of {shape} numbers without the {target})"
    if data.example_file():
        return f"{data.example_file()}  (any image files, or folders of them)"
    ink = ", dark ink on light" if data.preprocessing.get("invert") else ""
    return f"IMAGES  (image files or folders{ink}; or an .npy of shape (N, {shape}))"
