"""--data.path: .npz and .csv files read and checked, with errors that name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from {{ cookiecutter.package_name }}.data.datamodule import DataModule
from {{ cookiecutter.package_name }}.data.sources import DataError, read_data

from .conftest import build, run_training, run_until_exit


def read_data_file(path: Path, label_column: str | int | None = None):
    """(features, targets, names) of a data file, as the data module reads it."""
    source = read_data(path, label_column=label_column)
    return source.features, source.targets, source.names


def write_npz(path: Path, features: np.ndarray, labels: np.ndarray) -> Path:
    np.savez(path, features=features, labels=labels)
    return path


def blobs(samples: int = 120, features: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Three well-separated classes: any working model learns them."""
    rng = np.random.default_rng(0)
    labels = np.arange(samples) % 3
    return rng.normal(size=(samples, features)) + 4 * labels[:, None], labels


def test_npz_and_csv_with_a_header_read_alike(tmp_path: Path) -> None:
    features, labels = blobs()
    npz = write_npz(tmp_path / "d.npz", features, labels)
    csv = tmp_path / "d.csv"
    rows = "\n".join(",".join(map(str, [*f, y])) for f, y in zip(features, labels, strict=True))
    csv.write_text("f1,f2,f3,f4,f5,label\n" + rows + "\n")
    for path in (npz, csv):
        got_features, got_labels, _ = read_data_file(path)
        assert got_features.dtype == np.float32 and got_labels.dtype == np.int64
        np.testing.assert_allclose(got_features, features, rtol=1e-6)
        np.testing.assert_array_equal(got_labels, labels)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.npz", "does not exist"),
        (lambda d: _write(d / "data.json", "{}"), "unknown data file type"),
        (lambda d: _write(d / "broken.npz", "not a zip"), "cannot read"),
        (lambda d: _savez(d / "keys.npz", x=blobs()[0], y=blobs()[1]), "cannot read"),
        (lambda d: write_npz(d / "nan.npz", blobs()[0] * np.nan, blobs()[1]), "finite numbers"),
        (lambda d: write_npz(d / "shape.npz", blobs()[0], blobs()[1][:-1]), r"\(N, F\)"),
        (lambda d: write_npz(d / "one.npz", blobs()[0], blobs()[1] * 0), "at least 2 classes"),
        (lambda d: _write(d / "text.csv", "a,b\nx,1\ny,0\n"), r"row 2, column 'a': 'x' is not"),
        (lambda d: write_npz(d / "from1.npz", blobs()[0], blobs()[1] + 1), r"classes 0\.\.C-1"),
        (lambda d: write_npz(d / "gap.npz", blobs()[0], blobs()[1] * 2), r"missing \[1, 3\]"),
        (lambda d: _write(d / "ragged.csv", "1,2,0\n3,1\n"), "row 2 has 2 cells"),
        (lambda d: _write(d / "empty.csv", "\n"), "is empty"),
    ],
)
def test_bad_data_files_are_named_with_the_fix(tmp_path: Path, make, message: str) -> None:
    path = make(tmp_path)
    with pytest.raises(DataError, match=message) as error:
        read_data_file(path)
    assert str(path) in str(error.value)


IRIS_LIKE = """sepal_length,sepal_width,species,petal_length
5.1,3.5,setosa,1.4
7.0,3.2,versicolor,4.7
6.3,3.3,virginica,6.0
4.9,3.0,setosa,1.4
"""


def test_csv_as_published_header_and_class_names_as_text(tmp_path: Path) -> None:
    path = tmp_path / "iris.csv"
    path.write_text(IRIS_LIKE)
    # The label column is not the last one here: named by its header...
    features, labels, names = read_data_file(path, label_column="species")
    assert names == ["setosa", "versicolor", "virginica"]  # sorted, whatever the row order
    assert labels.tolist() == [0, 1, 2, 0]
    np.testing.assert_allclose(features[0], [5.1, 3.5, 1.4])
    # ... or by its index; and without the option, the last column is the label.
    assert read_data_file(path, label_column=2)[2] == names
    last = tmp_path / "last.csv"
    last.write_text("a,b,kind\n1,2,cat\n3,4,dog\n")
    assert read_data_file(last)[2] == ["cat", "dog"]
    with pytest.raises(DataError, match=r"'species' is not a column .* 'a', 'b', 'kind'"):
        read_data_file(last, label_column="species")


@pytest.mark.parametrize("label_column", ["species", "2", "-2"])
@pytest.mark.slow
def test_label_column_option_takes_a_name_or_an_index(tmp_path: Path, label_column: str) -> None:
    rows = [f"{i % 3 + 0.5},{i},{['a', 'b', 'c'][i % 3]},7" for i in range(30)]
    path = tmp_path / "t.csv"
    path.write_text("x,y,species,z\n" + "\n".join(rows) + "\n")
    cli = build(
        tmp_path,
        *("--data.path", str(path), "--data.label_column", label_column),
        *("--trainer.logger", "false"),
    )
    assert cli.datamodule.output_names == ["a", "b", "c"]
    assert cli.datamodule.input_shape == (3,)
    assert cli.model.hparams.output_names == ["a", "b", "c"]


