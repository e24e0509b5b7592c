"""Export a checkpoint for serving, and prove that every file matches the trained model.

To run (train.py does this for the best checkpoint at the end of every run):
    python -m {{ cookiecutter.package_name }}.export --ckpt runs/.../checkpoints/best-epoch42.ckpt
    python -m {{ cookiecutter.package_name }}.export --ckpt PATH --out exports --formats torchscript int8

Each artifact is read back from disk and compared with the eager model (eval mode, inference
mode) on the test split: fp32 formats must reproduce its logits within FP32_TOLERANCE, int8
may lose at most INT8_MAX_ACCURACY_DROP of test accuracy. Otherwise ExportVerificationError
names the format and the measured difference. export_report.md and summary.json get, per
format: file size, latency at batch 1 and 256 (median, one thread), accuracy, difference.
metadata.json beside the files records the input shape, class names and preprocessing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import artifacts
from .checkpoints import CheckpointError, read_checkpoint
from .runtime import quiet_known_noise

FP32_TOLERANCE = 1e-4  # max |logit difference| for fp32 formats (measured: 0 to 1e-5)
INT8_MAX_ACCURACY_DROP = 0.01  # int8 may cost at most 1 point of test accuracy
LATENCY_BATCHES = (1, 256)
LATENCY_REPEATS = 50
LATENCY_WARMUP = 5  # first calls allocate and (TorchScript) optimise


class ExportVerificationError(RuntimeError):
    """An artifact, read back from disk, does not behave like the model it was made from."""


@dataclass
class FormatReport:
    format: str
    path: str | None  # None for the eager model itself
    size_bytes: int | None
    latency_ms: dict[str, float]  # {"batch_1": ..., "batch_256": ...}, median of repeats
    accuracy: float
    max_abs_diff: float  # largest |logit - eager logit| over the test split


def load_model(checkpoint_path: str | Path) -> nn.Module:
    """The exportable model of a training checkpoint (network and its preprocessing), read
    weights-only, in eval mode."""
    from .module import LitClassifier

    read_checkpoint(checkpoint_path)  # clear errors for missing, corrupt or pickled files
    module = LitClassifier.load_from_checkpoint(
        checkpoint_path, map_location="cpu", weights_only=True
    )
    return module.model.eval()


def load_datamodule(checkpoint_path: str | Path) -> Any:
    """The data module the checkpoint's run used (same data settings and split seed)."""
    from .data import ClassificationDataModule

    datamodule = ClassificationDataModule.load_from_checkpoint(checkpoint_path, weights_only=True)
    datamodule.setup("test")
    return datamodule


def export_model(
    model: nn.Module,
    features: torch.Tensor,
    labels: torch.Tensor,
    out_dir: Path,
    formats: Sequence[str],
) -> dict[str, FormatReport]:
    """Write each format to ``out_dir``, verify it from disk, and measure it against eager."""
    model = model.cpu().eval()
    with torch.inference_mode():
        eager_logits = model(features)
    reports = {"eager": _measure("eager", None, model, features, labels, eager_logits)}
    for fmt in formats:
        file_name = artifacts.FORMATS[fmt].file_name
        path = artifacts.save(model, fmt, features[:2], out_dir / file_name)
        reports[fmt] = verify_artifact(fmt, path, features, labels, eager_logits)
    return reports


def verify_artifact(
    fmt: str,
    path: Path,
    features: torch.Tensor,
    labels: torch.Tensor,
    eager_logits: torch.Tensor,
) -> FormatReport:
    """Load ``path`` back and check it against the eager logits; raise if it drifted."""
    report = _measure(fmt, path, artifacts.load(path, threads=1), features, labels, eager_logits)
    eager_accuracy = _accuracy(eager_logits, labels)
    if not artifacts.FORMATS[fmt].exact:
        drop = eager_accuracy - report.accuracy
        if drop > INT8_MAX_ACCURACY_DROP:
            raise ExportVerificationError(
                f"{fmt} export {path} lost {100 * drop:.2f} points of test accuracy "
                f"({eager_accuracy:.4f} -> {report.accuracy:.4f}; at most "
                f"{100 * INT8_MAX_ACCURACY_DROP:g} allowed): "
                "keep the fp32 export, or quantize fewer layers."
            )
    elif report.max_abs_diff > FP32_TOLERANCE:
        raise ExportVerificationError(
            f"{fmt} export {path} differs from the eager model by up to "
            f"{report.max_abs_diff:.3g} in the logits (tolerance {FP32_TOLERANCE:g}): the file "
            "is damaged or the model does something tracing cannot capture."
        )
    return report


