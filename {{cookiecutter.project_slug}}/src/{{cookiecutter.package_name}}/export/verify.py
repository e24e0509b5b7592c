"""Export a checkpoint and prove that every file, read back from disk, matches the trained
model on the test split: fp32 formats within the task's tolerance (torch.testing.assert_close),
int8 within the task's bound. export_report.md and summary.json get, per format:
size, latency at batch 1 and 256 (median, one thread, torch.utils.benchmark), accuracy and
the largest difference from the model.

To run (train.py does it for the best checkpoint at the end of every run):
    python -m {{ cookiecutter.package_name }}.export.verify --ckpt runs/.../checkpoints/last.ckpt
    python -m {{ cookiecutter.package_name }}.export.verify --ckpt PATH --out exports --formats onnx
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.benchmark import Timer

from ..tasks import Task
from ..training.checkpoints import CheckpointError, read_checkpoint
from . import formats as export_formats

LATENCY_BATCHES = (1, 256)
LATENCY_MIN_SECONDS = 0.05  # per format and batch size: timed calls until this much is spent


class ExportVerificationError(RuntimeError):
    """An export, read back from disk, does not behave like the model it was made from."""


@dataclass
class FormatReport:
    format: str
    path: str | None  # None for the model itself (eager)
    size_bytes: int | None
    latency_ms: dict[str, float]  # {"batch_1": ..., "batch_256": ...}
    score: dict[str, float]  # the task's measure on the test split: accuracy, or RMSE
    max_abs_diff: float  # largest |output - the model's output| over the test split


def load_module(checkpoint_path: str | Path) -> Any:
    """The LitModel of a training checkpoint, read weights-only, in eval mode."""
    from ..module import LitModel

    read_checkpoint(checkpoint_path)  # clear errors for missing, corrupt or pickled files
    module = LitModel.load_from_checkpoint(checkpoint_path, map_location="cpu", weights_only=True)
    return module.eval()


def load_model(checkpoint_path: str | Path) -> nn.Module:
    """The exportable model of a training checkpoint (InferenceModel), in eval mode."""
    return load_module(checkpoint_path).model


def export_model(
    model: nn.Module,
    task: Task,
    features: torch.Tensor,
    labels: torch.Tensor,
    out_dir: Path,
    formats: Sequence[str],
) -> dict[str, FormatReport]:
    """Write each format to ``out_dir``, read it back, verify it and time it against eager."""
    model = model.cpu().eval()
    reports = {"eager": measure("eager", None, model, task, features, labels, None)}
    with torch.inference_mode():
        eager = model(features)
    for fmt in formats:
        path = out_dir / export_formats.FORMATS[fmt].file_name
        export_formats.save(model, fmt, features[:2], path)
        predict = export_formats.load(path, threads=1)
        with torch.inference_mode():
            outputs = predict(features)
        problem = check(fmt, task, eager, outputs, labels)
        if problem:
            raise ExportVerificationError(f"{fmt} export {path} {problem}")
        reports[fmt] = measure(fmt, path, predict, task, features, labels, eager)
    return reports


def check(fmt: str, task: Task, eager: torch.Tensor, outputs: torch.Tensor, y: torch.Tensor) -> str:
    """What is wrong with an export's outputs ('' if nothing)."""
    if outputs.shape != eager.shape:
        return (
            f"returns shape {list(outputs.shape)}, the model {list(eager.shape)}: the batch "
            "dimension was probably frozen at export"
        )
    if not export_formats.FORMATS[fmt].exact:
        return task.export_error(eager, outputs, y)
    rtol, atol = task.tolerance()
    try:
        torch.testing.assert_close(outputs.float(), eager.float(), rtol=rtol, atol=atol)
    except AssertionError as error:
        return (
            f"differs from the model in its outputs ({' '.join(str(error).split())}): the file "
            "is damaged, or the model does something tracing cannot capture"
        )
    return ""


