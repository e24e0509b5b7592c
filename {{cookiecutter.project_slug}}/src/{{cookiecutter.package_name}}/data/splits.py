"""Seeded, stratified train/val/test splits{% if cookiecutter.tuning == "yes" %}, and the validation folds of cross-validation{% endif %}."""

from __future__ import annotations

import numpy as np

from .sources import DataError


def strata(targets: np.ndarray) -> np.ndarray:
    """What a split keeps in proportion: the classes, or for regression targets (N, K) the
    first target's quantile bins (10, or fewer for small data: about 30 samples each)."""
    if targets.ndim == 1:
        return targets
    bins = max(1, min(10, len(targets) // 30))
    edges = np.quantile(targets[:, 0], np.linspace(0, 1, bins + 1)[1:-1])
    return np.unique(np.digitize(targets[:, 0], edges), return_inverse=True)[1]


def split_indices(
    labels: np.ndarray,
    val_fraction: float,
    test_fraction: float,
    seed: int,
    class_names: list[str] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified, seeded train/val/test indices: the same split on every run and process.
    Raises DataError unless every class has a sample in every split."""
    if val_fraction + test_fraction >= 1:
        raise DataError(
            f"data.val_fraction {val_fraction} and data.test_fraction {test_fraction} leave "
            "no training split: their sum must be below 1, e.g. 0.15 and 0.15."
        )
    from sklearn.model_selection import train_test_split  # ~0.1 s that --help need not pay

    indices = np.arange(len(labels))
    try:
        rest, test = train_test_split(
            indices, test_size=test_fraction, stratify=labels, random_state=seed
        )
        train, val = train_test_split(
            rest,
            test_size=val_fraction / (1 - test_fraction),
            stratify=labels[rest],
            random_state=seed,
        )
    except ValueError:  # a class too small for scikit-learn's stratification: named below
        train = val = test = np.array([], dtype=np.int64)
    counts = np.bincount(labels, minlength=int(labels.max()) + 1)
    for split in (train, val, test):
        missing = np.flatnonzero(np.bincount(labels[split], minlength=len(counts)) == 0)
        if len(missing):
            smallest = int(missing[np.argmin(counts[missing])])
            name = class_names[smallest] if class_names else str(smallest)
            raise DataError(
                f"class {name!r} has {counts[smallest]} samples, too few to appear in each of "
                f"train, validation and test ({len(labels)} samples, val_fraction "
                f"{val_fraction}, test_fraction {test_fraction}): add samples of it, remove "
                "it, or raise data.val_fraction / data.test_fraction."
            )
    return np.sort(train), np.sort(val), np.sort(test)
{%- if cookiecutter.tuning == "yes" %}


def max_folds(train_size: int, val_size: int) -> int:
    """Folds of the validation split's size: itself, and as many disjoint training parts."""
    return 1 + train_size // max(val_size, 1)


def validation_fold(
    train: np.ndarray, val: np.ndarray, labels: np.ndarray, fold: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) of cross-validation fold ``fold``; the test split never moves.

    Fold 0 is the validation split itself (the plain run). Fold k > 0 validates on the k-th
    class-balanced part of the training split, of the validation split's size, and trains on
    the rest plus the validation split. (scikit-learn's KFold would re-cut fold 0 too.)"""
    folds = max_folds(len(train), len(val))
    if not 0 <= fold < folds:
        raise DataError(
            f"data.val_fold={fold}: with {len(train)} training and {len(val)} validation "
            f"samples there are {folds} folds of the validation split's size: use 0 to "
            f"{folds - 1}, or lower data.val_fraction for more folds."
        )
    if fold == 0:
        return train, val
    order = np.random.default_rng(seed).permutation(train)
    # Interleave the classes (each sample keyed by its rank within its class over the
    # class's count): consecutive parts of `order` then keep the classes' proportions.
    ranks = np.zeros(len(order))
    for label in np.unique(labels[order]):
        members = np.flatnonzero(labels[order] == label)
        ranks[members] = (np.arange(len(members)) + 0.5) / len(members)
    order = order[np.argsort(ranks, kind="stable")]
    held = order[(fold - 1) * len(val) : fold * len(val)]
    return np.sort(np.concatenate([np.setdiff1d(train, held), val])), np.sort(held)
{%- endif %}
