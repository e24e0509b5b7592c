"""summary.json: what a run produced, where it put it, and how to reproduce it."""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, TensorBoardLogger, WandbLogger

from .baselines import linear_gap

PACKAGES = ("torch", "lightning", "torchmetrics", "scikit-learn", "numpy")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def run_dir(trainer: L.Trainer) -> Path:
    """The folder that holds this run's checkpoints/ (and, for file loggers, its logs)."""
    checkpoint = trainer.checkpoint_callback
    dirpath = getattr(checkpoint, "dirpath", None)  # a ModelCheckpoint's
    if dirpath:
        return Path(dirpath).parent.resolve()
    return Path(_log_dir(trainer) or trainer.default_root_dir).resolve()


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
    stopped it; ``reason`` says which) or interrupted (Ctrl-C or SIGTERM; ``resume`` is the
    command that goes on from ``last_checkpoint``). ``baselines``: see baselines.py (None for
    a run that stopped before its test)."""
    checkpoint = trainer.checkpoint_callback
    best = getattr(checkpoint, "best_model_path", "") or None
    best_score = getattr(checkpoint, "best_model_score", None)
    monitor = getattr(checkpoint, "monitor", None)
    return {
        "status": status,
        "reason": reason,
        "resume": resume,
        "metrics": {
            **{key: round(float(value), 6) for key, value in test_metrics.items()},
            **({f"best/{monitor}": round(float(best_score), 6)} if best_score is not None else {}),
        },
        "baselines": baselines,
        "seed": seed,
        "epochs": trainer.current_epoch,
        "global_step": trainer.global_step,
        "wall_time_s": round(wall_time_s, 2),
        "versions": package_versions(),
        "paths": {
            "run_dir": str(run_dir(trainer)),
            "best_checkpoint": str(Path(best).resolve()) if best else None,
            "last_checkpoint": (
                str(last_checkpoint.resolve()) if last_checkpoint else _last_checkpoint(trainer)
            ),
            "logs": _log_dir(trainer),
            "export_report": exported["report"] if exported else None,
            "export_metadata": exported["metadata"] if exported else None,
            "plots": plots or {},
        },
        "view_logs": how_to_view_logs(trainer),
        "class_names": class_names,
        "predict_inputs": predict_inputs,
        "export": exported["formats"] if exported else {},
    }


def _log_dir(trainer: L.Trainer) -> str | None:
    """The first logger's folder; for MLflow its store (a database file, or a server's URL).
    (Not trainer.log_dir: under DDP that is a collective call, and this runs on rank zero.)"""
    if not trainer.loggers:
        return None
    logger = trainer.loggers[0]
    if isinstance(logger, MLFlowLogger):
        return logger._tracking_uri.removeprefix("sqlite:///")
    folder = getattr(logger, "log_dir", None) or logger.save_dir
    return str(Path(folder).resolve()) if folder else None


def how_to_view_logs(trainer: L.Trainer) -> list[str]:
    """For each logger, the command (or file) that shows this run's curves."""
    hints = []
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            hints.append(f"tensorboard --logdir {Path(logger.root_dir).resolve()}")
        elif isinstance(logger, CSVLogger):
            hints.append(f"metrics per epoch: {Path(logger.log_dir).resolve() / 'metrics.csv'}")
        elif isinstance(logger, WandbLogger):
            run = logger.experiment
            # Offline, each process that logged to the run (a resumed run: several) has a
            # folder named after the run id; `wandb sync` uploads them into the one run.
            offline = Path(run.sync_dir).resolve().parent / f"offline-run-*-{run.id}"
            hints.append(f"wandb sync {offline}" if run.offline else f"wandb: {run.url}")
        elif isinstance(logger, MLFlowLogger):
            from .mlflow_store import how_to_view

            hints.append(how_to_view(logger._tracking_uri, logger.experiment_id, logger.run_id))
    return hints


def _last_checkpoint(trainer: L.Trainer) -> str | None:
    """The newest checkpoint: the one written by the unmonitored (every-epoch) callback."""
    for callback in trainer.checkpoint_callbacks:
        path = getattr(callback, "last_model_path", "")
        if not path and getattr(callback, "monitor", "") is None:
            path = getattr(callback, "best_model_path", "")
        if path:
            return str(Path(path).resolve())
    return None


def write_summary(summary: dict[str, Any], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path


def format_summary(summary: dict[str, Any]) -> str:
    """A few lines a person reads at the end of a run."""
    metrics = summary["metrics"]
    paths = summary["paths"]
    lines = [
        f"test accuracy {metrics.get('test/acc', float('nan')):.4f}, "
        f"test loss {metrics.get('test/loss', float('nan')):.4f} "
        f"after {summary['epochs']} epochs in {summary['wall_time_s']:.1f} s "
        f"(seed {summary['seed']})",
        *baseline_lines(metrics.get("test/acc"), summary.get("baselines")),
        f"best checkpoint: {paths['best_checkpoint']}",
    ]
    if paths["plots"]:
        lines.append(f"plots: {', '.join(paths['plots'].values())}")
    logs = paths["logs"] or "none (no logger: --trainer.logger false)"
    lines += [f"logs: {hint}" for hint in summary["view_logs"]] or [f"logs: {logs}"]
    exported = {name: report for name, report in summary["export"].items() if report["path"]}
    if exported:
        lines.append(f"exports ({', '.join(exported)}), verified: {paths['export_report']}")
        # The fastest exact format that was written: any of them predicts the same classes.
        preferred = [fmt for fmt in PREDICT_PREFERENCE if fmt in exported] or list(exported)
        artifact = exported[preferred[0]]["path"]
        lines.append(f"predict: python predict.py {artifact} {summary['predict_inputs']}")
    return "\n".join(lines)


def baseline_lines(accuracy: float | None, baselines: dict[str, Any] | None) -> list[str]:
    """The baselines beside the network's test accuracy, and a nudge to tune the network when
    a linear model beats it."""
    if not baselines:
        return []
    linear = baselines["logistic_regression"]
    regression = f"{linear:.4f}" if linear is not None else f"skipped: {baselines.get('skipped')}"
    lines = [
        f"baselines (test split): majority class {baselines['majority_class']:.4f}, "
        f"logistic regression {regression}"
    ]
    gap = linear_gap(accuracy, baselines)
    if gap is not None:
        what = f"note: the network gets {gap} than the logistic regression"
        if gap.within_chance:  # worth a sweep, not a verdict
            lines.append(
                f"{what}, {gap.chance_words()}; python sweep.py may still find a better one "
                "(README: Tune it)"
            )
        else:
            lines.append(f"{what}: tune it with python sweep.py (README: Tune it)")
    return lines


PREDICT_PREFERENCE = ("torch.export", "torchscript", "onnx", "int8")


def predict_inputs(
    preprocessing: dict[str, Any], input_shape: Sequence[int], example_file: str | None
) -> str:
    """What predict.py takes for this data: a real file when there is one, else a placeholder
    and what it must hold."""
    shape = ", ".join(map(str, input_shape))
    if preprocessing.get("kind") == "image":
        if example_file:
            return f"{example_file}  (any image files, or folders of them)"
        ink = ", dark ink on light" if preprocessing.get("invert") else ""
        return f"IMAGES  (image files or folders{ink}; or an .npy of shape (N, {shape}))"
    return f"INPUTS  (.npy or .csv, rows of {shape} numbers without the label)"
