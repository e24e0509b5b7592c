"""Run what the template generates, for real: its own test suite, an install, a default run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from cookiecutter.main import cookiecutter
from PIL import Image
from sklearn.datasets import load_digits

from .conftest import DEFAULT_PACKAGE, PYTHON, TEMPLATE_DIR, run

pytestmark = pytest.mark.slow


def test_template_code_is_ruff_clean() -> None:
    paths = ["hooks", "tests", "benchmarks"]
    for args in (["check", *paths], ["format", "--check", *paths]):
        result = run([PYTHON, "-m", "ruff", *args], cwd=TEMPLATE_DIR)
        assert result.returncode == 0, result.stdout + result.stderr


SUITE = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=5"]
# Each bake's suite: the lean bake (every extra off, CSV logger) runs every test it has; the
# others run what their answers add: each logger's own tests (marked `logger`) and serving.
# (The tuning extra's tests run in a project that added it later: test_updates.py.)
SUITES = {
    "every-extra-off": ({"logger": "csv", "tuning": "no", "serving": "no"}, []),
    "tensorboard-serving": ({"logger": "tensorboard"}, ["-m", "logger or serving"]),
    "wandb": ({"logger": "wandb"}, ["-m", "logger"]),
    "mlflow": ({"logger": "mlflow"}, ["-m", "logger"]),
}


@pytest.fixture(scope="module")
def generated_suites(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, subprocess.CompletedProcess]:
    """Every suite above, all started at once, one thread per process: each is mostly one
    process at a time, which overlap on two cores."""
    started = {}
    for name, (answers, selection) in SUITES.items():
        out = tmp_path_factory.mktemp(name)
        project = cookiecutter(
            str(TEMPLATE_DIR),
            no_input=True,
            extra_context=answers,
            output_dir=str(out),
            default_config=True,  # not this user's ~/.cookiecutterrc
        )
        command = [*SUITE, *selection, "-rs"]
        process = subprocess.Popen(
            command,
            cwd=project,
            env={**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        started[name] = command, process
    results = {}
    try:
        for name, (command, process) in started.items():
            stdout, stderr = process.communicate(timeout=1800)  # a bound on a hang, not speed
            results[name] = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    finally:
        for _, process in started.values():
            process.kill()  # (a no-op for those that ended)
    return results


@pytest.mark.parametrize("name", list(SUITES))
def test_generated_test_suite_passes(
    generated_suites: dict[str, subprocess.CompletedProcess], name: str
) -> None:
    result = generated_suites[name]
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert re.search(r"\d+ passed", result.stdout)
    assert "failed" not in result.stdout.splitlines()[-1]


CHAINED_COPIES = ("images", "sweep")


def test_install_and_default_run_as_a_user_would(
    bake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README steps: pip install -e ".[dev]", python train.py, predict.py: offline, stdin closed.

    After the install, three chains of the README's runs go at once, each in its own copy of
    the project (runs in one folder would race for the logger's next version folder), all on
    the one editable install: the default run then your own network; the CNN on an image
    folder; a sweep. One thread each, as several runs on one machine should be."""
    project = bake()
    install = run([PYTHON, "-m", "pip", "install", "--quiet", "-e", ".[dev]"], cwd=project)
    assert install.returncode == 0, install.stdout + install.stderr
    try:
        np.save(project / "digits.npy", load_digits().data[:3])  # raw pixels of digits 0, 1, 2
        copies = {name: shutil.copytree(project, tmp_path / name) for name in CHAINED_COPIES}
        monkeypatch.setenv("OMP_NUM_THREADS", "1")  # OpenMP's waiting threads starve the others
        with ThreadPoolExecutor(max_workers=3) as pool:
            chains = [
                pool.submit(default_run_then_own_network, project),
                pool.submit(own_image_folder_with_the_cnn, copies["images"]),
                pool.submit(sweep_as_the_readme_says, copies["sweep"]),
            ]
            for chain in chains:
                chain.result()  # its assertion error, if any
    finally:
        run(
            [PYTHON, "-m", "pip", "uninstall", "--quiet", "--yes", "digits-classifier"], cwd=project
        )
        shutil.rmtree(project / "runs", ignore_errors=True)
    assert DEFAULT_PACKAGE in (project / "pyproject.toml").read_text()


