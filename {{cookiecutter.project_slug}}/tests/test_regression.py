"""Regression: a float target trains, exports, predicts and evaluates in its own units; the task
follows the data and says so; the shape pitfall (an output (B, 1) against a target (B,)) is
stopped; bad targets are refused in one line before anything is written."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_diabetes

import evaluate
import predict
from {{ cookiecutter.package_name }}.data.datamodule import DataModule
from {{ cookiecutter.package_name }}.data.sources import DataError, guess_task, read_data
from {{ cookiecutter.package_name }}.export.verify import load_model
from {{ cookiecutter.package_name }}.tasks.regression import Regression

from .conftest import Run, assert_same_weights, one_thread, run_training, run_until_exit
from .subprocesses import preset, run_train

COLUMNS = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]


def write_diabetes(path: Path, targets: tuple[str, ...] = ("progression",)) -> Path:
    """scikit-learn's bundled diabetes table as a CSV with a header: 442 patients, ten
    measurements, the disease progression a year later (and, for two targets, the blood
    pressure moved from the features to the targets)."""
    data = load_diabetes(scaled=False)
    table = np.column_stack([data.data, data.target])
    names = [*COLUMNS, "progression"]
    rows = [",".join(names)] + [",".join(f"{v:g}" for v in row) for row in table]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def diabetes_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("diabetes")
    csv = write_diabetes(folder / "diabetes.csv")
    return run_training(folder, "--data.path", str(csv), "--trainer.max_epochs", "20")


def diabetes_csv(run: Run) -> Path:
    return Path(run.summary["paths"]["run_dir"]).parents[2] / "diabetes.csv"


@pytest.mark.slow
def test_a_float_target_trains_a_regression_that_beats_the_mean(diabetes_run: Run) -> None:
    summary = diabetes_run.summary
    metrics, baselines = summary["metrics"], summary["baselines"]
    assert summary["task"] == "regression" and summary["output_names"] == ["progression"]
    assert {"test/rmse", "test/mae", "test/r2"} <= metrics.keys()
    assert metrics["test/rmse"] < baselines["training_mean_rmse"]
    assert metrics["test/r2"] > 0.2
    lines = diabetes_run.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("test RMSE "))
    assert lines[at + 1].startswith("baselines (test split): training mean RMSE ")
    # At or below the ridge regression, or a note that says by how much and if it is chance.
    if metrics["test/rmse"] > baselines["ridge_rmse"]:
        assert lines[at + 2].startswith("note: the network's squared errors exceed the ridge")
        assert "chance" in lines[at + 2]
    assert Path(summary["paths"]["plots"]["predictions"]).is_file()


@pytest.mark.slow
def test_every_export_answers_in_the_targets_units_like_the_checkpoint(
    diabetes_run: Run, tmp_path: Path, capsys
) -> None:
    summary = diabetes_run.summary
    data = DataModule(path=str(diabetes_csv(diabetes_run)))
    x, y = map(torch.from_numpy, data.split_arrays("test"))
    with torch.inference_mode():
        eager = load_model(summary["paths"]["best_checkpoint"])(x)
    assert abs(float(eager.mean()) - float(y.mean())) < float(y.std()), "the targets' units"
    for fmt, figures in summary["export"].items():
        assert figures["rmse"] == pytest.approx(summary["metrics"]["test/rmse"], rel=0.05), fmt
    metadata = json.loads(Path(summary["paths"]["export_metadata"]).read_text())
    assert metadata["task"] == "regression" and metadata["output_names"] == ["progression"]
    rows = tmp_path / "rows.npy"
    np.save(rows, x[:3].numpy())
    capsys.readouterr()
    predictions = predict.main([summary["export"]["torch.export"]["path"], str(rows)])
    values = [p.values["progression"] for p in predictions if p.values]
    np.testing.assert_allclose(values, eager[:3, 0].numpy(), rtol=1e-4)
    assert capsys.readouterr().out.splitlines()[0].startswith(f"{rows}[0]: progression=")
    out = evaluate.main([summary["export"]["torch.export"]["path"], "--out", str(tmp_path / "e")])
    written = json.loads((out / "metrics.json").read_text())
    assert written["rmse"] == pytest.approx(summary["metrics"]["test/rmse"], rel=1e-3)
    assert {"mae", "rmse", "r2"} <= written["per_target"]["progression"].keys()
    assert (out / "predictions.png").is_file()


@pytest.mark.slow
def test_two_targets_train_with_metrics_for_each(tmp_path: Path) -> None:
    csv = write_diabetes(tmp_path / "two.csv")
    args = ["--data.path", str(csv), "--data.label_column", "[bp, progression]"]
    run = run_training(tmp_path, *args, "--trainer.max_epochs", "3", "--export.formats", "[]")
    assert run.summary["output_names"] == ["bp", "progression"]
    for target in ("bp", "progression"):
        assert {f"test/rmse/{target}", f"test/mae/{target}", f"test/r2/{target}"} <= run.summary[
            "metrics"
        ].keys()


@pytest.mark.parametrize(
    ("targets", "task"),
    [
        (np.arange(100) % 3, "classification"),
        (np.arange(100) % 3 + 0.5, "regression"),
        (np.arange(100) * 7, "regression"),  # a count: 100 distinct whole numbers
        (np.array(["cat", "dog"] * 50), "classification"),
        (np.ones((100, 2)), "regression"),
    ],
)
def test_the_task_follows_the_targets(targets: np.ndarray, task: str) -> None:
    assert guess_task(targets)[0] == task


def test_the_task_can_be_chosen_and_a_class_column_of_shape_n_1_reads_as_n(tmp_path: Path) -> None:
    features = np.random.default_rng(0).normal(size=(90, 3))
    path = tmp_path / "d.npz"
    np.savez(path, features=features, labels=(np.arange(90) % 3)[:, None])
    source = read_data(path)
    assert (source.task, source.targets.shape) == ("classification", (90,))
    forced = read_data(path, task="regression")
    assert (forced.task, forced.targets.shape) == ("regression", (90, 1))
    assert forced.targets.dtype == np.float32


def test_columns_that_are_no_feature_can_be_left_out(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    rows = [f"id{i},{i % 7}.5,{i * 2},name{i},{i * 1.5}" for i in range(60)]
    path.write_text("id,a,b,name,price\n" + "\n".join(rows) + "\n")
    source = read_data(path, ignore_columns=["id", "name"])
    assert source.task == "regression" and source.names == ["price"]
    assert source.features.shape == (60, 2)


def test_the_shape_pitfall_is_stopped_on_the_first_batch() -> None:
    task = Regression(["y"])
    x = torch.zeros(4, 3)
    for outputs, target in (
        (torch.zeros(4, 1), torch.zeros(4)),
        (torch.zeros(4), torch.zeros(4, 1)),
    ):
        with pytest.raises(ValueError, match=r"output has shape .* and the target .* \(B, B\)"):
            task.check_batch(x, outputs, target)
    task.check_batch(x, torch.zeros(4, 1), torch.zeros(4, 1))


@pytest.mark.slow
def test_a_network_that_answers_b_for_a_b_1_target_never_trains(tmp_path: Path) -> None:
    csv = write_diabetes(tmp_path / "d.csv")
    result = run_until_exit(
        tmp_path, "--data.path", str(csv), "--model.net", "tests.networks.Squeezed"
    )
    assert result.code == 2, result.stderr
    assert "to (2,), expected (2, 1)" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def bad_table(path: Path, cell: str, row: int = 5, column: int = 2) -> Path:
    rows = [[f"{i % 7}.5", str(i), f"{i * 1.5}"] for i in range(60)]
    rows[row][column] = cell
    path.write_text("a,b,y\n" + "\n".join(",".join(r) for r in rows) + "\n")
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: bad_table(d / "nan.csv", "nan"), "'y' of sample 5 is nan"),
        (lambda d: bad_table(d / "inf.csv", "inf"), "'y' of sample 5 is inf"),
        (lambda d: bad_table(d / "empty.csv", ""), r"row 7, target column 'y': '' is not a number"),
        (lambda d: bad_table(d / "text.csv", "abc"), "'abc' is not a number, unlike the rest"),
        (lambda d: bad_table(d / "huge.csv", "1e300"), "beyond float32's range"),
    ],
)
def test_bad_targets_are_refused_in_one_line(tmp_path: Path, make, message: str) -> None:
    path = make(tmp_path)
    with pytest.raises(DataError, match=message) as error:
        read_data(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_constant_or_missing_target_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text("a,y\n" + "\n".join(f"{i}.5,3.25" for i in range(50)) + "\n")
    with pytest.raises(DataError, match="'y' is constant"):
        read_data(path, task="regression")
    with pytest.raises(DataError, match="column 'price' is not a column"):
        read_data(path, label_column="price")


@pytest.mark.slow
def test_a_bad_target_stops_train_with_exit_code_2_and_no_run_folder(tmp_path: Path) -> None:
    path = bad_table(tmp_path / "nan.csv", "nan")
    result = run_until_exit(tmp_path, "--data.path", str(path))
    assert result.code == 2 and result.stderr.startswith("error: ")
    assert "must be finite numbers" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_log1p_targets_are_answered_in_their_own_units(tmp_path: Path) -> None:
    features = np.random.default_rng(0).normal(size=(300, 4))
    prices = np.exp(3 + features[:, 0] + 0.1 * features[:, 1])  # positive, skewed
    np.savez(tmp_path / "p.npz", features=features, labels=prices)
    args = ["--data.path", str(tmp_path / "p.npz"), "--data.target_transform", "log1p"]
    run = run_training(
        tmp_path, *args, "--trainer.max_epochs", "10", "--export.formats", "[torch.export]"
    )
    data = DataModule(path=str(tmp_path / "p.npz"), target_transform="log1p")
    x, y = map(torch.from_numpy, data.split_arrays("test"))
    model = load_model(run.summary["paths"]["best_checkpoint"])
    with torch.inference_mode():
        answered = model(x)
    assert float((answered - y).abs().median()) < float(y.std()), "expm1 undone, not log units"
    assert run.summary["metrics"]["test/r2"] > 0.5


@pytest.mark.slow
def test_a_regression_stopped_mid_epoch_resumes_to_the_uninterrupted_weights(
    tmp_path: Path, restore_torch_flags: None
) -> None:
    csv = write_diabetes(tmp_path / "d.csv")
    args = [
        "--data.path",
        str(csv),
        "--config",
        preset("reproducible"),
        "--trainer.max_epochs",
        "2",
    ]
    args += ["--export.formats", "[]"]
    probe = ["--trainer.callbacks+=tests.probes.SendSignal", "--trainer.callbacks.signal"]
    probe += ["SIGTERM", "--trainer.callbacks.step", "7"]  # 5 steps an epoch: mid-second
    (tmp_path / "stopped").mkdir()
    (tmp_path / "whole").mkdir()
    with one_thread():
        stopped = run_until_exit(tmp_path / "stopped", *args, *probe)
        assert stopped.code == 143, stopped.stderr
        (resume,) = [line for line in stopped.stderr.splitlines() if line.startswith("resume: ")]
        resumed = run_training(tmp_path / "stopped", *shlex.split(resume)[3:])
        reference = run_training(tmp_path / "whole", *args)
    assert_same_weights(
        resumed.summary["paths"]["last_checkpoint"], reference.summary["paths"]["last_checkpoint"]
    )


@pytest.mark.slow
def test_a_regression_trains_under_ddp_on_two_processes(tmp_path: Path) -> None:
    csv = write_diabetes(tmp_path / "d.csv")
    args = ["--data.path", str(csv), "--config", preset("ddp-cpu"), "--trainer.max_epochs", "2"]
    result = run_train(tmp_path, *args, "--export.formats", "[torchscript]")
    assert result.returncode == 0, result.stderr[-3000:]
    (summary,) = tmp_path.glob("runs/**/summary.json")
    written = json.loads(summary.read_text())
    assert written["task"] == "regression" and "test/rmse" in written["metrics"]
    assert result.stdout.count("summary: ") == 1
