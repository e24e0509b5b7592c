"""Evaluate a trained model without training: a checkpoint or an exported file, on its run's
test split or on any data file or folder, with the accuracy, per-class precision, recall and
F1, the loss and a confusion matrix.

The model and the data must fit each other (input shape, classes): a mismatch is refused in
one line before anything is computed. (LightningCLI's `test` subcommand would serve a
checkpoint, but not an exported file nor another data set in the model's own class order.)
"""

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
import torch.nn.functional as F

from . import artifacts
from .checkpoints import CheckpointError, read_checkpoint
from .data_files import DataError

SPLITS = ("test", "val", "train", "all")


class EvaluationError(ValueError):
    """A model or data that cannot be evaluated (together); the message says why and what
    to do."""


@dataclass
class Evaluated:
    """A trained model as a function, with what it takes and what it was trained on."""

    path: Path
    kind: str  # "checkpoint", or the export format
    predict: Callable[[torch.Tensor], torch.Tensor]  # raw inputs (B, *shape) -> logits (B, C)
    input_shape: tuple[int, ...]
    class_names: list[str]
    data: dict[str, Any] | None  # its run's data settings (None: not known)


def load_evaluated(path: str | Path) -> Evaluated:
    """A .ckpt training checkpoint, or an exported model with the metadata.json beside it."""
    path = Path(path)
    if path.suffix == ".ckpt":
        return _load_checkpoint(path)
    try:
        predictor = artifacts.load(path)
        metadata = artifacts.read_metadata(path)
        kind = artifacts.format_of(path).name
    except (FileNotFoundError, ValueError) as error:
        raise EvaluationError(str(error)) from None
    if metadata is None:
        raise EvaluationError(
            f"no {artifacts.METADATA_FILE} beside {path}: it says what the model takes; "
            "evaluate the checkpoint instead, or export it again."
        )
    return Evaluated(
        path,
        kind,
        predictor,
        tuple(metadata["input_shape"]),
        list(metadata["class_names"]),
        metadata.get("data"),
    )


def _load_checkpoint(path: Path) -> Evaluated:
    from .export import load_model

    try:
        checkpoint = read_checkpoint(path)
        model = load_model(path)
    except (CheckpointError, FileNotFoundError) as error:
        raise EvaluationError(str(error)) from None
    hparams = checkpoint.get("hyper_parameters", {})
    num_classes = int(hparams.get("num_classes", 0))
    names = hparams.get("class_names") or [str(index) for index in range(num_classes)]

    def predict(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return model(x)

    data = checkpoint.get("datamodule_hyper_parameters")
    return Evaluated(
        path,
        "checkpoint",
        predict,
        tuple(hparams["input_shape"]),
        list(names),
        dict(data) if data else None,
    )


def evaluation_data(
    evaluated: Evaluated, data_path: str | None, split: str
) -> tuple[np.ndarray, np.ndarray, str]:
    """(features, labels, description) of ``split`` of the model's own data, or of
    ``data_path`` read with the model's data settings; refused unless they fit the model."""
    from .data import ClassificationDataModule

    if split not in SPLITS:
        raise EvaluationError(f"--split {split}: expected one of {', '.join(SPLITS)}")
    if data_path is None and evaluated.data is None:
        raise EvaluationError(
            f"{evaluated.path} does not say which data it was trained on (exported before "
            "its metadata named it): give --data.path."
        )
    # Only the data module's own arguments (LightningCLI saves its _instantiator too).
    accepted = inspect.signature(ClassificationDataModule.__init__).parameters
    settings = {k: v for k, v in (evaluated.data or {}).items() if k in accepted}
    if data_path is not None:
        settings["path"] = data_path
        if len(evaluated.input_shape) == 3:  # images: read as the model's were
            channels, height, width = evaluated.input_shape
            settings.update(image_size=[height, width], color_mode="L" if channels == 1 else "RGB")
    settings["val_fold"] = 0  # the test split never depends on the fold
    try:
        data = ClassificationDataModule(**settings)
    except DataError as error:
        raise EvaluationError(str(error)) from None
    name = settings.get("path") or "the built-in digits"
    if data.input_shape != evaluated.input_shape:
        raise EvaluationError(
            f"{evaluated.path.name} takes samples of shape {evaluated.input_shape}, {name} has "
            f"samples of shape {data.input_shape}: evaluate it on data like its training data."
        )
    if data.class_names != evaluated.class_names:
        raise EvaluationError(
            f"{evaluated.path.name} predicts {len(evaluated.class_names)} classes "
            f"({_names(evaluated.class_names)}), {name} has {data.num_classes} "
            f"({_names(data.class_names)}): the classes must be the same, in the same order."
        )
    if split == "all":
        parts = [data.split_arrays(part) for part in ("train", "val", "test")]
        features = np.concatenate([features for features, _ in parts])
        labels = np.concatenate([labels for _, labels in parts])
        return features, labels, f"all {len(labels)} samples of {name}"
    features, labels = data.split_arrays(split)
    return features, labels, f"the {split} split of {name} ({len(labels)} samples)"


def _names(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")


def evaluate(
    evaluated: Evaluated, features: np.ndarray, labels: np.ndarray, batch_size: int = 512
) -> tuple[dict[str, Any], torch.Tensor]:
    """Metrics (accuracy, loss, per-class precision, recall, F1 and support) and the
    confusion matrix (rows: true class, columns: predicted)."""
    from torchmetrics.functional.classification import (
        multiclass_confusion_matrix,
        multiclass_f1_score,
        multiclass_precision,
        multiclass_recall,
    )

    inputs = torch.from_numpy(features).float()
    with torch.inference_mode():
        logits = torch.cat(
            [
                evaluated.predict(inputs[start : start + batch_size]).float()
                for start in range(0, len(inputs), batch_size)
            ]
        )
    target = torch.from_numpy(labels).long()
    predicted = logits.argmax(dim=-1)
    classes = len(evaluated.class_names)
    per_class = {
        name: function(predicted, target, classes, average="none").tolist()
        for name, function in (
            ("precision", multiclass_precision),
            ("recall", multiclass_recall),
            ("f1", multiclass_f1_score),
        )
    }
    support = torch.bincount(target, minlength=classes).tolist()
    loss = float(F.cross_entropy(logits, target))
    if not math.isfinite(loss):
        raise EvaluationError(f"{evaluated.path} gives non-finite outputs on this data.")
    metrics = {
        "accuracy": float((predicted == target).float().mean()),
        "loss": loss,
        "samples": len(target),
        "per_class": {
            name: {
                "precision": per_class["precision"][index],
                "recall": per_class["recall"][index],
                "f1": per_class["f1"][index],
                "support": support[index],
            }
            for index, name in enumerate(evaluated.class_names)
        },
    }
    return metrics, multiclass_confusion_matrix(predicted, target, classes)


def write_evaluation(
    out_dir: Path,
    evaluated: Evaluated,
    description: str,
    metrics: dict[str, Any],
    confusion: torch.Tensor,
) -> Path:
    """metrics.json and confusion_matrix.png into ``out_dir``; returns metrics.json's path."""
    from .plots import write_confusion_matrix

    out_dir.mkdir(parents=True, exist_ok=True)
    report = {"model": str(evaluated.path), "kind": evaluated.kind, "data": description}
    path = out_dir / "metrics.json"
    path.write_text(json.dumps({**report, **metrics}, indent=2) + "\n")
    write_confusion_matrix(confusion, out_dir / "confusion_matrix.png", evaluated.class_names)
    return path
