"""Exported formats side by side: size, latency at batch 1 and 256, accuracy, per model size.

Bakes the template's defaults, trains the default model and wider variants with
`python train.py --export.formats [...]` (which exports and verifies each format: the
default ones, and onnx where its packages are installed), then times every artifact again
with the project's own timer (export.verify.measure), formats interleaved round after round
on one thread, and quotes the median per format as a ratio to the eager model measured in
the same rounds.

To run:
    .venv/bin/python benchmarks/export_formats.py            # ~2 minutes on 2 cores
    .venv/bin/python benchmarks/export_formats.py --smoke    # seconds: does it still run?
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from baked import bake, import_modules, machine

WIDTHS = (256, 512, 1024)  # 256 is the default model (64-256-256-10)


def train_and_export(project: Path, width: int, epochs: int, formats: list[str]) -> dict:
    """Run the generated train.py as a user would; returns its summary.json."""
    command = [
        sys.executable,
        "train.py",
        f"--model.net.init_args.hidden_sizes=[{width}, {width}]",
        f"--trainer.max_epochs={epochs}",
        f"--export.formats=[{', '.join(formats)}]",
        "--trainer.enable_progress_bar=false",
    ]
    env = {**os.environ, "PYTHONPATH": str(project / "src")}
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(result.stderr[-3000:])
    summary_path = result.stdout.rstrip().splitlines()[-1].removeprefix("summary: ")
    return json.loads(Path(summary_path).read_text())


def interleaved_latency(modules: dict, summary: dict, rounds: int) -> dict[str, dict]:
    """Median over rounds of each format's median call time; every round times every format."""
    verify, checkpoint = modules["export.verify"], summary["paths"]["best_checkpoint"]
    datamodule = modules["data.datamodule"].DataModule.load_from_checkpoint(
        checkpoint, weights_only=True
    )
    features, labels = map(torch.from_numpy, datamodule.split_arrays("test"))
    task = verify.load_module(checkpoint).task
    predictors = {"eager": verify.load_model(checkpoint)}
    for fmt, figures in summary["export"].items():
        if figures["path"]:
            predictors[fmt] = modules["export.formats"].load(figures["path"], threads=1)
    with torch.inference_mode():
        eager = predictors["eager"](features)
    times: dict[str, dict[int, list[float]]] = {name: {1: [], 256: []} for name in predictors}
    for _ in range(rounds):
        for name, predict in predictors.items():
            latency = verify.measure(name, None, predict, task, features, labels, eager).latency_ms
            for size in (1, 256):
                times[name][size].append(latency[f"batch_{size}"])
    return {
        name: {size: statistics.median(values) for size, values in by_size.items()}
        for name, by_size in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="default width, 2 epochs, 1 round")
    args = parser.parse_args()
    widths, epochs, rounds = ((256,), 2, 1) if args.smoke else (WIDTHS, args.epochs, args.rounds)

    with tempfile.TemporaryDirectory() as workdir:
        project = bake(Path(workdir))
        names = ("export.verify", "export.formats", "data.datamodule", "runtime")
        modules = import_modules(project, *names)
        modules["runtime"].quiet_known_noise()
        formats = ["torchscript", "int8"] if args.smoke else installed(modules["export.formats"])
        print(f"machine: {machine()}; torch threads 1; {epochs} epochs; median of {rounds} rounds")
        print(
            "\n| model | format | size (KiB) | batch 1 (ms) | batch 256 (ms) "
            "| speed-up at 256 vs eager | test accuracy | max abs diff |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for width in widths:
            summary = train_and_export(project, width, epochs, formats)
            latency = interleaved_latency(modules, summary, rounds)
            for name, figures in summary["export"].items():
                size = f"{figures['size_bytes'] / 1024:.0f}" if figures["size_bytes"] else "-"
                speedup = latency["eager"][256] / latency[name][256]
                accuracy = figures["accuracy"]
                print(
                    f"| 64-{width}-{width}-10 | {name} | {size} | {latency[name][1]:.3f} "
                    f"| {latency[name][256]:.3f} | {speedup:.2f}x | {accuracy:.4f} "
                    f"| {figures['max_abs_diff']:.2g} |"
                )


def installed(formats) -> list[str]:
    """Every export format whose optional packages are installed here."""
    return [
        name
        for name, fmt in formats.FORMATS.items()
        if all(importlib.util.find_spec(package) for package in fmt.requires)
    ]


if __name__ == "__main__":
    main()
