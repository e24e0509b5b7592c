"""Your own data without code: `--data.path` to an .npz or .csv file, checked at start-up.

    .npz   arrays `features` (N, F) numbers and `labels` (N,) integer classes 0..C-1
    .csv   numbers only, one sample per row, the label in the last column; one header row
           is allowed

Every problem is a DataError naming the file and what to change, raised when the data
module is built, before any training.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

FORMAT_HELP = (
    "expected an .npz with arrays 'features' (N, F) and 'labels' (N,), or a .csv of numbers "
    "with the label in the last column"
)


class DataError(ValueError):
    """A data file that is missing, unreadable, or not features + integer labels."""


def read_data_file(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, F) float32 and labels (N,) int64 from ``path``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"data.path {path} does not exist: give an existing file ({FORMAT_HELP}), or "
            "leave data.path unset for the built-in digits."
        )
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as arrays:  # never unpickle data files
                features, labels = arrays["features"], arrays["labels"]
        elif path.suffix == ".csv":
            table = np.genfromtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
            if len(table) and np.isnan(table[0]).all():
                table = table[1:]  # the header row
            features, labels = table[:, :-1], table[:, -1]
        else:
            raise DataError(f"{path}: unknown data file type; {FORMAT_HELP}.")
    except (OSError, ValueError, KeyError) as error:
        if isinstance(error, DataError):
            raise
        raise DataError(f"cannot read {path} ({error}); {FORMAT_HELP}.") from None
    return check_arrays(features, labels, path)


def check_arrays(
    features: np.ndarray, labels: np.ndarray, source: str | Path
) -> tuple[np.ndarray, np.ndarray]:
    """Shapes, finite numbers and integer classes 0..C-1, or a DataError saying which."""
    if features.ndim != 2 or labels.ndim != 1 or len(features) != len(labels):
        raise DataError(
            f"{source}: features must be (N, F) and labels (N,), got {features.shape} and "
            f"{labels.shape}."
        )
    numeric = all(np.issubdtype(a.dtype, np.number) for a in (features, labels))
    if not numeric or not (np.isfinite(features).all() and np.isfinite(labels).all()):
        raise DataError(
            f"{source}: features and labels must be finite numbers (found NaN, inf or text)."
        )
    if (labels != np.round(labels)).any():
        raise DataError(f"{source}: labels must be integer class indices, e.g. 0, 1, 2.")
    if labels.min() < 0 or len(np.unique(labels)) < 2:
        raise DataError(f"{source}: labels must be classes 0..C-1 with at least 2 classes.")
    return features.astype(np.float32), labels.astype(np.int64)
