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
from {{ cookiecutter.package_name }} import artifacts
from {{ cookiecutter.package_name }}.data import DigitsDataModule
from {{ cookiecutter.package_name }}.export import load_model

from .conftest import Run

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def test_split(trained_run: Run, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """The test split as an .npy file, and the eager model's classes for it."""
    datamodule = DigitsDataModule()
    datamodule.setup("test")
    features, _ = datamodule.test_set.tensors
    path = tmp_path_factory.mktemp("inputs") / "test_split.npy"
    np.save(path, features.numpy())
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
    assert [p.classes[0] for p in predictions] == eager_classes
    assert all(
        len(p.classes) == 3 and p.probabilities == sorted(p.probabilities, reverse=True)
        for p in predictions
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(eager_classes)
    assert lines[0].startswith(f"{inputs}[0]: {eager_classes[0]} (")


@pytest.mark.slow
def test_predict_runs_without_lightning(trained_run: Run, test_split) -> None:
    inputs, _ = test_split
    artifact = trained_run.summary["export"]["torchscript"]["path"]
    code = (
        "import sys, predict; predict.main(sys.argv[1:]); "
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
    features = predict.read_inputs(tmp_path / "d.png")
    assert features.shape == (1, 64)
    np.testing.assert_allclose(features.reshape(8, 8), sample, atol=16 / 255)


def test_npy_shapes_are_flattened_per_sample(tmp_path: Path) -> None:
    np.save(tmp_path / "images.npy", np.zeros((3, 8, 8)))
    np.save(tmp_path / "one.npy", np.zeros(64))
    assert predict.read_inputs(tmp_path / "images.npy").shape == (3, 64)
    assert predict.read_inputs(tmp_path / "one.npy").shape == (1, 64)


@pytest.mark.parametrize(
    ("make_input", "message"),
    [
        (lambda d: d / "missing.npy", "does not exist"),
        (lambda d: _write(d / "broken.png", b"not an image"), "cannot read .* as an image"),
        (lambda d: _write(d / "broken.npy", b"not numpy"), "cannot read .* as a numpy"),
        (lambda d: _save(d / "objects.npy", np.array([{}], dtype=object)), "cannot read"),
        (lambda d: _write(d / "notes.txt", b"1 2 3"), "unknown input type"),
    ],
)
def test_unreadable_input_is_named_with_exit_code_2(
    tmp_path: Path, make_input, message: str, capsys
) -> None:
    model = torch.nn.Linear(64, 10)
    artifact = artifacts.save(model, "torch.export", torch.zeros(2, 64), tmp_path / "m.pt2")
    path = make_input(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        predict.main([str(artifact), str(path)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and str(path) in error
    assert re.search(message, error), error


def test_inputs_of_the_wrong_width_are_refused(tmp_path: Path, capsys) -> None:
    artifact = artifacts.save(
        torch.nn.Linear(64, 10), "torchscript", torch.zeros(2, 64), tmp_path / "m.pt"
    )
    np.save(tmp_path / "narrow.npy", np.zeros((2, 10), dtype=np.float32))
    with pytest.raises(SystemExit):
        predict.main([str(artifact), str(tmp_path / "narrow.npy")])
    assert "rejected inputs of shape [2, 10]" in capsys.readouterr().err


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _save(path: Path, array: np.ndarray) -> Path:
    np.save(path, array)
    return path