def default_run_then_own_network(project: Path) -> None:
    """`python train.py` as the README's first run (summary, plots, exports, no warning,
    predict.py on its export), then your own network beside train.py."""
    train = run([PYTHON, "train.py"], cwd=project)  # no PYTHONPATH: the install must work
    assert train.returncode == 0, train.stdout[-5000:] + train.stderr[-5000:]
    last_line = train.stdout.rstrip().splitlines()[-1]
    assert last_line.startswith("summary: ")
    summary_path = Path(last_line.removeprefix("summary: "))
    summary = json.loads(summary_path.read_text())
    assert summary_path.is_relative_to(project / "runs")
    assert summary["metrics"]["test/acc"] >= 0.97, summary["metrics"]
    assert summary["epochs"] == 60
    assert Path(summary["paths"]["best_checkpoint"]).is_file()
    assert (summary_path.parent / "config.yaml").is_file(), "the run's exact config is kept"
    warnings = [line for line in (train.stdout + train.stderr).splitlines() if "Warning" in line]
    assert warnings == [], warnings
    # What a person reads at the end: plots, how to view logs, how to predict; no bar.
    for start in ("plots: ", "logs: tensorboard --logdir ", "predict: python predict.py "):
        assert any(line.startswith(start) for line in train.stdout.splitlines()), start
    assert "Epoch 59" not in train.stdout + train.stderr, "no progress bar off a terminal"
    assert all(Path(path).is_file() for path in summary["paths"]["plots"].values())
    exports = summary["export"]  # the default formats (onnx: one flag away)
    assert list(exports) == ["eager", "torchscript", "int8", "torch.export"]
    assert exports["int8"]["accuracy"] >= exports["eager"]["accuracy"] - 0.01
    assert Path(summary["paths"]["export_report"]).is_file()
    predict = run(
        [PYTHON, "predict.py", exports["torch.export"]["path"], "digits.npy"], cwd=project
    )
    assert predict.returncode == 0, predict.stderr
    assert [line.split(": ")[1][0] for line in predict.stdout.splitlines()] == ["0", "1", "2"]
    own_network_in_the_project_root(project)


def train(project: Path, *args: str) -> tuple[dict, str]:
    """`python train.py ARGS` in the installed project: its summary and its stdout."""
    result = run([PYTHON, "train.py", *args], cwd=project)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "Traceback" not in result.stderr and "Warning" not in result.stdout + result.stderr
    summary_line = result.stdout.rstrip().splitlines()[-1]
    return json.loads(Path(summary_line.removeprefix("summary: ")).read_text()), result.stdout


def write_digit_images(folder: Path, per_class: int, size: int) -> list[tuple[Path, str]]:
    """Digits as PNG files (dark ink on light, upscaled), in subfolders named by words."""
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    digits = load_digits()
    written: list[tuple[Path, str]] = []
    for index, (image, label) in enumerate(zip(digits.images, digits.target, strict=True)):
        if sum(word == words[label] for _, word in written) == per_class:
            continue
        path = folder / words[label] / f"{index:04d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        gray = np.round(255 - image * 255 / 16).astype(np.uint8)
        Image.fromarray(gray).resize((size, size), Image.Resampling.NEAREST).save(path)
        written.append((path, words[label]))
    return written


def sweep_as_the_readme_says(project: Path) -> None:
    """`python sweep.py` installed (its own imports, no PYTHONPATH), quiet, with best.yaml."""
    result = run([PYTHON, "sweep.py", "--trials", "2", "--trainer.max_epochs", "2"], cwd=project)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "Warning" not in output, output
    assert len([line for line in result.stdout.splitlines() if line.startswith("trial ")]) == 2
    assert (
        result.stdout.rstrip().splitlines()[-1]
        == f"sweep: {(project / 'runs/sweeps/sweep').resolve()}"
    )
    assert (project / "runs" / "sweeps" / "sweep" / "best.yaml").is_file()


MY_NET = """\
import math

from torch import nn


class TinyNet(nn.Module):
    def __init__(self, input_shape: tuple[int, ...], num_classes: int, width: int = 32) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Flatten(), nn.Linear(math.prod(input_shape), width), nn.Tanh(),
            nn.Linear(width, num_classes),
        )

    def forward(self, x):
        return self.layers(x)
"""


