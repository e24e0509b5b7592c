"""Predict with an exported model (classes, or values): torch, numpy and Pillow, no Lightning.

To run:
    python predict.py runs/.../export/model.pt2 inputs.npy            # arrays (N, *input shape)
    python predict.py runs/.../export/model.pt2 rows.csv              # feature rows, no label
    python predict.py runs/.../export/model.pt cat.png dogs/ --top 3  # image models: files, folders

The metadata.json that the export wrote beside the model says what it takes: the input
shape, the class names, and how images are read (colour mode, size, scaling), so an image is
converted exactly as the training images were. The standardisation is inside the exported
model: inputs are raw, as in the data files, and serving cannot drift from training.
"""

from __future__ import annotations

import argparse
import gc
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from {{ cookiecutter.package_name }}.data.images import (
    ImageError,
    ImageFormat,
    is_image_file,
    read_image,
)
from {{ cookiecutter.package_name }}.export.formats import load
from {{ cookiecutter.package_name }}.export.inputs import InputError, ModelInputs, finite


@dataclass
class Prediction:
    source: str  # "file" or "file[row]"
    classes: list[str] = field(default_factory=list)  # the top-k class names, most probable first
    indices: list[int] = field(default_factory=list)  # their class indices
    probabilities: list[float] = field(default_factory=list)
    values: dict[str, float] | None = None  # regression: each target's value, in its units


def read_npy(path: Path) -> np.ndarray:
    """Numbers from an .npy array; one sample (F,) becomes one row."""
    try:
        array = np.load(path, allow_pickle=False)  # never unpickle: a file cannot run code
    except (OSError, ValueError, EOFError) as error:  # EOFError: an empty file
        raise InputError(f"cannot read {path} as a numpy .npy array: {error}") from None
    if array.ndim == 1:
        array = array[None]
    if array.size == 0 or not np.issubdtype(array.dtype, np.number):
        raise InputError(
            f"{path}: expected numbers, one sample per row, got {array.dtype} {array.shape}."
        )
    with np.errstate(over="ignore"):  # beyond float32's range: inf, refused by finite()
        return finite(array.astype(np.float32), path)


def read_csv(path: Path) -> np.ndarray:
    """Rows of numbers from a .csv (one header row allowed), one sample per row."""
    try:
        with warnings.catch_warnings():  # an empty file: reported below, in our words
            warnings.filterwarnings("ignore", message="genfromtxt: Empty input file")
            table = np.genfromtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    except ValueError as error:  # rows of different lengths
        raise InputError(f"cannot read {path} as rows of numbers: {error}") from None
    if len(table) and np.isnan(table[0]).all():
        table = table[1:]  # the header row
    if table.size == 0 or np.isnan(table).any():
        raise InputError(f"{path}: expected rows of numbers only (found text or empty cells).")
    with np.errstate(over="ignore"):
        return finite(table.astype(np.float32), path)


def read_images(paths: list[Path], image: ImageFormat | None, model: Path) -> np.ndarray:
    if image is None:
        raise InputError(
            f"{paths[0]}: {model} was not trained on images (no image settings in its "
            "metadata.json): give .npy or .csv rows."
        )
    try:
        return np.stack([read_image(path, image) for path in paths])
    except ImageError as error:
        raise InputError(str(error)) from None


def read_inputs(path: Path, spec: ModelInputs, model: Path) -> list[tuple[str, np.ndarray]]:
    """[(source, samples (N, *input_shape))] for a file or a folder of images."""
    if path.is_dir():
        images = sorted(p for p in path.rglob("*") if is_image_file(p))
        if not images:
            raise InputError(f"folder {path} holds no images (.png, .jpg, .jpeg, .bmp).")
        return list(
            zip(map(str, images), read_images(images, spec.image, model)[:, None], strict=True)
        )
    if not path.is_file():
        raise InputError(f"input file {path} does not exist.")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        rows = spec.shape_rows(read_npy(path), path)
    elif suffix == ".csv":
        rows = spec.shape_rows(read_csv(path), path)
    elif is_image_file(path):
        return [(str(path), read_images([path], spec.image, model))]
    else:
        raise InputError(f"{path}: unknown input type; give .npy, .csv, image files or folders.")
    if len(rows) == 1:
        return [(str(path), rows)]
    return [(f"{path}[{row}]", rows[row : row + 1]) for row in range(len(rows))]


def predict(model_path: Path, inputs: list[Path], top: int = 1) -> list[Prediction]:
    """For every sample of every input: the top-``top`` classes with their probabilities, or
    the regression targets' values."""
    model = load(model_path)
    spec = ModelInputs.beside(model_path)
    samples = [sample for path in inputs for sample in read_inputs(path, spec, model_path)]
    sources = [source for source, _ in samples]
    batch = torch.from_numpy(np.concatenate([array for _, array in samples]))
    try:
        with torch.inference_mode():
            outputs = model(batch).float()
    # A model exported by hand, without metadata.json: TorchScript raises RuntimeError,
    # torch.export's shape guards AssertionError.
    except (RuntimeError, AssertionError) as error:
        raise InputError(
            f"the model rejected inputs of shape {list(batch.shape)} "
            f"({str(error).splitlines()[0][:200]}); check the number of features."
        ) from None
    names = spec.output_names or [str(c) for c in range(outputs.shape[-1])]
    if spec.task == "regression":
        rows = outputs.tolist()
        return [
            Prediction(s, values=dict(zip(names, r, strict=True)))
            for s, r in zip(sources, rows, strict=True)
        ]
    values, indices = outputs.softmax(dim=-1).topk(min(top, outputs.shape[-1]), dim=-1)
    return [
        Prediction(source, [names[c] for c in classes], classes, probs)
        for source, classes, probs in zip(sources, indices.tolist(), values.tolist(), strict=True)
    ]


def main(argv: list[str] | None = None) -> list[Prediction]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("model", type=Path, help="an exported model: .pt, .int8.pt, .pt2, .onnx")
    parser.add_argument(
        "inputs", type=Path, nargs="+", help=".npy arrays, .csv rows, image files or folders"
    )
    parser.add_argument("--top", type=int, default=1, help="how many classes to show per sample")
    args = parser.parse_args(argv)
    try:
        predictions = predict(args.model, args.inputs, args.top)
    except (InputError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    for p in predictions:
        if p.values is not None:
            print(f"{p.source}: " + ", ".join(f"{k}={v:.6g}" for k, v in p.values.items()))
        else:
            ranked = zip(p.classes, p.probabilities, strict=True)
            print(f"{p.source}: " + ", ".join(f"{name} ({prob:.3f})" for name, prob in ranked))
    return predictions


if __name__ == "__main__":
    gc.freeze()  # the imports live as long as the process: out of the collector's sight
    main()
