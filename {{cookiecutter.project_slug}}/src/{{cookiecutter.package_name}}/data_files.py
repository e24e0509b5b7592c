"""Your own data without code: `--data.path` to a file or a folder, checked at start-up.

    .npz     arrays `features` (N, F) numbers and `labels` (N,): integer classes 0..C-1,
             or class names as text
    .csv     one sample per row, numbers in the feature columns; the label column (the last,
             or `--data.label_column`) holds classes 0..C-1 or class names as text; a header
             row of column names is allowed (see tables.py)
    folder   images (.png, .jpg, .jpeg, .bmp), one subfolder per class named after it:
             data/cat/001.png, data/dog/002.jpg, ...; read with Pillow, resized to
             `--data.image_size` (default: the first image's size), grayscale or RGB
             (`--data.color_mode`; default: the first image's)

Without a path: scikit-learn's bundled 8x8 handwritten digits, as (1, 8, 8) images.
Every problem is a DataError naming the file and what to change, raised when the data
module is built, before any training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .images import ColorMode, ImageError, ImageFormat, is_image_file, probe, read_image
from .tables import TableError, read_csv

FORMAT_HELP = (
    "expected an .npz with arrays 'features' (N, F) and 'labels' (N,), or a .csv of feature "
    "columns and a label column"
)


class DataError(ValueError):
    """A data file that is missing, unreadable, or not features + integer labels."""


@dataclass
class DataSource:
    """Every sample in memory, and what a model trained on it must know to serve it."""

    features: np.ndarray  # (N, *input_shape) float32
    labels: np.ndarray  # (N,) int64 classes 0..C-1
    class_names: list[str]
    preprocessing: dict[str, Any] = field(default_factory=lambda: {"kind": "features"})
    files: list[str] | None = None  # image folders: the file of each sample

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.features.shape[1:])


def read_data(
    path: str | Path | None,
    image_size: int | tuple[int, int] | None = None,
    color_mode: ColorMode | None = None,
    label_column: str | int | None = None,
) -> DataSource:
    """The built-in digits (no path), an image folder, or an .npz / .csv file."""
    if path is None:
        return builtin_digits()
    if Path(path).is_dir():
        return read_image_folder(path, image_size, color_mode)
    return DataSource(*read_data_file(path, label_column))


def builtin_digits() -> DataSource:
    """1,797 grayscale 8x8 images (values 0..16, ink high), classes 0..9."""
    from sklearn.datasets import load_digits

    features, labels = load_digits(return_X_y=True)
    # As an image file maps to these values: dark ink on light paper, 0..255 -> 16..0.
    fmt = ImageFormat("L", (8, 8), invert=True, scale=16.0)
    return DataSource(
        features.astype(np.float32).reshape(-1, *fmt.shape),
        labels.astype(np.int64),
        [str(digit) for digit in range(10)],
        fmt.to_dict(),
    )


def read_image_folder(
    path: str | Path,
    image_size: int | tuple[int, int] | None = None,
    color_mode: ColorMode | None = None,
) -> DataSource:
    """Every image of every class subfolder, decoded once at start-up (a broken file stops
    the run now, not an hour in) and kept in memory as float32 (N, C, H, W)."""
    root = Path(path)
    layout = f"one subfolder per class, e.g. {root}/cat/1.png and {root}/dog/2.png"
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise DataError(f"data.path {root} has no class subfolders: put the images in {layout}.")
    if len(folders) < 2:
        raise DataError(
            f"data.path {root} has a single class folder ({folders[0].name}): a classifier "
            f"needs at least 2 classes, in {layout}."
        )
    files = {
        folder.name: sorted(p for p in folder.iterdir() if is_image_file(p)) for folder in folders
    }
    for name, found in files.items():
        if not found:
            raise DataError(
                f"class folder {root / name} holds no images (.png, .jpg, .jpeg, .bmp): add "
                "some, or move the folder out of data.path."
            )
    first = next(iter(files.values()))[0]
    try:
        probed_mode, probed_size = probe(first)
        size = _size_option(image_size) or probed_size
        fmt = ImageFormat(color_mode or probed_mode, size)
        features, labels, paths = [], [], []
        for label, found in enumerate(files.values()):
            for file in found:
                features.append(read_image(file, fmt))
                labels.append(label)
                paths.append(str(file))
    except ImageError as error:
        raise DataError(f"{error}: replace or remove the file.") from None
    return DataSource(
        np.stack(features), np.asarray(labels, dtype=np.int64), list(files), fmt.to_dict(), paths
    )


def _size_option(image_size: int | tuple[int, int] | list[int] | None) -> tuple[int, int] | None:
    if image_size is None:
        return None
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    if len(size) != 2 or min(size) < 1:
        raise DataError(
            f"data.image_size {image_size} must be a positive size: 32, or [height, width]."
        )
    return (int(size[0]), int(size[1]))


def read_data_file(
    path: str | Path, label_column: str | int | None = None
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features (N, F) float32, labels (N,) int64 and the class names, from ``path``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"data.path {path} does not exist: give an existing file ({FORMAT_HELP}) or a "
            "folder of images in class subfolders, or leave data.path unset for the digits."
        )
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as arrays:  # never unpickle data files
                features, labels = arrays["features"], arrays["labels"]
        elif path.suffix == ".csv":
            features, labels = read_csv(path, label_column)
        else:
            raise DataError(f"{path}: unknown data file type; {FORMAT_HELP}.")
    except TableError as error:
        raise DataError(str(error)) from None
    except (OSError, ValueError, KeyError) as error:
        if isinstance(error, DataError):
            raise
        raise DataError(f"cannot read {path} ({error}); {FORMAT_HELP}.") from None
    return check_arrays(features, labels, path)


def check_arrays(
    features: np.ndarray, labels: np.ndarray, source: str | Path
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Shapes, finite numbers, and labels that are classes 0..C-1 (every one present) or
    class names; returns features float32, labels int64 and the class names."""
    if features.ndim != 2 or labels.ndim != 1 or len(features) != len(labels):
        raise DataError(
            f"{source}: features must be (N, F) and labels (N,), got {features.shape} and "
            f"{labels.shape}."
        )
    if not np.issubdtype(features.dtype, np.number):
        raise DataError(f"{source}: features must be finite numbers (found text).")
    with np.errstate(over="ignore"):  # beyond float32's range becomes inf: refused below
        features = features.astype(np.float32)
    if not np.isfinite(features).all():
        raise DataError(
            f"{source}: features must be finite numbers (found NaN, inf, or a value beyond "
            "float32's range of 3.4e38)."
        )
    if labels.dtype.kind in "US":  # class names, sorted: the numbering ignores the row order
        class_names = sorted({str(label) for label in labels})
        encoded = np.searchsorted(class_names, labels.astype(str))
        return features, encoded.astype(np.int64), class_names
    if not np.issubdtype(labels.dtype, np.number) or not np.isfinite(labels).all():
        raise DataError(f"{source}: labels must be class numbers or names (found NaN or inf).")
    if (labels != np.round(labels)).any():
        raise DataError(f"{source}: labels must be integer class indices, e.g. 0, 1, 2.")
    classes = np.unique(labels)  # as given: no cast yet, 1e300 must not wrap around
    if len(classes) < 2:
        raise DataError(f"{source}: labels must be classes 0..C-1 with at least 2 classes.")
    if classes[0] != 0 or classes[-1] != len(classes) - 1:
        upper = int(min(max(classes[-1], 0), len(labels)))  # bounded: labels may be 1e300
        missing = sorted(set(range(upper + 1)) - set(classes.tolist()))[:5]
        raise DataError(
            f"{source}: labels must be the classes 0..C-1, each present; found "
            f"{len(classes)} classes from {classes[0]:g} to {classes[-1]:g}"
            f"{f' (missing {missing})' if missing and classes[0] >= 0 else ''}: renumber them "
            "from 0, or give the labels as class names."
        )
    classes = classes.astype(np.int64)
    return features, labels.astype(np.int64), [str(c) for c in classes]
