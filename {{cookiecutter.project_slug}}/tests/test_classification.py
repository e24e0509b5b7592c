"""The classification task's baselines (majority class and logistic regression, fit on the
training split and scored on the network's test split) in summary.json and the end-of-run
lines, and the gap to the logistic regression counted in test samples."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from {{ cookiecutter.package_name }}.data.datamodule import DataModule
from {{ cookiecutter.package_name }}.data.sources import read_data
from {{ cookiecutter.package_name }}.report import summary as report
from {{ cookiecutter.package_name }}.tasks import classification as baselines
from {{ cookiecutter.package_name }}.tasks.classification import Classification, linear_gap

from .conftest import Run
from .test_data_files import blobs, write_npz
from .test_image_folders import write_digit_folder


def compute_baselines(data: DataModule) -> dict:
    task = Classification(data.num_outputs, data.output_names)
    return task.baselines(data.split_arrays("train"), data.split_arrays("test"))


def format_summary(summary: dict) -> str:
    return "\n".join(report.format_summary(summary, Classification(10, list("0123456789"))))


def overlapping(samples: int = 300, features: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Three classes a linear model separates only in part: its score is not a trivial 1.0."""
    rng = np.random.default_rng(1)
    labels = np.arange(samples) % 3
    return rng.normal(size=(samples, features)) + 0.7 * labels[:, None], labels


def data_module(tmp_path: Path, features: np.ndarray, labels: np.ndarray):
    return DataModule(str(write_npz(tmp_path / "data.npz", features, labels)))


def direct_logistic_regression(features: np.ndarray, labels: np.ndarray, data: DataModule) -> float:
    """The same model fit with scikit-learn by hand, on the data module's split indices."""
    flat = features.reshape(len(features), -1)
    train, test = data.train_idx, data.test_idx
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=baselines.MAX_ITER))
    return round(float(model.fit(flat[train], labels[train]).score(flat[test], labels[test])), 6)


def test_majority_class_scores_its_share_of_the_test_split(tmp_path: Path) -> None:
    labels = np.repeat([0, 1, 2], [60, 120, 20])  # class 1: 60% of every (stratified) split
    features = np.random.default_rng(0).normal(size=(len(labels), 4))
    result = compute_baselines(data_module(tmp_path, features, labels))
    assert result["majority_class"] == 0.6


def test_logistic_regression_on_blobs_is_near_perfect(tmp_path: Path) -> None:
    result = compute_baselines(data_module(tmp_path, *blobs()))
    assert result["logistic_regression"] >= 0.95
    assert "skipped" not in result


def test_logistic_regression_matches_scikit_learn_on_the_same_split(tmp_path: Path) -> None:
    features, labels = overlapping()
    data = data_module(tmp_path, features, labels)
    result = compute_baselines(data)
    assert 0.4 < result["logistic_regression"] < 1.0, "the data is meant to be hard"
    assert result["logistic_regression"] == direct_logistic_regression(features, labels, data)


def test_images_are_flattened_or_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_digit_folder(tmp_path / "digits", per_class=15, size=8)
    data = DataModule(str(folder), color_mode="RGB")
    assert data.input_shape == (3, 8, 8)
    source = read_data(folder, color_mode="RGB")  # (N, 3, 8, 8): flattened to 192 values
    expected = direct_logistic_regression(source.features, source.targets, data)
    assert compute_baselines(data)["logistic_regression"] == expected
    monkeypatch.setattr(baselines, "MAX_FEATURES", 191)
    result = compute_baselines(data)
    assert result["logistic_regression"] is None
    assert result["skipped"] == "192 input values per sample, over the 191 of a quick fit"


