"""Predict classes with an exported model: needs torch, numpy and Pillow, not Lightning.

To run:
    python predict.py runs/.../export/model.pt inputs.npy             # array (N, 64) or (N, 8, 8)
    python predict.py runs/.../export/model.pt2 four.png seven.jpg --top 3

Inputs are raw features, exactly as training read them: the standardisation is inside the
exported model, so serving cannot drift from training. Images are read as grayscale, shrunk
to 8x8 and scaled to 0..16 with dark ink high, like the scanned digits of the training data.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from {{ cookiecutter.package_name }}.artifacts import load

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


class InputError(ValueError):
    """An input file that cannot be read as model inputs; the message names it."""


@dataclass
class Prediction:
    source: str  # "file" or "file[row]"
    classes: list[int]  # the top-k classes, most probable first
    probabilities: list[float]


def read_npy(path: Path) -> np.ndarray:
    """(N, F) float32 from an .npy array of N samples (N, F) / (N, H, W), or one sample (F,)."""
    try:
        array = np.load(path, allow_pickle=False)  # never unpickle: a file cannot run code
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read {path} as a numpy .npy array: {error}") from None
    if array.ndim == 1:
        array = array[None]
    if array.ndim < 2 or array.size == 0 or not np.issubdtype(array.dtype, np.number):
        raise InputError(f"{path}: expected numbers shaped (N, features), got {array.shape}.")
    return array.reshape(len(array), -1).astype(np.float32)


def read_image(path: Path) -> np.ndarray:
    """(1, 64) float32: grayscale, 8x8, dark ink -> 16, light paper -> 0 (as in training)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            gray = np.asarray(image.convert("L").resize((8, 8), Image.Resampling.BOX))
    except (OSError, UnidentifiedImageError) as error:
        raise InputError(f"cannot read {path} as an image: {error}") from None
    return ((255.0 - gray.astype(np.float32)) * (16.0 / 255.0)).reshape(1, -1)


def read_inputs(path: Path) -> np.ndarray:
    if not path.is_file():
        raise InputError(f"input file {path} does not exist.")
    if path.suffix.lower() == ".npy":
        return read_npy(path)
    if path.suffix.lower() in IMAGE_SUFFIXES:
        return read_image(path)
    raise InputError(f"{path}: unknown input type; give an .npy array or an image file.")


def predict(model_path: Path, inputs: list[Path], top: int = 1) -> list[Prediction]:
    """Top-``top`` classes with their probabilities for every sample of every input file."""
    model = load(model_path)
    predictions = []
    for path in inputs:
        features = torch.from_numpy(read_inputs(path))
        try:
            with torch.inference_mode():
                probabilities = model(features).softmax(dim=-1)
        except RuntimeError as error:
            raise InputError(
                f"{path}: the model rejected inputs of shape {list(features.shape)} "
                f"({str(error).splitlines()[0]}); check the number of features."
            ) from None
        values, classes = probabilities.topk(min(top, probabilities.shape[-1]), dim=-1)
        for row, (cls, prob) in enumerate(zip(classes.tolist(), values.tolist(), strict=True)):
            source = f"{path}[{row}]" if len(features) > 1 else str(path)
            predictions.append(Prediction(source, cls, prob))
    return predictions


def main(argv: list[str] | None = None) -> list[Prediction]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("model", type=Path, help="an exported model: .pt, .int8.pt, .pt2, .onnx")
    parser.add_argument("inputs", type=Path, nargs="+", help=".npy arrays or image files")
    parser.add_argument("--top", type=int, default=1, help="how many classes to show per sample")
    args = parser.parse_args(argv)
    try:
        predictions = predict(args.model, args.inputs, args.top)
    except (InputError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    for prediction in predictions:
        ranked = ", ".join(
            f"{cls} ({prob:.3f})"
            for cls, prob in zip(prediction.classes, prediction.probabilities, strict=True)
        )
        print(f"{prediction.source}: {ranked}")
    return predictions


if __name__ == "__main__":
    main()
