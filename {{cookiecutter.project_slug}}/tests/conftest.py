"""Shared fixtures: one short real training run, reused by every test that needs its outputs."""

from __future__ import annotations

import contextlib
import csv
import gc
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

# Never reach for the network from tests: wandb (if chosen) logs to local files.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


def fake_trainer(**facts: Any) -> Any:
    """A stand-in for a Trainer in unit tests: only the attributes the code under test reads
    (typed Any, as it is no Trainer)."""
    return SimpleNamespace(**facts)


@dataclass
class Run:
    summary_path: Path
    summary: dict
    stdout: str


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def run_training(directory: Path, *args: str) -> Run:
    """Run train.main in ``directory`` (so runs/ lands there) and capture what it prints."""
    from train import main

    stdout = io.StringIO()
    with (
        working_directory(directory),
        contextlib.redirect_stdout(stdout),
        # LightningCLI also looks at sys.argv; show it the command a user would type.
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(sys, "argv", ["train.py"])
        summary_path = main(["--trainer.enable_progress_bar", "false", *args])
    assert summary_path is not None
    return Run(summary_path, json.loads(summary_path.read_text()), stdout.getvalue())


def build(directory: Path, *args: str):
    """Parse ``args`` like `python train.py ARGS` and build model, data and Trainer (no fit)."""
    from {{ cookiecutter.package_name }}.training.cli import build_cli

    default_config = CONFIGS / "default.yaml"
    with working_directory(directory), pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["train.py"])
        return build_cli(["--trainer.enable_progress_bar", "false", *args], default_config)


@dataclass
class Exit:
    code: int | str | None
    stdout: str
    stderr: str


def run_until_exit(directory: Path, *args: str) -> Exit:
    """Run train.main where it must stop with SystemExit (--print_config, bad input)."""
    from train import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        working_directory(directory),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        pytest.MonkeyPatch.context() as patch,
        pytest.raises(SystemExit) as exit_info,
    ):
        patch.setattr(sys, "argv", ["train.py"])
        main(list(args))
    return Exit(exit_info.value.code, stdout.getvalue(), stderr.getvalue())


def assert_same_weights(checkpoint: str | Path, reference: str | Path) -> None:
    """The two checkpoints hold the same tensors, bit for bit (each named if not)."""
    import torch

    from {{ cookiecutter.package_name }}.training.checkpoints import read_checkpoint

    state = read_checkpoint(checkpoint)["state_dict"]
    reference_state = read_checkpoint(reference)["state_dict"]
    assert state.keys() == reference_state.keys()
    for key, value in reference_state.items():
        assert torch.equal(state[key], value), key


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One CPU thread, as in a process started with OMP_NUM_THREADS=1, for runs whose
    weights are compared bit for bit: a float sum split over another number of threads may
    round differently."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # train.main sets the thread count from OMP_NUM_THREADS (else from the cores).
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("OMP_NUM_THREADS", "1")
            yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session", autouse=True)
def quick_latency_figures() -> Iterator[None]:
    """Exports are verified in full; their latency figures take a few calls here: the tests
    check that they exist, not their value."""
    from {{ cookiecutter.package_name }}.export import verify

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verify, "LATENCY_MIN_SECONDS", 0.001)
        yield


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A short but real training with the default config (25 epochs, a few seconds)."""
    return run_training(tmp_path_factory.mktemp("trained"), "--trainer.max_epochs", "25")


@pytest.fixture
def restore_torch_flags(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A deterministic Trainer switches torch to deterministic algorithms process-wide."""
    import torch

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(deterministic)


# The ddp-cpu run that several tests read: 2 processes under Lightning's launcher, the
# reproducible preset (the DDP resume test compares weights with it), one export format
# (rank zero alone exports: one proves it; every format is tested elsewhere).
DDP_RUN_ARGS = (
    *("--config", str(CONFIGS / "ddp-cpu.yaml"), "--config", str(CONFIGS / "reproducible.yaml")),
    *("--trainer.max_epochs", "2", "--export.formats", "[torchscript]"),
)
# Each rank writes its facts to probe/rank-N.json (tests/probes.py).
RANK_PROBE = ("--trainer.callbacks+=tests.probes.RankProbe", "--trainer.callbacks.out_dir", "probe")


@dataclass
class DDPRun:
    folder: Path
    result: subprocess.CompletedProcess


@dataclass
class DDPRuns:
    complete: DDPRun  # run to the end, each rank's facts in probe/ (tests.probes.RankProbe)
    stopped: DDPRun  # SIGTERM to rank 0 alone after DDP_STOP_AFTER_STEP (DDP resume test)


DDP_STOP_AFTER_STEP = 15  # 2 processes: epochs of 10 steps each