def test_too_many_values_skip_the_logistic_regression(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = data_module(tmp_path, *blobs(samples=120, features=5))
    samples = len(data.train_idx)
    monkeypatch.setattr(baselines, "MAX_VALUES", samples * 5 - 1)
    result = compute_baselines(data)
    assert result["logistic_regression"] is None and result["majority_class"] > 0
    assert result["skipped"].startswith(f"{samples} x 5 training values, over ")
    assert "\n" not in result["skipped"]


def test_baselines_are_the_same_on_every_call(tmp_path: Path) -> None:
    features, labels = overlapping()
    first = compute_baselines(data_module(tmp_path, features, labels))
    again = compute_baselines(data_module(tmp_path, features, labels))
    assert first == again


def test_built_in_digits_baselines() -> None:
    data = DataModule()
    result = compute_baselines(data)
    assert set(result) == {"majority_class", "logistic_regression", "test_samples"}
    assert result["test_samples"] == len(data.test_idx) == 270  # 15 % of 1,797 digits
    assert result["majority_class"] == pytest.approx(0.1, abs=0.01)  # ten balanced classes
    assert result["logistic_regression"] > 0.9


def test_split_arrays_follow_the_split_indices() -> None:
    data = DataModule()
    splits = {"train": data.train_idx, "val": data.val_idx, "test": data.test_idx}
    for split, indices in splits.items():
        features, labels = data.split_arrays(split)
        assert features.shape == (len(indices), *data.input_shape)
        np.testing.assert_array_equal(labels, data.source.targets[indices])
        assert len(labels) == len(indices)
    with pytest.raises(ValueError, match="'tset'"):
        data.split_arrays("tset")


def summary_with(accuracy: float, found: dict | None) -> dict:
    """The fields format_summary reads, for a run with test accuracy ``accuracy``."""
    return {
        "metrics": {"test/acc": accuracy, "test/loss": 0.1},
        "baselines": found,
        "epochs": 3,
        "wall_time_s": 1.0,
        "seed": 42,
        "paths": {"best_checkpoint": "best.ckpt", "plots": {}, "logs": None},
        "view_logs": [],
        "export": {},
    }


def test_a_gap_to_the_logistic_regression_is_counted_in_test_samples() -> None:
    found = {"majority_class": 0.6, "logistic_regression": 83 / 86, "test_samples": 86}
    gap = linear_gap(80 / 86, found)
    assert gap is not None and (gap.samples, gap.test_samples) == (3, 86)
    assert str(gap) == "3 fewer of the 86 test samples right"
    # Two binomial standard errors of 83 of 86, with two successes and two failures added.
    assert gap.chance == pytest.approx(2 * math.sqrt(86 * (85 / 90) * (5 / 90)))
    assert gap.within_chance  # 3 < 4.25
    farther = linear_gap(78 / 86, found)
    assert farther is not None and not farther.within_chance  # 5 samples
    assert linear_gap(83 / 86, found) is None and linear_gap(1.0, found) is None  # not below
    # A perfect logistic regression still has a standard error: one sample is chance.
    perfect = {**found, "logistic_regression": 1.0}
    one_wrong = linear_gap(85 / 86, perfect)
    assert one_wrong is not None and one_wrong.within_chance
    assert linear_gap(0.5, {**found, "logistic_regression": None}) is None  # skipped
    assert linear_gap(None, found) is None  # no test accuracy (a run stopped before its test)


def test_the_same_count_right_is_no_gap_though_float32_reads_lower() -> None:
    """39 of 41 right: torchmetrics' float32 accuracy rounds to 0.951219, the baseline's
    float64 to 0.95122. Not below, so no note."""
    network = round(float(torch.tensor(39 / 41, dtype=torch.float32)), 6)
    linear = round(39 / 41, 6)
    assert network < linear  # the trap
    found = {"majority_class": 0.5, "logistic_regression": linear, "test_samples": 41}
    assert linear_gap(network, found) is None
    one_fewer = linear_gap(38 / 41, found)
    assert one_fewer is not None and one_fewer.samples == 1
    lines = format_summary(summary_with(network, found)).splitlines()
    assert not any(line.startswith("note:") for line in lines)


def test_end_of_run_lines_show_the_baselines() -> None:
    found = {"majority_class": 0.1019, "logistic_regression": 0.963, "test_samples": 270}
    lines = format_summary(summary_with(0.98, found)).splitlines()
    assert lines[0].startswith("test accuracy 0.9800")
    assert lines[1] == "baselines (test split): majority class 0.1019, logistic regression 0.9630"
    assert not any(line.startswith("note:") for line in lines)

    below = format_summary(summary_with(0.95, found)).splitlines()
    assert below[2] == (
        "note: the network gets 4 fewer of the 270 test samples right than the logistic "
        "regression, within two standard errors of its accuracy (6.7 samples): not "
        "distinguishable from chance"
    )
    far_below = format_summary(summary_with(0.9, found)).splitlines()
    assert far_below[2] == (
        "note: the network gets 17 fewer of the 270 test samples right than the logistic "
{%- if cookiecutter.tuning == "yes" %}
        "regression, beyond chance: tune it with python sweep.py (README: Tune it)"
{%- else %}
        "regression, beyond chance: a smaller network or more regularisation may do better"
{%- endif %}
    )

    skipped = {"majority_class": 0.5, "logistic_regression": None, "skipped": "too big"}
    lines = format_summary(summary_with(0.3, skipped)).splitlines()
    assert lines[1].endswith("majority class 0.5000, logistic regression skipped: too big")
    assert not any(line.startswith("note:") for line in lines)

    assert "baselines" not in format_summary(summary_with(0.9, None))  # a run that stopped


@pytest.mark.slow
def test_a_run_reports_its_baselines(trained_run: Run) -> None:
    found = trained_run.summary["baselines"]
    assert found == compute_baselines(DataModule()), "the run's own test split"
    lines = trained_run.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("test accuracy "))
    assert lines[at + 1] == (
        f"baselines (test split): majority class {found['majority_class']:.4f}, "
        f"logistic regression {found['logistic_regression']:.4f}"
    )
    below = linear_gap(trained_run.summary["metrics"]["test/acc"], found) is not None
    assert lines[at + 2].startswith("note: the network gets ") == below
