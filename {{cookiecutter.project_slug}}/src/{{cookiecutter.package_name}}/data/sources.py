"""Your own data without code: `--data.path` to a file or a folder, checked at start-up.

    .npz     arrays `features` (N, F) numbers and `labels` (N,) or (N, K)
    .csv     one sample per row, a header row allowed; number columns, and the target column
             (the last, or `--data.label_column`, one name or several)
    folder   images (.png, .jpg, .jpeg, .bmp) in one subfolder per class, named after it
Without a path: scikit-learn's bundled 8x8 handwritten digits, as (1, 8, 8) images.

The targets say the task, unless `--data.task` does: text, or at most MAX_CLASSES distinct
whole numbers, are classes; fractional numbers, more distinct whole numbers (a count, a price
in cents) or several columns are regression targets. Every problem is a DataError that names
the file and the fix, before any training.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .images import ColorMode, ImageError, ImageFormat, is_image_file, probe, read_image

TaskName = Literal["classification", "regression"]
MAX_CLASSES = 20  # whole-number targets with more distinct values are a regression
FORMAT_HELP = (
    "expected an .npz with arrays 'features' (N, F) and 'labels' (N,) or (N, K), or a .csv "
    "of number columns and a target column"
)
Column = int | str


class DataError(ValueError):
    """Data that is missing, unreadable, or not features with usable targets."""


@dataclass
class DataSource:
    """Every sample in memory: what the data module splits and batches."""

    features: np.ndarray  # (N, *input_shape) float32
    targets: np.ndarray  # classification: (N,) int64 classes 0..C-1; regression: (N, K) float32
    names: list[str]  # the class names, or the target names
    task: TaskName
    why: str  # how the task was chosen, for the run's first line
    preprocessing: dict[str, Any] = field(default_factory=lambda: {"kind": "features"})
    files: list[str] | None = None  # image folders: the file of each sample

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.features.shape[1:])


def read_data(
    path: str | Path | None,
    image_size: int | tuple[int, int] | None = None,
    color_mode: ColorMode | None = None,
    label_column: Column | list[Column] | None = None,
    ignore_columns: list[Column] | None = None,
    task: TaskName | None = None,
) -> DataSource:
    """The built-in digits (no path), an image folder, or an .npz / .csv file."""
    if path is None or Path(path).is_dir():
        if task == "regression":
            raise DataError(f"{path or 'the built-in digits'} holds classes: drop --data.task.")
        if path is not None:
            return read_image_folder(Path(path), image_size, color_mode)
        from sklearn.datasets import load_digits

        features, labels = load_digits(return_X_y=True)
        # As an image file maps to these values: dark ink on light paper, 0..255 -> 16..0.
        fmt = ImageFormat("L", (8, 8), invert=True, scale=16.0)
        images = features.astype(np.float32).reshape(-1, *fmt.shape)
        names = [str(digit) for digit in range(10)]
        why = "the built-in digits"
        return DataSource(images, labels, names, "classification", why, fmt.to_dict())
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
            features, targets, names = read_csv(path, label_column, ignore_columns or [])
        else:
            with np.load(path, allow_pickle=False) as arrays:  # never unpickle data files
                features, targets = arrays["features"], arrays["labels"]
            names = [f"target_{k}" for k in range(targets.shape[1])] if targets.ndim == 2 else []
    except (OSError, ValueError, KeyError) as error:
        if isinstance(error, DataError):
            raise
        raise DataError(f"cannot read {path} ({error}); {FORMAT_HELP}.") from None
    return from_arrays(features, targets, names, path, task)


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
    sample_files = [str(file) for _, file in paths]
    why = "image folders"
    return DataSource(
        features, labels, list(files), "classification", why, fmt.to_dict(), sample_files
    )


def read_csv(
    path: Path, label_column: Column | list[Column] | None, ignore: list[Column]
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features (N, F) float64, the target columns (N,) or (N, K) as text or numbers, and the
    target names. The first row is a header when a column is named, or when a feature cell
    is no number. (The csv module, not numpy: a bad cell is named by its row and column.)"""
    with open(path, newline="", encoding="utf-8-sig") as file:
        rows = [row for row in csv.reader(file) if any(cell.strip() for cell in row)]
    if not rows:
        raise DataError(f"{path} is empty: expected rows of features and a target.")
    width, names = len(rows[0]), [cell.strip() for cell in rows[0]]
    given = (
        []
        if label_column is None
        else label_column
        if isinstance(label_column, list)
        else [label_column]
    )
    targets = [column_index(c, names, path) % width for c in given] or [width - 1]
    skipped = {column_index(c, names, path) % width for c in ignore} | set(targets)
    feature_columns = [i for i in range(width) if i not in skipped]
    named = any(isinstance(c, str) for c in [*given, *ignore])
    header = named or not all(is_number(rows[0][i]) for i in feature_columns)
    data = rows[1:] if header else rows
    if not feature_columns or not data:
        found = "no feature column" if not feature_columns else "no data rows"
        raise DataError(f"{path} has {found}: {FORMAT_HELP}.")
    features = np.empty((len(data), len(feature_columns)))
    labels = []
    for number, row in enumerate(data, start=2 if header else 1):
        if len(row) != width:
            raise DataError(f"{path} row {number} has {len(row)} cells, the first row {width}.")
        for i in feature_columns:
            if not is_number(row[i]):
                column = names[i] if header else str(i)
                raise DataError(
                    f"{path} row {number}, column {column!r}: {row[i].strip()!r} is not a "
                    "number. Features must be numbers; name other columns with "
                    "--data.label_column or --data.ignore_columns."
                )
        features[number - (2 if header else 1)] = [float(row[i]) for i in feature_columns]
        labels.append([row[t].strip() for t in targets])
    target_names = [names[t] if header else f"column_{t}" for t in targets]
    cells = np.array(labels)  # (N, K) text
    numeric = np.vectorize(is_number, otypes=[bool])(cells)
    if numeric.mean() > 0.5 and not numeric.all():  # a number column with a cell that is not
        row, column = np.argwhere(~numeric)[0]
        raise DataError(
            f"{path} row {row + (2 if header else 1)}, target column {target_names[column]!r}: "
            f"{labels[row][column]!r} is not a number, unlike the rest of the column: fix the "
            "cell (an empty cell, or text), or name the target with --data.label_column."
        )
    values = cells.astype(np.float64) if numeric.all() else cells
    return features, values[:, 0] if len(targets) == 1 else values, target_names


