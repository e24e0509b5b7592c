"""What an exported model takes, from the metadata.json beside it, and the checks every input
gets before it reaches the model: predict.py and serving share them (no Lightning)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.images import ImageFormat
from .formats import read_metadata


class InputError(ValueError):
    """An input (a file, a request) that cannot be read as model inputs; the message names it."""


@dataclass
class ModelInputs:
    """What the exported model takes, from its metadata.json (when there is one)."""

    input_shape: tuple[int, ...] | None = None
    output_names: list[str] | None = None  # the class names, or the target names
    image: ImageFormat | None = None
    task: str = "classification"

    @classmethod
    def beside(cls, model_path: Path) -> ModelInputs:
        metadata = read_metadata(model_path)
        if metadata is None:
            return cls()
        preprocessing: dict[str, Any] = metadata.get("preprocessing", {})
        image = (
            ImageFormat.from_dict(preprocessing) if preprocessing.get("kind") == "image" else None
        )
        names = metadata.get("output_names") or metadata["class_names"]
        shape = tuple(metadata["input_shape"])
        return cls(shape, list(names), image, metadata.get("task", "classification"))

    def shape_rows(self, array: np.ndarray, source: Path | str) -> np.ndarray:
        """(N, *input_shape) from N flat rows or N samples of any layout with the same size."""
        if self.input_shape is None:
            return array.reshape(len(array), -1) if array.ndim > 2 else array
        if tuple(array.shape) == self.input_shape:
            array = array[None]  # a single sample
        size = math.prod(self.input_shape)
        if array.ndim < 2 or math.prod(array.shape[1:]) != size:
            raise InputError(
                f"{source}: the model takes samples of shape {self.input_shape} ({size} values "
                f"each), got an array of shape {tuple(array.shape)}."
            )
        return array.reshape(len(array), *self.input_shape)


def finite(array: np.ndarray, path: Path | str) -> np.ndarray:
    """``array`` if every value is finite: a NaN would come out as probability nan."""
    bad = ~np.isfinite(array.reshape(len(array), -1)).all(axis=1)
    if bad.any():
        raise InputError(
            f"{path}: sample {int(np.flatnonzero(bad)[0])} holds NaN or inf ({int(bad.sum())} "
            "such samples): the model takes finite numbers only."
        )
    return array
