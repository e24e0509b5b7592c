"""Your own data without code: `--data.path` to a file or a folder, checked at start-up.

    .npz     arrays `features` (N, F) numbers and `labels` (N,): classes 0..C-1, or names
    .csv     one sample per row: numbers in the feature columns, the label column (the last,
             or `--data.label_column`) holds classes 0..C-1 or names; a header row is allowed
    folder   images (.png, .jpg, .jpeg, .bmp) in one subfolder per class, named after it
Without a path: scikit-learn's bundled 8x8 handwritten digits, as (1, 8, 8) images.
Every problem is a DataError that names the file and the fix, before any training.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .images import ColorMode, ImageError, ImageFormat, is_image_file, probe, read_image

FORMAT_HELP = (
    "expected an .npz with arrays 'features' (N, F) and 'labels' (N,), or a .csv of feature "
    "columns and a label column"
)


class DataError(ValueError):
    """Data that is missing, unreadable, or not features with class labels."""


@dataclass
class DataSource:
    """Every sample in memory: what the data module splits and batches."""

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
        from sklearn.datasets import load_digits

        features, labels = load_digits(return_X_y=True)
        # As an image file maps to these values: dark ink on light paper, 0..255 -> 16..0.
        fmt = ImageFormat("L", (8, 8), invert=True, scale=16.0)
        names = [str(digit) for digit in range(10)]
        images = features.astype(np.float32).reshape(-1, *fmt.shape)
        return DataSource(images, labels.astype(np.int64), names, fmt.to_dict())
    if Path(path).is_dir():
        return read_image_folder(Path(path), image_size, color_mode)
    return DataSource(*read_data_file(path, label_column))


def read_image_folder(
    root: Path,
    image_size: int | tuple[int, int] | None = None,
    color_mode: ColorMode | None = None,
) -> DataSource:
    """Every image of every class subfolder, decoded once at start-up (a broken file stops
    the run now, not an hour in), as float32 (N, C, H, W)."""
    layout = f"one subfolder per class, e.g. {root}/cat/1.png and {root}/dog/2.png"
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(folders) < 2:
        found = f"a single class folder ({folders[0].name})" if folders else "no class subfolders"
        raise DataError(f"data.path {root} has {found}: a classifier needs 2 or more, in {layout}.")
    files = {folder.name: sorted(filter(is_image_file, folder.iterdir())) for folder in folders}
    for name, images in files.items():
        if not images:
            raise DataError(
                f"class folder {root / name} holds no images (.png, .jpg, .jpeg, .bmp): add "
                "some, or move the folder out of data.path."
            )
    try:
        probed_mode, probed_size = probe(next(iter(files.values()))[0])
        if isinstance(image_size, int):
            image_size = (image_size, image_size)
        height, width = image_size or probed_size
        fmt = ImageFormat(color_mode or probed_mode, (height, width))
        paths = [(label, file) for label, found in enumerate(files.values()) for file in found]
        features = np.stack([read_image(file, fmt) for _, file in paths])
    except ImageError as error:
        raise DataError(f"{error}: replace or remove the file.") from None
    labels = np.asarray([label for label, _ in paths], dtype=np.int64)
    return DataSource(features, labels, list(files), fmt.to_dict(), [str(f) for _, f in paths])


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
    if path.suffix not in (".npz", ".csv"):
        raise DataError(f"{path}: unknown data file type; {FORMAT_HELP}.")
    try:
        if path.suffix == ".csv":
            features, labels = read_csv(path, label_column)
        else:
            with np.load(path, allow_pickle=False) as arrays:  # never unpickle data files
                features, labels = arrays["features"], arrays["labels"]
    except (OSError, ValueError, KeyError) as error:
        if isinstance(error, DataError):
            raise
        raise DataError(f"cannot read {path} ({error}); {FORMAT_HELP}.") from None
    return check_arrays(features, labels, path)


def read_csv(path: Path, label_column: str | int | None) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, F) float64 and the label column (N,): numbers, or text if any is not.
    The first row is a header when the label is named, or when a feature cell is no number.
    (The csv module, not numpy: a cell that is no number is named by its row and column.)"""
    with open(path, newline="", encoding="utf-8-sig") as file:
        rows = [row for row in csv.reader(file) if any(cell.strip() for cell in row)]
    if not rows:
        raise DataError(f"{path} is empty: expected rows of features and a label.")
    width = len(rows[0])
    names = [cell.strip() for cell in rows[0]]
    if isinstance(label_column, str):
        if label_column not in names:
            shown = ", ".join(repr(n) for n in names)
            raise DataError(
                f"data.label_column {label_column!r} is not a column of {path}: its header "
                f"row has {shown}."
            )
        label = names.index(label_column)
    elif label_column is None or -width <= label_column < width:
        label = (width - 1) if label_column is None else label_column % width
    else:
        raise DataError(
            f"data.label_column {label_column} is out of range: {path} has {width} columns "
            f"(0 to {width - 1}, or -1 for the last)."
        )
    header = isinstance(label_column, str) or not all(
        is_number(cell) for i, cell in enumerate(rows[0]) if i != label
    )
    columns = [n for i, n in enumerate(names if header else map(str, range(width))) if i != label]
    data = rows[1:] if header else rows
    if width < 2 or not data:
        raise DataError(
            f"{path} has {'one column' if width < 2 else 'no data rows'}: {FORMAT_HELP}."
        )
    features = np.empty((len(data), width - 1))
    labels = []
    for number, row in enumerate(data, start=2 if header else 1):
        if len(row) != width:
            raise DataError(f"{path} row {number} has {len(row)} cells, the first row {width}.")
        cells = [cell for i, cell in enumerate(row) if i != label]
        for column, cell in zip(columns, cells, strict=True):
            if not is_number(cell):
                raise DataError(
                    f"{path} row {number}, column {column!r}: {cell.strip()!r} is not a number. "
                    "Features must be numbers; if this is the label column, name it with "
                    "--data.label_column."
                )
        features[number - (2 if header else 1)] = [float(cell) for cell in cells]
        labels.append(row[label].strip())
    if all(map(is_number, labels)):
        return features, np.array([float(value) for value in labels])
    return features, np.array(labels)


def is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def check_arrays(
    features: np.ndarray, labels: np.ndarray, source: str | Path
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Shapes, finite numbers, and labels that are classes 0..C-1 (each present) or names;
    returns features float32, labels int64 and the class names."""
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
    return features, labels.astype(np.int64), [str(c) for c in classes.astype(np.int64)]