def column_index(column: Column, names: list[str], path: Path) -> int:
    """A column given by header name or 0-based index (negative counts from the end)."""
    if isinstance(column, str):
        if column not in names:
            shown = ", ".join(repr(n) for n in names)
            raise DataError(f"column {column!r} is not a column of {path}: its header has {shown}.")
        return names.index(column)
    if not -len(names) <= column < len(names):
        raise DataError(
            f"column {column} is out of range: {path} has {len(names)} columns (0 to "
            f"{len(names) - 1}, or -1 for the last)."
        )
    return column


def is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def from_arrays(
    features: np.ndarray, targets: np.ndarray, names: list[str], source: Path, task: TaskName | None
) -> DataSource:
    """Checked features (float32), the task and its targets."""
    if features.ndim != 2 or targets.ndim not in (1, 2) or len(features) != len(targets):
        raise DataError(
            f"{source}: features must be (N, F) and labels (N,) or (N, K), got "
            f"{features.shape} and {targets.shape}."
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
    text = targets.dtype.kind in "US"
    if targets.ndim == 2 and targets.shape[1] == 1:
        targets = targets[:, 0]  # one column, (N, 1): read as (N,)
    if task is None:
        task, why = guess_task(targets)
    else:
        why = "--data.task"
    if task == "classification":
        labels, class_names = class_labels(targets, source)
        return DataSource(features, labels, class_names, task, why)
    if text or not np.issubdtype(targets.dtype, np.number):
        raise DataError(f"{source}: regression targets must be numbers (found text).")
    values = targets.reshape(len(targets), -1).astype(np.float64)
    if not names:
        names = (
            ["target"] if values.shape[1] == 1 else [f"target_{k}" for k in range(len(values.T))]
        )
    with np.errstate(over="ignore", invalid="ignore"):
        spread = values.std(axis=0)
        wide = ~np.isfinite(values.astype(np.float32)).all(axis=0) | ~np.isfinite(spread * spread)
    for column, name in enumerate(names):
        rows = np.flatnonzero(~np.isfinite(values[:, column]))
        if len(rows):
            raise DataError(
                f"{source}: target {name!r} of sample {rows[0]} is {values[rows[0], column]} "
                f"({len(rows)} such samples): regression targets must be finite numbers."
            )
        if wide[column] or spread[column] == 0:
            what = "constant" if spread[column] == 0 else "beyond float32's range once squared"
            raise DataError(
                f"{source}: target {name!r} is {what}: nothing a network can learn to predict."
            )
    return DataSource(features, values.astype(np.float32), names, task, why)


def guess_task(targets: np.ndarray) -> tuple[TaskName, str]:
    """The task the targets say, and why."""
    if targets.dtype.kind in "US":
        return "classification", "the targets are text"
    if targets.ndim == 2:
        return "regression", f"{targets.shape[1]} target columns"
    if not np.issubdtype(targets.dtype, np.number) or not np.isfinite(targets).all():
        return "regression", "the targets are not all whole numbers"
    if (targets != np.round(targets)).any():
        return "regression", "the targets have fractional values"
    distinct = len(np.unique(targets))
    if distinct > MAX_CLASSES:
        return "regression", f"{distinct} distinct whole-number targets, over {MAX_CLASSES}"
    return "classification", f"{distinct} distinct whole-number targets, at most {MAX_CLASSES}"


def class_labels(labels: np.ndarray, source: Path) -> tuple[np.ndarray, list[str]]:
    """Labels int64 0..C-1 and the class names, from classes 0..C-1 or names."""
    if labels.ndim != 1:
        raise DataError(
            f"{source}: classification takes one label column, got {labels.shape[1]}: "
            "multi-label classification is not supported (README: Bring your own data)."
        )
    if labels.dtype.kind in "US":  # class names, sorted: the numbering ignores the row order
        class_names = sorted({str(label) for label in labels})
        return np.searchsorted(class_names, labels.astype(str)).astype(np.int64), class_names
    if not np.issubdtype(labels.dtype, np.number) or not np.isfinite(labels).all():
        raise DataError(f"{source}: labels must be class numbers or names (found NaN or inf).")
    if (labels != np.round(labels)).any():
        raise DataError(
            f"{source}: class labels must be whole numbers, e.g. 0, 1, 2 (for numbers to "
            "predict: --data.task regression)."
        )
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
            "from 0, give them as class names, or --data.task regression."
        )
    return labels.astype(np.int64), [str(c) for c in classes.astype(np.int64)]