def _measure(
    fmt: str,
    path: Path | None,
    predict: artifacts.Predictor,
    features: torch.Tensor,
    labels: torch.Tensor,
    eager_logits: torch.Tensor,
) -> FormatReport:
    with torch.inference_mode():
        logits = predict(features)
    if logits.shape != eager_logits.shape:
        raise ExportVerificationError(
            f"{fmt} export {path} returns shape {list(logits.shape)}, the model "
            f"{list(eager_logits.shape)}: the batch dimension was probably frozen at export."
        )
    latency = {
        f"batch_{size}": median_latency_ms(predict, batch_of(features, size))
        for size in LATENCY_BATCHES
    }
    return FormatReport(
        format=fmt,
        path=str(path) if path else None,
        size_bytes=path.stat().st_size if path else None,
        latency_ms=latency,
        accuracy=round(_accuracy(logits, labels), 6),
        max_abs_diff=float((logits - eager_logits).abs().max()),
    )


def _accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return float((logits.argmax(dim=-1) == labels).float().mean())


def batch_of(features: torch.Tensor, size: int) -> torch.Tensor:
    repeats = -(-size // len(features))  # ceil: tile a small test split up to `size` rows
    return features.repeat(repeats, *[1] * (features.ndim - 1))[:size].contiguous()


@contextlib.contextmanager
def fixed_threads(count: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def median_latency_ms(predict: artifacts.Predictor, batch: torch.Tensor) -> float:
    """Median wall time of one call, on one thread so formats compare fairly on any machine."""
    times = []
    with fixed_threads(1), torch.inference_mode():
        for _ in range(LATENCY_WARMUP):
            predict(batch)
        for _ in range(LATENCY_REPEATS):
            start = time.perf_counter()
            predict(batch)
            times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e3, 4)


def write_report(reports: dict[str, FormatReport], checkpoint: str | Path, path: Path) -> Path:
    """export_report.md: one row per format, speed-ups relative to the eager model."""
    eager = reports["eager"].latency_ms
    lines = [
        "# Export report",
        "",
        f"Checkpoint: `{Path(checkpoint).resolve()}`  ",
        f"torch {torch.__version__}; latency = median of {LATENCY_REPEATS} calls, one thread; "
        f"accuracy and max |logit difference| vs eager on the test split.",
        "",
        "| format | file | size (KiB) | batch 1 (ms) | batch 256 (ms) | speed-up at 256 "
        "| test accuracy | max abs diff |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for report in reports.values():
        ms = report.latency_ms
        lines.append(
            f"| {report.format} | {Path(report.path).name if report.path else '(in memory)'} "
            f"| {f'{report.size_bytes / 1024:.0f}' if report.size_bytes else '-'} "
            f"| {ms['batch_1']:.3f} | {ms['batch_256']:.3f} "
            f"| {eager['batch_256'] / ms['batch_256']:.2f}x "
            f"| {report.accuracy:.4f} | {report.max_abs_diff:.2g} |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def export_checkpoint(
    checkpoint: str | Path,
    out_dir: Path,
    formats: Sequence[str] | None = None,
    datamodule: Any = None,
) -> dict:
    """Export, verify and report one checkpoint; the result goes into summary.json.

    ``datamodule``: the run's data module, set up (train.py passes its own); None reads the
    data again with the checkpoint's data settings.
    """
    from .data import stack_dataset

    formats = artifacts.available_formats() if formats is None else list(formats)
    artifacts.check_formats(formats)
    model = load_model(checkpoint)  # first: it refuses unreadable or pickled files clearly
    datamodule = datamodule if datamodule is not None else load_datamodule(checkpoint)
    features, labels = stack_dataset(datamodule.test_set)
    reports = export_model(model, features, labels, out_dir, formats)
    report_path = write_report(reports, checkpoint, out_dir / "export_report.md")
    metadata = artifacts.write_metadata(
        out_dir,
        datamodule.input_shape,
        datamodule.class_names,
        datamodule.preprocessing,
        {fmt: artifacts.FORMATS[fmt].file_name for fmt in formats},
        {k: v for k, v in datamodule.hparams.items() if not k.startswith("_")},
    )
    return {
        "report": str(report_path),
        "metadata": str(metadata),
        "formats": {k: asdict(v) for k, v in reports.items()},
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ckpt", required=True, help="a training checkpoint (.ckpt)")
    parser.add_argument("--out", type=Path, help="output folder (default: next to checkpoints/)")
    parser.add_argument("--formats", nargs="+", choices=list(artifacts.FORMATS))
    args = parser.parse_args(argv)
    quiet_known_noise()
    out_dir = args.out or Path(args.ckpt).resolve().parent.parent / "export"
    try:
        result = export_checkpoint(args.ckpt, out_dir, args.formats)
    except (CheckpointError, ExportVerificationError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(Path(result["report"]).read_text())
    print(json.dumps({k: v["path"] for k, v in result["formats"].items()}, indent=2))


if __name__ == "__main__":
    main()
