"""Baselines on the network's own test split: the numbers a network has to beat to be worth
its training. The majority class is the floor; a logistic regression on the standardised
flat inputs is what a linear model gets in a second or so.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .data import ClassificationDataModule

# The logistic regression is skipped above these, so that it stays a second or so of the run.
# Measured on one thread (scikit-learn 1.9, lbfgs, 10 classes): the digits' 1257 x 64 training
# inputs take 15-25 ms (converged in 28 iterations); at 2e7 values (20000 x 1000, 5000 x 4096,
# 3594 upsampled digits x 4096) one iteration takes 40-85 ms and the fits converged in 7-17
# iterations (0.6-0.7 s), MAX_ITER of them at most (about 17 s: still small against training
# a network on that much data). Above MAX_FEATURES (64 x 64 grayscale; 32 x 32 RGB is 3072)
# raw pixels make a poor linear model and lbfgs's history (about 20 vectors of features x
# classes floats) grows large: e.g. 224 x 224 RGB and 100 classes would hold 2.4 GB.
MAX_FEATURES = 4096
MAX_VALUES = 20_000_000  # training samples x features
MAX_ITER = 200  # lbfgs iterations: the digits need 28; a fit stopped here is still a baseline


def compute_baselines(datamodule: ClassificationDataModule) -> dict[str, Any]:
    """Test-split accuracies of the majority class and of a logistic regression, both fit on
    the training split only: {"majority_class": float, "logistic_regression": float | None,
    "test_samples": int}, with "skipped" (the reason, one line) where the logistic regression
    was not fit. The test split's size tells how many samples a difference is."""
    train_y, test_y = datamodule.split_labels("train"), datamodule.split_labels("test")
    majority = np.bincount(train_y).argmax()  # ties: the lowest class, the same on every run
    baselines: dict[str, Any] = {
        "majority_class": _rounded(np.mean(test_y == majority)),
        "test_samples": len(test_y),
    }
    # Decided from the shapes: a large dataset's features are not copied only to be skipped.
    skipped = _too_slow(len(train_y), math.prod(datamodule.input_shape))
    if skipped:
        return {**baselines, "logistic_regression": None, "skipped": skipped}
    train_x = datamodule.split_arrays("train")[0].reshape(len(train_y), -1)  # (N, features)
    test_x = datamodule.split_arrays("test")[0].reshape(len(test_y), -1)
    # Imported here: train.py --help and runs that never get here do without them.
    # (threadpoolctl comes with scikit-learn.)
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    # lbfgs is deterministic; random_state pins the solvers that shuffle, should one be chosen.
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=MAX_ITER, random_state=0))
    # One BLAS thread: lbfgs's products of (samples, features) by (features, classes) are too
    # thin to share, and threads that wait for a busy core (a sweep's other trials, a test
    # run) cost more than they give: on 2 cores with one busy, the digits took 0.21 s on two
    # threads against 0.026 s on one, 20000 x 1000 inputs 6.1 s against 0.66 s (idle: 1.1 s
    # against 0.6 s). BLAS only: torch's OpenMP threads are left as they are.
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        # Not converged in MAX_ITER iterations: the score is still that of a linear model, at
        # worst a little below what more iterations would give; no warning in the run's output.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(train_x, train_y)
        accuracy = model.score(test_x, test_y)
    return {**baselines, "logistic_regression": _rounded(accuracy)}


@dataclass(frozen=True)
class LinearGap:
    """How many fewer test samples a model gets right than the logistic regression."""

    samples: int  # at least 1
    test_samples: int
    chance: float  # two standard errors of the logistic regression's accuracy, in samples

    @property
    def within_chance(self) -> bool:
        """A gap under two standard errors: a test split this size can hardly tell it from
        luck. (Over 20 splits of breast-cancer, 86 test samples, even the logistic regression
        with its C tuned on validation tested below the default one on 9: the template's
        BENCHMARKS.md.)"""
        return self.samples < self.chance

    def __str__(self) -> str:
        return f"{self.samples} fewer of the {self.test_samples} test samples right"

    def chance_words(self) -> str:
        return (
            f"within two standard errors of its accuracy ({self.chance:.1f} samples): not "
            "distinguishable from chance"
        )


def linear_gap(accuracy: float | None, baselines: dict[str, Any]) -> LinearGap | None:
    """The gap of ``accuracy`` below the logistic regression, in whole test samples; None
    when it is not a sample below (the same count right can read a hair below: the network's
    accuracy comes as float32, the baseline's as float64), or either accuracy is missing
    (no test, or the logistic regression skipped)."""
    linear, test_samples = baselines.get("logistic_regression"), baselines.get("test_samples")
    if accuracy is None or linear is None or not test_samples:
        return None
    samples = round((linear - accuracy) * test_samples)
    if samples < 1:
        return None
    chance = 2 * test_samples * binomial_standard_error(linear, test_samples)
    return LinearGap(samples, test_samples, chance)


def binomial_standard_error(proportion: float, samples: int) -> float:
    """The standard error of a proportion of ``samples`` (an accuracy), with Agresti and
    Coull's two successes and two failures added: a perfect score still has one. Shared by
    the notes here and the sweep's one-standard-error rule (sweep_report)."""
    adjusted = (proportion * samples + 2) / (samples + 4)
    return math.sqrt(adjusted * (1 - adjusted) / samples)


def _too_slow(samples: int, features: int) -> str | None:
    """Why a logistic regression on (samples, features) training inputs would not stay quick;
    None when it would."""
    if features > MAX_FEATURES:
        return f"{features:,} input values per sample, over the {MAX_FEATURES:,} of a quick fit"
    if samples * features > MAX_VALUES:
        return (
            f"{samples:,} training samples x {features:,} values = {samples * features:.1e}, "
            f"over the {MAX_VALUES:.0e} of a quick fit"
        )
    return None


def _rounded(accuracy: float) -> float:
    return round(float(accuracy), 6)
