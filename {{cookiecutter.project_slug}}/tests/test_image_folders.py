"""--data.path FOLDER: images in class subfolders, read with Pillow, trained, exported,
predicted by name; every broken folder refused at start-up with the file and the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import predict
from {{ cookiecutter.package_name }}.data.datamodule import DataModule
from {{ cookiecutter.package_name }}.data.sources import DataError, read_image_folder

from .conftest import CONFIGS, Run, run_training, run_until_exit
from .networks import net_args

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def write_digit_folder(root: Path, per_class: int, size: int = 16) -> Path:
    """The first ``per_class`` digits of each class as size x size PNGs, dark ink on light,
    in subfolders named by words (class names that are not numbers)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    counts = dict.fromkeys(range(10), 0)
    for index, (image, label) in enumerate(zip(digits.images, digits.target, strict=True)):
        if counts[label] == per_class:
            continue
        counts[label] += 1
        folder = root / WORDS[label]
        folder.mkdir(parents=True, exist_ok=True)
        gray = np.round(255 - image * 255 / 16).astype(np.uint8)
        picture = Image.fromarray(gray).resize((size, size), Image.Resampling.NEAREST)
        picture.save(folder / f"{index:04d}.png")
    return root


@pytest.fixture(scope="session")
def digit_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_digit_folder(tmp_path_factory.mktemp("images") / "digits", per_class=40)


@pytest.fixture(scope="session")
def image_run(digit_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The CNN preset (small) trained on the folder, every export written and verified."""
    return run_training(
        tmp_path_factory.mktemp("image-run"),
        *("--config", str(CONFIGS / "cnn.yaml")),
        *net_args("cnn"),
        *("--data.path", str(digit_folder), "--data.batch_size", "16"),
        *("--trainer.max_epochs", "10"),
    )


def test_folder_reads_as_images_with_word_class_names(digit_folder: Path) -> None:
    source = read_image_folder(digit_folder)
    assert source.features.shape == (400, 1, 16, 16) and source.features.dtype == np.float32
    assert source.names == sorted(WORDS)
    assert np.bincount(source.targets).tolist() == [40] * 10
    assert source.preprocessing == {
        "kind": "image",
        "color_mode": "L",
        "size": [16, 16],
        "invert": False,
        "scale": 1.0,
    }
    assert source.features.min() >= 0.0 and source.features.max() <= 1.0
    assert source.files is not None and Path(source.files[0]).parent.name == "eight"


def test_image_size_and_color_mode_options(digit_folder: Path) -> None:
    data = DataModule(str(digit_folder), image_size=8, color_mode="RGB")
    assert data.input_shape == (3, 8, 8)
    mean, _ = data.input_stats()
    assert mean.shape == (3,), "one statistic per channel"
    assert DataModule(str(digit_folder), image_size=(12, 6)).input_shape == (1, 12, 6)


def test_rgb_images_are_read_as_rgb(tmp_path: Path) -> None:
    for name, color in (("red", (255, 0, 0)), ("blue", (0, 0, 255))):
        (tmp_path / name).mkdir()
        for index in range(3):
            Image.new("RGB", (5, 4), color).save(tmp_path / name / f"{index}.jpg")
    source = read_image_folder(tmp_path)
    assert source.input_shape == (3, 4, 5)
    assert source.features[source.targets == source.names.index("red"), 0].mean() > 0.9


def _truncated_png(path: Path) -> None:
    Image.new("L", (16, 16), 128).save(path)
    path.write_bytes(path.read_bytes()[:40])


@pytest.mark.parametrize(
    ("break_folder", "message"),
    [
        (lambda root: None, "has no class subfolders"),
        (lambda root: (root / "only").mkdir(), "single class folder"),
        (lambda root: (root / "empty").mkdir(), r"class folder .*empty holds no images"),
        (
            lambda root: (root / "a" / "bad.png").write_bytes(b"not a png"),
            r"cannot read .*bad\.png",
        ),
        (lambda root: _truncated_png(root / "a" / "cut.png"), r"cannot read .*cut\.png"),
    ],
    ids=["no-subfolders", "one-class", "class-without-images", "unreadable", "truncated"],
)
@pytest.mark.slow
def test_broken_folders_are_refused_naming_the_file(
    tmp_path: Path, break_folder, message: str
) -> None:
    root = tmp_path / "data"
    root.mkdir()
    if "subfolders" not in message and "single" not in message:
        for name in ("a", "b"):
            (root / name).mkdir()
            Image.new("L", (16, 16), 0).save(root / name / "ok.png")
    break_folder(root)
    with pytest.raises(DataError, match=message):
        read_image_folder(root)
    result = run_until_exit(
        tmp_path, "--data.path", str(root), "--config", str(CONFIGS / "cnn.yaml")
    )
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and str(root) in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_cnn_trains_on_a_folder_and_exports_every_format(image_run: Run) -> None:
    summary = image_run.summary
    assert summary["metrics"]["test/acc"] >= 0.8, summary["metrics"]
    for fmt, report in summary["export"].items():
        assert report["accuracy"] >= summary["metrics"]["test/acc"] - 0.02, fmt
    predict_line = image_run.stdout.splitlines()[-2]
    assert predict_line.startswith("predict: python predict.py ") and ".png" in predict_line


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["torch.export", "int8"])
def test_predict_names_the_classes_of_a_folder(
    image_run: Run, digit_folder: Path, fmt: str, capsys
) -> None:
    artifact = image_run.summary["export"][fmt]["path"]
    predictions = predict.main([artifact, str(digit_folder / "seven"), str(digit_folder / "two")])
    assert len(predictions) == 80
    right = sum(p.classes[0] == Path(p.source).parent.name for p in predictions)
    assert right >= 0.8 * len(predictions)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{digit_folder / 'seven'}/") and ": " in first