@pytest.fixture(scope="session")
def ddp_runs(tmp_path_factory: pytest.TempPathFactory) -> DDPRuns:
    """`python train.py` on the ddp-cpu preset for real (processes, Lightning's launcher):
    one run to the end and one stopped by SIGTERM, started together. A DDP job spends much
    of its time starting its processes one after the other; two jobs overlap that (a third,
    torchrun's, no longer gained: the two cores are busy)."""
    from .subprocesses import start_train

    stop = ["--trainer.callbacks+=tests.probes.SendSignal", "--trainer.callbacks.signal"]
    stop += ["SIGTERM", "--trainer.callbacks.step", str(DDP_STOP_AFTER_STEP)]
    stop += ["--trainer.callbacks.rank", "0"]
    stop += ["--trainer.callbacks+=tests.probes.StepAtStop", "--trainer.callbacks.out_dir", "probe"]
    started = {}
    for name, extra in (("complete", RANK_PROBE), ("stopped", tuple(stop))):
        folder = tmp_path_factory.mktemp(f"ddp-{name}")
        process = start_train(folder, *DDP_RUN_ARGS, *extra)
        started[name] = folder, process.args, process
    runs = {}
    for name, (folder, command, process) in started.items():
        stdout, stderr = process.communicate(timeout=300)
        result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
        runs[name] = DDPRun(folder, result)
    return DDPRuns(**runs)


def assert_one_logger_run(run_dir: Path, stdout: str, epochs: int, steps_per_epoch: int) -> None:
    """The run in ``run_dir`` (resumed, perhaps more than once) is one logger run whose epoch
    metrics go on without a gap or a repeat, as the logger's own reader shows them; for W&B
    (offline), every process's folder carries the run's id."""
    assert [p.name for p in run_dir.parent.iterdir()] == [run_dir.name], "a second version"
    expected = [steps_per_epoch * epoch + steps_per_epoch - 1 for epoch in range(epochs)]
    client = mlflow_store_client(stdout)
    if client is not None:
        run = client.get_run(run_dir.name)  # Lightning's layout: <experiment id>/<run id>/
        assert run.info.status == "FINISHED"
        (only,) = client.search_runs([run.info.experiment_id])
        assert only.info.run_id == run_dir.name, "a second run"
    for name in ("val/acc", "train/loss"):
        values = logged_values(run_dir, stdout, name)
        if values is None:
            break
        assert sorted(values) == expected, name
    else:
        return
    (line,) = [line for line in stdout.splitlines() if line.startswith("logs: wandb sync ")]
    pattern = Path(line.removeprefix("logs: wandb sync "))
    assert pattern.name.endswith(f"-{run_dir.name}")  # the run id: the version folder's name
    assert len(list(pattern.parent.glob(pattern.name))) >= 2  # the first process and the resume


MLFLOW_UI = "logs: mlflow ui --backend-store-uri "


def mlflow_store_client(stdout: str) -> Any:
    """MLflow's own client on the store that a run's `logs:` line names; None if it names
    none (another logger: mlflow is installed only where the project chose it)."""
    lines = [line for line in stdout.splitlines() if line.startswith(MLFLOW_UI)]
    if not lines:
        return None
    from mlflow.tracking import MlflowClient

    return MlflowClient(lines[-1].removeprefix(MLFLOW_UI))


def logged_values(run_dir: Path, stdout: str, name: str) -> dict[int, float] | None:
    """Step -> value of metric ``name`` in the logger run of ``run_dir`` (a step logged twice
    raises, but in MLflow), as the logger's own reader shows it: TensorBoard's, metrics.csv,
    MLflow's client. None for W&B, whose offline files only its servers read."""
    client = mlflow_store_client(stdout)
    if client is not None:
        # A resumed MLflow run logs the steps from its checkpoint on again (no MLflow API
        # deletes values, and MLflow keeps a metric's whole history): the later one counts.
        history = client.get_metric_history(run_dir.name, name)
        return {m.step: m.value for m in sorted(history, key=lambda m: m.timestamp)}
    elif any(run_dir.glob("events.out.tfevents.*")):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(run_dir))
        events.Reload()
        pairs = [(event.step, event.value) for event in events.Scalars(name)]
    elif (run_dir / "metrics.csv").exists():
        with (run_dir / "metrics.csv").open(newline="") as file:
            rows = csv.DictReader(file)
            pairs = [(int(row["step"]), float(row[name])) for row in rows if row.get(name)]
    else:
        return None
    values = dict(pairs)
    assert len(values) == len(pairs), f"{name}: a step logged twice"
    return values


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the tests imported (torch, Lightning: millions of objects) lives as long as this
    process: out of the garbage collector's sight, as the scripts do (gc.freeze in every script),
    so that its collections, pytest's own five at the end included, scan only what the tests
    make. `pytest -m "not slow"` ends 2.5 s sooner."""
    gc.freeze()
