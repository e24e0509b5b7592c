"""predict.py: exported models give the eager model's classes; bad inputs get clear errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import predict
from {{ cookiecutter.package_name }}.data.datamodule import DataModule
from {{ cookiecutter.package_name }}.data.images import ImageFormat
from {{ cookiecutter.package_name }}.export import formats as artifacts
from {{ cookiecutter.package_name }}.export.verify import load_model

from .conftest import Run

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def test_split(trained_run: Run, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """The test split as an .npy file, and the eager model's classes for it."""
    features = torch.from_numpy(DataModule().split_arrays("test")[0])
    path = tmp_path_factory.mktemp("inputs") / "test_split.npy"
    np.save(path, features.numpy().reshape(len(features), -1))  # flat rows of 64 pixels
    model = load_model(trained_run.summary["paths"]["best_checkpoint"])
    with torch.inference_mode():
        eager_classes = model(features).argmax(dim=-1).tolist()
    return path, eager_classes


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["torchscript", "torch.export"])
def test_predict_gives_the_eager_classes(trained_run: Run, test_split, fmt: str, capsys) -> None:
    inputs, eager_classes = test_split
    artifact = trained_run.summary["export"][fmt]["path"]
    predictions = predict.main([artifact, str(inputs), "--top", "3"])
    assert [p.indices[0] for p in predictions] == eager_classes
    assert [p.classes[0] for p in predictions] == [str(c) for c in eager_classes]  # names
    assert all(
        len(p.classes) == 3 and p.probabilities == sorted(p.probabilities, reverse=True)
        for p in predictions
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(eager_classes)
    assert lines[0].startswith(f"{inputs}[0]: {eager_classes[0]} (")


@pytest.mark.slow
def test_predict_and_the_networks_run_without_lightning(trained_run: Run, test_split) -> None:
    inputs, _ = test_split
    artifact = trained_run.summary["export"]["torchscript"]["path"]
    code = (
        "import sys, predict, {{ cookiecutter.package_name }}.networks; predict.main(sys.argv[1:]); "
        "assert not [m for m in sys.modules if m.startswith(('lightning', 'pytorch_lightning'))]"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, artifact, str(inputs)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{PROJECT_ROOT / 'src'}:{PROJECT_ROOT}", "PATH": ""},
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", "no warnings either"


def test_image_is_read_like_the_training_data(tmp_path: Path) -> None:
    sample = np.random.default_rng(0).integers(0, 17, size=(8, 8)).astype(np.float32)
    gray = np.round(255 - sample * 255 / 16).astype(np.uint8)  # dark ink = high value
    Image.fromarray(gray).resize((32, 32), Image.Resampling.NEAREST).save(tmp_path / "d.png")
    digits = predict.ModelInputs((1, 8, 8), None, ImageFormat("L", (8, 8), True, 16.0))
    [(source, features)] = predict.read_inputs(tmp_path / "d.png", digits, tmp_path / "m.pt2")
    assert source == str(tmp_path / "d.png") and features.shape == (1, 1, 8, 8)
    np.testing.assert_allclose(features.reshape(8, 8), sample, atol=16 / 255)


def test_arrays_of_any_layout_become_samples_of_the_input_shape(tmp_path: Path) -> None:
    spec = predict.ModelInputs((1, 8, 8))
    np.save(tmp_path / "images.npy", np.zeros((3, 8, 8)))
    np.save(tmp_path / "flat.npy", np.zeros((2, 64)))
    np.save(tmp_path / "one.npy", np.zeros(64))
    (tmp_path / "rows.csv").write_text("\n".join([",".join(["0"] * 64)] * 4) + "\n")
    model = tmp_path / "m.pt2"
    for name, count in (("images.npy", 3), ("flat.npy", 2), ("one.npy", 1), ("rows.csv", 4)):
        samples = predict.read_inputs(tmp_path / name, spec, model)
        assert len(samples) == count and all(a.shape == (1, 1, 8, 8) for _, a in samples)


@pytest.fixture
def features_model(tmp_path: Path) -> Path:
    """An exported model of 64 features and 3 named classes, with its metadata.json."""
    torch.manual_seed(0)
    artifact = artifacts.save(
        torch.nn.Linear(64, 3), "torch.export", torch.zeros(2, 64), tmp_path / "model.pt2"
    )
    artifacts.write_metadata(tmp_path, (64,), ["cat", "dog", "eel"], {"kind": "features"}, {})
    return artifact


@pytest.mark.parametrize(
    ("make_input", "message"),
    [
        (lambda d: d / "missing.npy", "does not exist"),
        (lambda d: _write(d / "broken.png", b"not an image"), "not trained on images"),
        (lambda d: _write(d / "broken.npy", b"not numpy"), "cannot read .* as a numpy"),
        (lambda d: _save(d / "objects.npy", np.array([{}], dtype=object)), "cannot read"),
        (lambda d: _write(d / "notes.txt", b"1 2 3"), "unknown input type"),
        (lambda d: _write(d / "text.csv", b"a,b\nx,y\n"), "rows of numbers only"),
        (lambda d: _save(d / "narrow.npy", np.zeros((2, 10))), r"shape \(64,\) .* \(2, 10\)"),
        (lambda d: _save(d / "nan.npy", np.full((3, 64), np.nan)), "sample 0 holds NaN or inf"),
        (lambda d: _write(d / "inf.csv", b",".join([b"1"] * 63 + [b"inf"])), "NaN or inf"),
    ],
)
def test_unreadable_input_is_named_with_exit_code_2(
    tmp_path: Path, features_model: Path, make_input, message: str, capsys
) -> None:
    path = make_input(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        predict.main([str(features_model), str(path)])
    assert exit_info.value.code == 2
    (error,) = capsys.readouterr().err.splitlines()
    assert error.startswith("error: ") and str(path) in error
    assert re.search(message, error), error


@pytest.mark.parametrize("fmt", ["torchscript", "torch.export"])
def test_a_model_without_metadata_refuses_the_wrong_number_of_features(
    tmp_path: Path, fmt: str, capsys
) -> None:
    """Exported by hand (no metadata.json): the model itself rejects 10 features, in one line."""
    model = artifacts.save(
        torch.nn.Linear(64, 3), fmt, torch.zeros(2, 64), tmp_path / artifacts.FORMATS[fmt].file_name
    )
    np.save(tmp_path / "rows.npy", np.zeros((2, 10), dtype=np.float32))
    with pytest.raises(SystemExit) as exit_info:
        predict.main([str(model), str(tmp_path / "rows.npy")])
    assert exit_info.value.code == 2
    (error,) = capsys.readouterr().err.splitlines()
    assert "the model rejected inputs of shape [2, 10]" in error, error


def test_feature_rows_get_the_class_names(tmp_path: Path, features_model: Path, capsys) -> None:
    (tmp_path / "rows.csv").write_text("\n".join(",".join(["1"] * 64) for _ in range(2)))
    predictions = predict.main([str(features_model), str(tmp_path / "rows.csv"), "--top", "3"])
    assert [sorted(p.classes) for p in predictions] == [["cat", "dog", "eel"]] * 2
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'rows.csv'}[0]: ")


def test_an_image_model_refuses_an_image_that_cannot_be_read(tmp_path: Path, capsys) -> None:
    artifacts.save(
        torch.nn.Flatten(), "torchscript", torch.zeros(2, 1, 8, 8), tmp_path / "model.pt"
    )
    fmt = ImageFormat("L", (8, 8))
    artifacts.write_metadata(tmp_path, (1, 8, 8), ["a"], fmt.to_dict(), {})
    (tmp_path / "broken.png").write_bytes(b"not an image")
    with pytest.raises(SystemExit):
        predict.main([str(tmp_path / "model.pt"), str(tmp_path / "broken.png")])
    assert "cannot read" in capsys.readouterr().err


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _save(path: Path, array: np.ndarray) -> Path:
    np.save(path, array)
    return path
