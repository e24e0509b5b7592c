"""evaluate.py: a checkpoint or an export, on its run's test split (the same numbers as the
run's own test) or on other data; a model and data that do not fit are refused in one line."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from .conftest import Run, run_training, working_directory


def run_evaluate(folder: Path, *args: str) -> tuple[dict, Path, str]:
    """evaluate.main in ``folder``: (metrics.json, its folder, what it printed)."""
    import evaluate

    stdout = io.StringIO()
    with working_directory(folder), contextlib.redirect_stdout(stdout):
        out = evaluate.main(list(args))
    lines = stdout.getvalue().strip().splitlines()
    assert lines[-1] == f"evaluation: {(folder / out).resolve()}"
    return json.loads((folder / out / "metrics.json").read_text()), folder / out, stdout.getvalue()


def refusal(folder: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line evaluate.py prints when it refuses (exit code 2, nothing written)."""
    import evaluate

    before = set(folder.glob("runs/evaluations/*"))
    with working_directory(folder), pytest.raises(SystemExit) as exit:
        evaluate.main(list(args))
    assert exit.value.code == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: "), errors
    assert set(folder.glob("runs/evaluations/*")) == before
    return errors[0]


@pytest.mark.slow
def test_a_checkpoint_is_scored_on_its_test_split_as_its_run_tested_it(
    trained_run: Run, tmp_path: Path
) -> None:
    checkpoint = trained_run.summary["paths"]["best_checkpoint"]
    metrics, out, printed = run_evaluate(tmp_path, checkpoint)
    tested = trained_run.summary["metrics"]
    assert metrics["accuracy"] == pytest.approx(tested["test/acc"], abs=1e-6)
    assert metrics["loss"] == pytest.approx(tested["test/loss"], abs=1e-4)
    assert metrics["kind"] == "checkpoint"
    samples = metrics["samples"]
    assert metrics["data"] == f"the test split of the built-in digits ({samples} samples)"
    per_class = metrics["per_class"]
    assert list(per_class) == trained_run.summary["class_names"]
    assert sum(c["support"] for c in per_class.values()) == metrics["samples"]
    assert all(0 <= c[k] <= 1 for c in per_class.values() for k in ("precision", "recall", "f1"))
    assert (out / "confusion_matrix.png").stat().st_size > 0
    assert f"accuracy {metrics['accuracy']:.4f}" in printed


@pytest.mark.slow
def test_every_export_is_scored_as_its_export_report_measured_it(
    trained_run: Run, tmp_path: Path
) -> None:
    exports = {k: v for k, v in trained_run.summary["export"].items() if k != "eager"}
    assert exports
    for fmt, report in exports.items():
        metrics, _, _ = run_evaluate(tmp_path, report["path"], "--out", f"eval-{fmt}")
        assert metrics["kind"] == fmt
        assert metrics["accuracy"] == pytest.approx(report["accuracy"], abs=1e-6), fmt


def digits_csv(path: Path, rows: slice, classes: int = 10) -> Path:
    """Digits as a CSV of 64 feature columns and a label column."""
    digits = load_digits()
    keep = digits.target[rows] < classes
    table = np.column_stack([digits.data[rows][keep], digits.target[rows][keep]])
    header = ",".join([*(f"p{i}" for i in range(64)), "label"])
    np.savetxt(path, table, delimiter=",", header=header, comments="", fmt="%g")
    return path


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run]:
    """A short run on half the digits as a CSV file."""
    folder = tmp_path_factory.mktemp("csv-run")
    data = digits_csv(folder / "first-half.csv", slice(0, 900))
    run = run_training(
        folder, "--data.path", str(data), "--trainer.max_epochs", "5", "--export.formats", "[]"
    )
    return folder, run


@pytest.mark.slow
def test_other_data_is_scored_in_full(csv_run: tuple[Path, Run]) -> None:
    folder, run = csv_run
    other = digits_csv(folder / "second-half.csv", slice(900, None))
    checkpoint = run.summary["paths"]["best_checkpoint"]
    metrics, _, _ = run_evaluate(folder, checkpoint, "--data.path", str(other))
    assert metrics["samples"] == 1797 - 900
    assert metrics["data"] == f"all 897 samples of {other}"
    assert metrics["accuracy"] > 0.5  # five epochs on the other half: far above chance


@pytest.mark.slow
def test_a_model_and_data_that_do_not_fit_are_refused_in_one_line(
    csv_run: tuple[Path, Run], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, run = csv_run
    checkpoint = run.summary["paths"]["best_checkpoint"]
    fewer_features = folder / "wide.csv"
    rows = "".join(f"{i},{i % 3},{i % 10}\n" for i in range(300))
    fewer_features.write_text("a,b,label\n" + rows)
    error = refusal(folder, capsys, checkpoint, "--data.path", str(fewer_features))
    assert "takes samples of shape (64,)" in error and "has samples of shape (2,)" in error
    three_classes = digits_csv(folder / "three.csv", slice(900, None), classes=3)
    error = refusal(folder, capsys, checkpoint, "--data.path", str(three_classes))
    assert "predicts 10 classes (0, 1, 2, 3, 4, ...)" in error and "has 3 (0, 1, 2)" in error


def test_a_missing_model_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for missing in ("gone.ckpt", "gone.pt2"):
        assert "gone" in refusal(tmp_path, capsys, missing)
