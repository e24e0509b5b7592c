"""Evaluate a trained model without training: a checkpoint or an export, on its run's split
or on any data, read as its training data was; a model and data that do not fit are refused
in one line. (LightningCLI's `test` takes a checkpoint, not an export nor other data.)"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data.sources import DataError
from ..export import formats as export_formats
from ..tasks import Task, make_task
from ..training.checkpoints import CheckpointError, read_checkpoint

SPLITS = ("test", "val", "train", "all")


class EvaluationError(ValueError):
    """A model or data that cannot be evaluated (together); the message says what to do."""


@dataclass
class Evaluated:
    """A trained model as a function, with what it takes and what it was trained on."""

    path: Path
    kind: str  # "checkpoint", or the export format
    predict: Callable[[torch.Tensor], torch.Tensor]  # raw inputs (B, *shape) -> outputs
    input_shape: tuple[int, ...]
    task: Task
    names: list[str]  # the class or target names
    data: dict[str, Any] | None  # its run's data settings (None: not known)


def load_evaluated(path: Path) -> Evaluated:
    """A .ckpt training checkpoint, or an export with the metadata.json beside it."""
    try:
        if path.suffix == ".ckpt":
            from ..export.verify import load_module

            data = read_checkpoint(path).get("datamodule_hyper_parameters")
            module = load_module(path)
            shape, task = tuple(module.hparams["input_shape"]), module.task
            model, names = module.model, task.names
            return Evaluated(
                path, "checkpoint", model, shape, task, names, dict(data or {}) or None
            )
        predict = export_formats.load(path)
        metadata = export_formats.read_metadata(path)
        kind = export_formats.format_of(path).name
    except (CheckpointError, FileNotFoundError, ValueError) as error:
        raise EvaluationError(str(error)) from None
    if metadata is None:
        raise EvaluationError(
            f"no {export_formats.METADATA_FILE} beside {path}: it says what the model takes; "
            "evaluate the checkpoint instead, or export it again."
        )
    names = list(metadata.get("output_names") or metadata["class_names"])
    task = make_task(metadata.get("task", "classification"), names)
    shape = tuple(metadata["input_shape"])
    return Evaluated(path, kind, predict, shape, task, names, metadata["data"])


def evaluation_data(
    evaluated: Evaluated, data_path: str | None, split: str
) -> tuple[np.ndarray, np.ndarray, str]:
    """(inputs, targets, description) of ``split`` of the model's own data, or of
    ``data_path`` read with the model's data settings; refused unless they fit the model."""
    from ..data.datamodule import DataModule

    if data_path is None and evaluated.data is None:
        raise EvaluationError(
            f"{evaluated.path} does not say which data it was trained on: give --data.path."
        )
    accepted = set(inspect.signature(DataModule.__init__).parameters)  # not LightningCLI's
    # The run's data settings but its validation fold: the test split never depends on it.
    settings = {k: v for k, v in (evaluated.data or {}).items() if k in accepted - {"val_fold"}}
    if data_path is not None:
        settings["path"] = data_path
        if len(evaluated.input_shape) == 3:  # images: read as the model's were
            channels, height, width = evaluated.input_shape
            settings.update(image_size=[height, width], color_mode="L" if channels == 1 else "RGB")
    try:
        data = DataModule(**settings)
    except DataError as error:
        raise EvaluationError(str(error)) from None
    name = settings.get("path") or "the built-in digits"
    if data.input_shape != evaluated.input_shape:
        raise EvaluationError(
            f"{evaluated.path.name} takes samples of shape {evaluated.input_shape}, {name} has "
            f"samples of shape {data.input_shape}: evaluate it on data like its training data."
        )
    if data.task != evaluated.task.kind:
        raise EvaluationError(
            f"{evaluated.path.name} is a {evaluated.task.kind}, {name} holds a {data.task}'s "
            "targets: evaluate it on data like its training data."
        )
    if data.output_names != evaluated.names:
        expected, found, noun = evaluated.names, data.output_names, evaluated.task.noun
        raise EvaluationError(
            f"{evaluated.path.name} predicts {len(expected)} {noun} ({shown(expected)}), "
            f"{name} has {len(found)} ({shown(found)}): the {noun} must be the same, in the "
            "same order."
        )
    if split == "all":
        parts = [data.split_arrays(part) for part in ("train", "val", "test")]
        inputs, targets = (np.concatenate(arrays) for arrays in zip(*parts, strict=True))
        return inputs, targets, f"all {len(targets)} samples of {name}"
    inputs, targets = data.split_arrays(split)
    return inputs, targets, f"the {split} split of {name} ({len(targets)} samples)"


def shown(names: list[str], count: int = 5) -> str:
    return ", ".join(names[:count]) + (", ..." if len(names) > count else "")


def evaluate(
    evaluated: Evaluated, inputs: np.ndarray, targets: np.ndarray, out_dir: Path, about: str
) -> dict[str, Any]:
    """The task's metrics into metrics.json and its test plot into ``out_dir``."""
    x, y = torch.from_numpy(inputs).float(), torch.from_numpy(targets)
    with torch.inference_mode():
        outputs = torch.cat(
            [evaluated.predict(x[i : i + 512]).float() for i in range(0, len(x), 512)]
        )
    metrics = evaluated.task.evaluate(outputs, y)
    if not all(map(math.isfinite, (float(outputs.abs().max()), metrics.get("loss", 0.0)))):
        raise EvaluationError(f"{evaluated.path} gives non-finite outputs on this data.")
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {"model": str(evaluated.path), "kind": evaluated.kind, "data": about, **metrics}
    (out_dir / "metrics.json").write_text(json.dumps(report, indent=2) + "\n")
    evaluated.task.plot_test(outputs, y, out_dir / f"{evaluated.task.plot_name}.png")
    return metrics
