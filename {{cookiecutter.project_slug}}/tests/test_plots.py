"""curves.png and confusion_matrix.png: written for every run, kept whole across a resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from {{ cookiecutter.package_name }}.report.plots import MetricHistory, write_curves
from {{ cookiecutter.package_name }}.tasks.classification import Classification

from .conftest import Run


@pytest.mark.slow
def test_curves_are_drawn_from_the_history(tmp_path: Path) -> None:
    history = [
        {"epoch": float(e), "train/loss": 1 / (e + 1), "val/loss": 1.1 / (e + 1), "val/acc": 0.5}
        for e in range(5)
    ]
    path = write_curves(history, tmp_path / "curves.png")
    assert path is not None
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 500
    assert write_curves([], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_confusion_matrix_is_drawn(tmp_path: Path) -> None:
    logits = torch.eye(3).repeat(10, 1)
    labels = torch.arange(3).repeat(10)
    task = Classification(3, ["cat", "dog", "eel"])
    with Image.open(task.plot_test(logits, labels, tmp_path / "cm.png")) as image:
        assert image.format == "PNG"


def test_history_survives_a_checkpoint_round_trip(tmp_path: Path) -> None:
    history = MetricHistory()
    # Rows may lack a metric (e.g. no validation in an epoch): missing stays missing.
    history.history = [{"epoch": 0.0, "val/loss": 1.0}, {"epoch": 1.0, "train/loss": 0.5}]
    torch.save(history.state_dict(), tmp_path / "history.pt")
    restored = MetricHistory()
    restored.load_state_dict(torch.load(tmp_path / "history.pt", weights_only=True))
    assert restored.history == history.history


@pytest.mark.slow
@pytest.mark.logger
def test_every_run_leaves_both_plots_listed_in_the_summary(trained_run: Run) -> None:
    plots = trained_run.summary["paths"]["plots"]
    assert set(plots) == {"curves", "confusion_matrix"}
    for path in plots.values():
        assert Path(path).parent == Path(trained_run.summary["paths"]["run_dir"])
        with Image.open(path) as image:
            assert image.format == "PNG"
    assert "plots: " in trained_run.stdout


@pytest.mark.slow
def test_history_has_one_row_per_epoch_with_train_and_val(trained_run: Run) -> None:
    checkpoint = torch.load(
        trained_run.summary["paths"]["last_checkpoint"], map_location="cpu", weights_only=True
    )
    (state,) = (v for k, v in checkpoint["callbacks"].items() if "MetricHistory" in k)
    restored = MetricHistory()
    restored.load_state_dict(state)
    history = restored.history
    assert [row["epoch"] for row in history] == list(range(25))
    assert {"train/loss", "train/acc", "val/loss", "val/acc"} <= history[-1].keys()
