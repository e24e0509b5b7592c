"""Property-based tests (Hypothesis): whatever a data file, an option value or a predict.py
input holds, the answer is a run or one line with exit code 2, never another exception.

The default profile keeps them to a few seconds; HYPOTHESIS_PROFILE=thorough runs many more
examples: `HYPOTHESIS_PROFILE=thorough pytest tests/test_properties.py`.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import predict
from {{ cookiecutter.package_name }}.data.datamodule import DataModule
from {{ cookiecutter.package_name }}.data.sources import DataError
from {{ cookiecutter.package_name }}.export import formats as artifacts
from {{ cookiecutter.package_name }}.training.cli import ProjectCLI, build_cli

from .conftest import CONFIGS

settings.register_profile(
    "default", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

CELLS = st.one_of(
    st.integers(-3, 5).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "cat", "dog", "nan", "inf", " 1 ", "1e3", '"2,5"', "x,y"]),
)


def csv_text(rows: list[list[str]], header: bool) -> str:
    lines = [",".join(row) for row in rows]
    if header and rows:
        lines.insert(0, ",".join(f"c{i}" for i in range(len(rows[0]))))
    return "\n".join(lines) + "\n"


def data_module_or_data_error(path: Path, **options) -> DataModule | None:
    """The rule for every data file: it loads and splits, or DataError says why."""
    try:
        data = DataModule(str(path), num_workers=0, **options)
    except DataError as error:
        assert str(path) in str(error), error
        assert "\n" not in str(error)
        return None
    data.setup("fit")
    assert data.num_outputs >= 2 and len(data.output_names) == data.num_outputs
    x, _ = data.train_set[0]
    assert x.shape == data.input_shape and torch.isfinite(x).all()
    return data


@given(
    rows=st.lists(st.lists(CELLS, min_size=1, max_size=4), min_size=0, max_size=40),
    header=st.booleans(),
    truncate=st.integers(0, 400),
)
def test_any_csv_loads_or_is_refused_with_a_data_error(rows, header, truncate) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "data.csv"
        path.write_text(csv_text(rows, header)[: truncate or None])
        data_module_or_data_error(path)


@given(
    features=arrays(
        st.sampled_from([np.float32, np.float64]),
        st.tuples(st.integers(0, 60), st.integers(1, 4)),
        elements=st.one_of(st.floats(-1e6, 1e6, width=32), st.sampled_from([np.nan, np.inf])),
    ),
    labels=st.one_of(
        st.lists(st.integers(-1, 4), max_size=60).map(np.array),
        st.lists(st.sampled_from(["a", "b", "c"]), max_size=60).map(np.array),
        st.lists(st.floats(allow_nan=True), max_size=60).map(np.array),
    ),
)
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_any_npz_loads_or_is_refused_with_a_data_error(features, labels) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "data.npz"
        np.savez(path, features=features, labels=labels)
        data_module_or_data_error(path)


# The range of every option whose type carries one (jsonargparse checks it while parsing).
RANGES: dict[str, Callable[[float], bool]] = {
    "data.batch_size": lambda v: v > 0,
    "data.val_fraction": lambda v: 0 < v < 1,
    "data.test_fraction": lambda v: 0 < v < 1,
    "data.num_workers": lambda v: v >= 0,
    "data.shift_prob": lambda v: 0 <= v <= 1,
    "model.lr": lambda v: v > 0,
    "model.weight_decay": lambda v: v >= 0,
    "model.warmup_fraction": lambda v: 0 <= v <= 1,
    "model.label_smoothing": lambda v: 0 <= v <= 1,
    "model.net.init_args.dropout": lambda v: 0 <= v <= 1,
    "model.net.init_args.hidden_sizes": lambda v: v > 0,  # (one layer of this width)
}
INTEGERS = ("data.batch_size", "data.num_workers", "model.net.init_args.hidden_sizes")


class ParseOnly(ProjectCLI):
    def instantiate_classes(self) -> None:
        pass


@pytest.fixture(scope="module")
def parser():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["train.py"])
        return build_cli([], CONFIGS / "default.yaml", ParseOnly).parser


@given(
    key=st.sampled_from(sorted(RANGES)),
    value=st.one_of(st.integers(-5, 5), st.floats(-2, 2, allow_nan=False)),
)
@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_option_value_parses_in_its_range_or_is_refused_in_a_few_lines(
    parser, key: str, value: float
) -> None:
    if key in INTEGERS and isinstance(value, float):
        value = int(value)
    text = f"[{value}]" if key.endswith("hidden_sizes") else str(value)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            parser.parse_args([f"--{key}", text])
        except SystemExit as exit:
            assert exit.code == 2 and not RANGES[key](value), (key, value, stderr.getvalue())
            assert stderr.getvalue().startswith("error: ") and "Traceback" not in stderr.getvalue()
            assert len(stderr.getvalue().splitlines()) <= 5
            return
    assert RANGES[key](value), f"--{key} {value} was accepted"


@pytest.fixture(scope="module")
def feature_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    path = artifacts.save(
        torch.nn.Linear(4, 3), "torch.export", torch.zeros(2, 4), folder / "m.pt2"
    )
    artifacts.write_metadata(folder, (4,), ["a", "b", "c"], {"kind": "features"}, {})
    return path


@given(
    content=st.one_of(
        st.binary(max_size=300),
        arrays(np.float64, st.tuples(st.integers(0, 5), st.integers(0, 6))).map(
            lambda a: a.tobytes()
        ),
    ),
    suffix=st.sampled_from([".npy", ".csv", ".png", ".jpg", ".txt"]),
)
@settings(
    max_examples=15,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@pytest.mark.slow
def test_any_predict_input_is_predicted_or_refused_with_exit_code_2(
    feature_model: Path, content: bytes, suffix: str, capsys
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"input{suffix}"
        path.write_bytes(content)
        try:
            predictions = predict.main([str(feature_model), str(path)])
        except SystemExit as exit_info:
            assert exit_info.code == 2
            error = capsys.readouterr().err
            assert error.startswith("error: ") and len(error.strip().splitlines()) == 1
            return
        assert all(p.classes[0] in ("a", "b", "c") for p in predictions)


@given(array=arrays(np.float64, st.tuples(st.integers(1, 4), st.just(4))))
@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_npy_of_the_right_width_is_predicted_unless_not_finite(
    feature_model: Path, array: np.ndarray, capsys
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.npy"
        np.save(path, array)
        with np.errstate(over="ignore"):  # read as float32: 1e39 is inf there
            finite = np.isfinite(array.astype(np.float32)).all()
        if finite:
            assert len(predict.main([str(feature_model), str(path)])) == len(array)
        else:
            with pytest.raises(SystemExit):
                predict.main([str(feature_model), str(path)])
            assert "NaN or inf" in capsys.readouterr().err