def test_a_class_too_small_for_every_split_is_named(tmp_path: Path) -> None:
    features, labels = blobs()
    labels[:2] = 3  # class 3: two samples, not enough for train, validation and test
    path = write_npz(tmp_path / "small.npz", features, labels)
    with pytest.raises(DataError, match=r"class '3' has 2 samples, too few"):
        DataModule(path=str(path))


def test_flat_features_are_not_augmented_and_asking_for_it_is_refused(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "d.npz", *blobs())
    data = DataModule(path=str(path))
    assert data.shift_prob == 0 and data.input_shape == (5,)
    assert data.output_names == ["0", "1", "2"]
    assert data.preprocessing == {"kind": "features"}
    mean, std = data.input_stats()
    assert mean.shape == std.shape == (5,), "flat features: one mean and std per feature"
    with pytest.raises(DataError, match=r"set --data\.shift_prob 0"):
        DataModule(path=str(path), shift_prob=0.3)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer.max_epochz", "3"], "unrecognized arguments: --trainer.max_epochz"),
        (["--trainer.max_epochs", "abc"], "trainer.max_epochs"),
        (["--data.path", "missing.npz"], "data.path missing.npz does not exist"),
        (["--data.path", "broken.npz", "--data.shift_prob", "0"], "cannot read broken.npz"),
        (["--data.batch_size", "0"], 'key "data.batch_size":\n  Not of type PositiveInt'),
        (["--data.val_fraction", "0.5", "--data.test_fraction", "0.5"], "leave no training"),
        (["--data.test_fraction", "1.5"], "1.5 does not conform to restriction v>0 and v<1"),
        (["--model.lr", "-1"], 'key "model.lr":\n  Not of type PositiveFloat'),
        (["--trainer.max_epochs", "0"], "--trainer.max_epochs 0: must be 1 or more"),
        (["--trainer.accumulate_grad_batches", "0"], "accumulate_grad_batches 0: must be 1"),
        (["--data.num_workers", "-2"], "Not of type NonNegativeInt"),
        (["--model.net.init_args.dropout", "1.5"], "1.5 does not conform to restriction v>=0"),
        (["--model.net.init_args.hidden_sizes", "[64, 0]"], 'key "hidden_sizes"'),
        (
            [
                *("--model.net", "{{ cookiecutter.package_name }}.networks.CNN"),
                *("--model.net.init_args.pool_size", "0"),
            ],
            'key "pool_size"',
        ),
    ],
)
@pytest.mark.slow
def test_bad_input_stops_train_in_a_few_lines_with_exit_code_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "broken.npz").write_text("not a zip")
    result = run_until_exit(tmp_path, *args)
    assert result.code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.splitlines()) <= 5, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists(), "no run folder that could pass for a result"


@pytest.mark.slow
def test_own_data_file_trains_without_code_changes(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "blobs.npz", *blobs())
    run = run_training(
        tmp_path,
        *("--data.path", str(path), "--data.batch_size", "16"),
        *("--trainer.max_epochs", "10", "--trainer.log_every_n_steps", "5"),
        *("--export.formats", "[torchscript]"),
    )
    assert run.summary["metrics"]["test/acc"] >= 0.9  # three separated blobs
    assert run.summary["export"]["torchscript"]["accuracy"] >= 0.9
    assert "rows of 5 numbers without the label" in run.stdout.splitlines()[-2]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _savez(path: Path, **arrays: Any) -> Path:
    np.savez(path, **arrays)
    return path


@pytest.mark.slow
def test_csv_with_a_header_and_text_labels_trains_and_predicts_the_names(
    tmp_path: Path, capsys
) -> None:
    import predict

    features, labels = blobs(samples=150)
    names = np.array(["setosa", "versicolor", "virginica"])[labels]
    rows = [",".join([*map(str, f), n]) for f, n in zip(features, names, strict=True)]
    path = tmp_path / "flowers.csv"
    path.write_text("f1,f2,f3,f4,f5,species\n" + "\n".join(rows) + "\n")
    run = run_training(
        tmp_path,
        "--data.path",
        str(path),
        "--trainer.max_epochs",
        "10",
        "--export.formats",
        "[torch.export]",
    )
    assert run.summary["metrics"]["test/acc"] >= 0.9
    unlabeled = tmp_path / "new.csv"
    unlabeled.write_text("\n".join(r.rsplit(",", 1)[0] for r in rows[:6]) + "\n")
    capsys.readouterr()
    predictions = predict.main([run.summary["export"]["torch.export"]["path"], str(unlabeled)])
    assert [p.classes[0] for p in predictions] == names[:6].tolist()
    assert capsys.readouterr().out.splitlines()[0].startswith(f"{unlabeled}[0]: {names[0]} (")