def measure(
    fmt: str,
    path: Path | None,
    predict: export_formats.Predictor,
    task: Task,
    features: torch.Tensor,
    labels: torch.Tensor,
    eager: torch.Tensor | None,
) -> FormatReport:
    latency = {}
    for size in LATENCY_BATCHES:
        repeats = -(-size // len(features))  # tile a small test split up to `size` rows
        batch = features.repeat(repeats, *[1] * (features.ndim - 1))[:size].contiguous()
        timer = Timer("predict(batch)", globals={"predict": predict, "batch": batch}, num_threads=1)
        with torch.inference_mode():
            seconds = timer.blocked_autorange(min_run_time=LATENCY_MIN_SECONDS).median
        latency[f"batch_{size}"] = round(seconds * 1e3, 4)
    with torch.inference_mode():
        outputs = predict(features)
    difference = 0.0 if eager is None else float((outputs.float() - eager.float()).abs().max())
    return FormatReport(
        format=fmt,
        path=str(path) if path else None,
        size_bytes=path.stat().st_size if path else None,
        latency_ms=latency,
        score=task.score(outputs, labels),
        max_abs_diff=difference,
    )


def write_report(reports: dict[str, FormatReport], checkpoint: str | Path, path: Path) -> Path:
    """export_report.md: one row per format, speed-ups against the eager model."""
    eager = reports["eager"].latency_ms["batch_256"]
    (measure,) = reports["eager"].score
    lines = [
        "# Export report",
        "",
        f"Checkpoint: `{Path(checkpoint).resolve()}`  ",
        f"torch {torch.__version__}; latency: median of timed calls on one thread; {measure} "
        "and max |output difference| against the model on the test split.",
        "",
        "| format | file | size (KiB) | batch 1 (ms) | batch 256 (ms) | speed-up at 256 "
        f"| test {measure} | max abs diff |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports.values():
        ms = r.latency_ms
        lines.append(
            f"| {r.format} | {Path(r.path).name if r.path else '(in memory)'} "
            f"| {f'{r.size_bytes / 1024:.0f}' if r.size_bytes else '-'} "
            f"| {ms['batch_1']:.3f} | {ms['batch_256']:.3f} | {eager / ms['batch_256']:.2f}x "
            f"| {r.score[measure]:.4g} | {r.max_abs_diff:.2g} |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def export_checkpoint(
    checkpoint: str | Path,
    out_dir: Path,
    formats: Sequence[str] | None = None,
    datamodule: Any = None,
    module: Any = None,
) -> dict[str, Any]:
    """Export, verify and report one checkpoint; the result goes into summary.json.
    ``datamodule``, ``module``: the run's, where the caller has them; else read again."""
    from ..data.datamodule import DataModule

    formats = export_formats.DEFAULT_FORMATS if formats is None else list(formats)
    export_formats.check_formats(formats)
    module = module if module is not None else load_module(checkpoint)  # refuses bad files
    if datamodule is None:
        datamodule = DataModule.load_from_checkpoint(checkpoint, weights_only=True)
    features, labels = map(torch.from_numpy, datamodule.split_arrays("test"))
    task, model = module.task, module.model
    reports = export_model(model, task, features, labels, out_dir, formats)
    report = write_report(reports, checkpoint, out_dir / "export_report.md")
    layer = model.output
    target = None
    if datamodule.task == "regression":
        stats = {"mean": layer.mean.tolist(), "std": layer.std.tolist()}
        target = {"transform": datamodule.target_transform, "standardised_by": stats}
    metadata = export_formats.write_metadata(
        out_dir,
        datamodule.input_shape,
        datamodule.output_names,
        datamodule.preprocessing,
        {fmt: export_formats.FORMATS[fmt].file_name for fmt in formats},
        {k: v for k, v in datamodule.hparams.items() if not k.startswith("_")},
        datamodule.task,
        target,
    )
    # Flat per format: the task's score (accuracy, or rmse) beside the other figures.
    formats_report = {k: {**asdict(v), **v.score} for k, v in reports.items()}
    for figures in formats_report.values():
        del figures["score"]
    return {"report": str(report), "metadata": str(metadata), "formats": formats_report}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ckpt", required=True, help="a training checkpoint (.ckpt)")
    parser.add_argument("--out", type=Path, help="output folder (default: beside checkpoints/)")
    parser.add_argument("--formats", nargs="+", choices=list(export_formats.FORMATS))
    args = parser.parse_args(argv)
    out_dir = args.out or Path(args.ckpt).resolve().parent.parent / "export"
    try:
        result = export_checkpoint(args.ckpt, out_dir, args.formats)
    except (CheckpointError, ExportVerificationError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(Path(result["report"]).read_text())
    print(json.dumps({k: v["path"] for k, v in result["formats"].items()}, indent=2))


if __name__ == "__main__":
    from ..runtime import quiet_known_noise

    quiet_known_noise()
    main()
