"""CSV files as people publish them: a header row of column names, numbers in the feature
columns, and the label column holding numbers or class names as text (iris, wine, ...).

Our own reader (the csv module) rather than pandas: the project does not depend on pandas,
and a cell that is not a number must be named by row and column in one line.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


class TableError(ValueError):
    """A CSV that cannot be read as feature columns and one label column."""


def read_csv(path: Path, label_column: str | int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, F) float64 and the raw label column (N,): float64 if every label is a
    number, else the labels as text.

    ``label_column``: a column name (from the header row), a 0-based index (negative counts
    from the end), or None for the last column. The first row is a header when the label
    column is given by name, or when one of its feature cells is not a number.
    """
    with open(path, newline="", encoding="utf-8-sig") as file:
        rows = [row for row in csv.reader(file) if any(cell.strip() for cell in row)]
    if not rows:
        raise TableError(f"{path} is empty: expected rows of features and a label.")
    width = len(rows[0])
    if width < 2:
        raise TableError(f"{path} has one column: expected features and a label, comma-separated.")
    label = _label_index(rows[0], label_column, path)
    header = isinstance(label_column, str) or not all(
        _is_number(cell) for index, cell in enumerate(rows[0]) if index != label
    )
    names = [cell.strip() for cell in rows[0]] if header else [str(i) for i in range(width)]
    data = rows[1:] if header else rows
    if not data:
        raise TableError(f"{path} has a header row and no data rows.")
    features = np.empty((len(data), width - 1), dtype=np.float64)
    labels: list[str] = []
    for number, row in enumerate(data, start=2 if header else 1):
        if len(row) != width:
            raise TableError(f"{path} row {number} has {len(row)} cells, the first row {width}.")
        cells = [cell for index, cell in enumerate(row) if index != label]
        for column, cell in zip((n for i, n in enumerate(names) if i != label), cells, strict=True):
            if not _is_number(cell):
                raise TableError(
                    f"{path} row {number}, column {column!r}: {cell.strip()!r} is not a number. "
                    "Features must be numbers; if this is the label column, name it with "
                    "--data.label_column."
                )
        features[len(labels)] = [float(cell) for cell in cells]
        labels.append(row[label].strip())
    if all(_is_number(value) for value in labels):
        return features, np.array([float(value) for value in labels])
    return features, np.array(labels)


def _label_index(first_row: list[str], label_column: str | int | None, path: Path) -> int:
    width = len(first_row)
    if label_column is None:
        return width - 1
    if isinstance(label_column, str):
        names = [cell.strip() for cell in first_row]
        if label_column not in names:
            raise TableError(
                f"data.label_column {label_column!r} is not a column of {path}: its header "
                f"row has {', '.join(repr(n) for n in names)}."
            )
        return names.index(label_column)
    if not -width <= label_column < width:
        raise TableError(
            f"data.label_column {label_column} is out of range: {path} has {width} columns "
            f"(0 to {width - 1}, or -1 for the last)."
        )
    return label_column % width


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