def own_network_in_the_project_root(project: Path) -> None:
    """mynet.py beside train.py, chosen by one flag: no edit under src/."""
    (project / "mynet.py").write_text(MY_NET)
    before = {p: p.read_bytes() for p in (project / "src").rglob("*.py")}
    summary, _ = train(
        project,
        "--model.net",
        "mynet.TinyNet",
        "--model.net.init_args.width",
        "64",
        "--trainer.max_epochs",
        "15",
    )
    assert summary["metrics"]["test/acc"] >= 0.9, summary["metrics"]
    assert {"torchscript", "int8", "torch.export"} <= summary["export"].keys()
    export = run(
        [
            PYTHON,
            "-m",
            f"{DEFAULT_PACKAGE}.export.verify",
            "--ckpt",
            summary["paths"]["best_checkpoint"],
            "--out",
            str(project / "again"),
        ],
        cwd=project,
    )
    assert export.returncode == 0, export.stderr  # the checkpoint rebuilds TinyNet by itself
    artifact = summary["export"]["torch.export"]["path"]
    predict = run([PYTHON, "predict.py", artifact, str(project / "digits.npy")], cwd=project)
    assert predict.returncode == 0, predict.stderr
    assert len(predict.stdout.splitlines()) == 3  # digits.npy: three samples
    assert before == {p: p.read_bytes() for p in (project / "src").rglob("*.py")}


def own_image_folder_with_the_cnn(project: Path) -> None:
    """A folder of PNGs in class subfolders named by words: trained, exported, predicted."""
    written = write_digit_images(project / "images", 40, 16)
    summary, stdout = train(
        project,
        "--data.path",
        "images",
        "--config",
        "configs/cnn.yaml",
        "--data.batch_size",
        "16",
        "--trainer.max_epochs",
        "12",
    )
    assert summary["metrics"]["test/acc"] >= 0.85, summary["metrics"]
    predict_line = stdout.splitlines()[-2]
    assert predict_line.startswith("predict: python predict.py "), predict_line
    command = predict_line.removeprefix("predict: ").split("  (")[0].split()
    assert run([PYTHON, *command[1:]], cwd=project).returncode == 0, "the printed command works"
    artifact = summary["export"]["torch.export"]["path"]
    sample = written[::8]
    predict = run([PYTHON, "predict.py", artifact, *(str(p) for p, _ in sample)], cwd=project)
    assert predict.returncode == 0, predict.stderr
    named = [line.split(": ")[1].split(" (")[0] for line in predict.stdout.splitlines()]
    right = sum(name == word for name, (_, word) in zip(named, sample, strict=True))
    assert right >= 0.8 * len(sample), predict.stdout


SMOKES = {
    "callback_overhead": r"\| all together \| \d+\.\d+% \(target",
    "export_formats": r"\| 64-256-256-10 \| int8 \| \d+ \|",
    "loop_overhead": r"\| default \| project \| [\d.]+ \|",
    "runs": r"\| 2 processes \(configs/ddp-cpu.yaml\) \| 64 \| \d+ \|",
    "ddp_plain": r"\| 64 \| 2 processes \(gloo\), DDP defaults \| \d+ \|",
    "sweep_cost": r"\| trial / its training \(target <= 1.10\) \| [\d.]+ \|",
    "sweep_splits": r"\| chosen \(select: simplest\) \| [01] of 1 \| [+-]\d+\.\d+ \|",
    # every server answered every request of its load, and answered it right
    "serve_load": r"At 32 clients: FastAPI \(uvicorn, 1 worker\) \d+ req/s, .*; failures: 0\.",
}


@pytest.fixture(scope="module")
def benchmark_smokes() -> dict[str, subprocess.CompletedProcess]:
    """Every benchmark's --smoke run (never a timed assertion: it bakes, runs, reports), all
    started at once: each is mostly processes starting one after another, which overlap.
    (DDP ports are free ones, picked by each run.)"""
    started = {}
    for script in SMOKES:
        command = [PYTHON, f"benchmarks/{script}.py", "--smoke"]
        started[script] = (
            command,
            subprocess.Popen(
                command,
                cwd=TEMPLATE_DIR,
                env={**os.environ, "WANDB_MODE": "offline"},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
            ),
        )
    results = {}
    for script, (command, process) in started.items():
        stdout, stderr = process.communicate(timeout=900)  # a bound on a hang, not a speed check
        results[script] = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    return results


@pytest.mark.parametrize("script", list(SMOKES))
def test_benchmark_still_runs(
    benchmark_smokes: dict[str, subprocess.CompletedProcess], script: str
) -> None:
    result = benchmark_smokes[script]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(SMOKES[script], result.stdout), result.stdout
    if script == "callback_overhead":
        assert "| without ResumableCheckpoint (last) |" in result.stdout, result.stdout
