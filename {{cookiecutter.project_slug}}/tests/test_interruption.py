"""Ctrl-C and SIGTERM stop a real run at a step boundary with last.ckpt written, its exit
code, one line that resumes it, and a summary.json that says so; the resume ends with the
weights of a run that was never interrupted. A second Ctrl-C stops at once."""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.training.checkpoints import read_checkpoint
from {{ cookiecutter.package_name }}.training.interruption import resume_command

from .conftest import (
    DDP_STOP_AFTER_STEP,
    DDPRuns,
    assert_same_weights,
    one_thread,
    run_training,
    run_until_exit,
)
from .subprocesses import preset, run_train

SIGNALS = {"ctrl-c": signal.SIGINT, "sigterm": signal.SIGTERM}
# A stopped run: its folder, exit code, stdout and stderr.
Stopped = tuple[Path, int | str | None, str, str]
EXIT_CODES = {"ctrl-c": 130, "sigterm": 143}
REASONS = {"ctrl-c": "stopped by Ctrl-C", "sigterm": "stopped by SIGTERM"}
STOPPED = ("--trainer.callbacks+=tests.probes.StepAtStop", "--trainer.callbacks.out_dir")


def resume_line(stderr: str) -> list[str]:
    """The printed resume command, split as a shell would."""
    (line,) = [line for line in stderr.splitlines() if line.startswith("resume: ")]
    return shlex.split(line.removeprefix("resume: "))


@contextlib.contextmanager
def restored_signal_handlers() -> Iterator[None]:
    """Runs in this process may leave SIGINT ignored (Lightning, after a KeyboardInterrupt)."""
    handlers = {signum: signal.getsignal(signum) for signum in SIGNALS.values()}
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


@pytest.fixture
def restore_signal_handlers() -> Iterator[None]:
    with restored_signal_handlers():
        yield


@pytest.fixture(scope="module")
def interrupted(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Stopped]:
    """Each run stopped by its real signal, sent to this process after step 3
    (tests.probes.SendSignal): the handler of a terminal's Ctrl-C and of a scheduler's
    SIGTERM, with no start-up to pay. (A DDP job stopped by SIGTERM to one of its processes:
    the DDP resume test below.) name -> (folder, exit code, stdout, stderr)."""
    common = ("--trainer.max_epochs", "1000", "--export.formats", "[]", *STOPPED, "probe")
    results = {}
    for name in ("ctrl-c", "sigterm"):
        here = tmp_path_factory.mktemp(name)
        probe = ["--trainer.callbacks+=tests.probes.SendSignal", "--trainer.callbacks.signal"]
        probe += [SIGNALS[name].name, "--trainer.callbacks.step", "3"]
        with restored_signal_handlers():
            stopped = run_until_exit(
                here, "--trainer.enable_progress_bar", "false", *common, *probe
            )
        results[name] = here, stopped.code, stopped.stdout, stopped.stderr
    return results


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ctrl-c", "sigterm"])
def test_an_interrupted_run_saves_last_ckpt_and_prints_how_to_resume(
    interrupted: dict[str, Stopped], name: str
) -> None:
    folder, returncode, stdout, stderr = interrupted[name]
    assert returncode == EXIT_CODES[name], stderr[-3000:]
    assert_stopped_with_resume(folder, stdout, stderr, name, ranks=1)


def assert_stopped_with_resume(
    folder: Path, stdout: str, stderr: str, kind: str, ranks: int
) -> None:
    """No traceback; last.ckpt saved at the step where every process stopped, and named by
    the printed resume command and by summary.json, which says why the run stopped."""
    assert "Traceback" not in stderr
    command = resume_line(stderr)
    assert command[:2] == ["python", "train.py"]
    assert command[-2] == "--ckpt_path"
    checkpoint = read_checkpoint(folder / command[-1])
    assert Path(command[-1]).name == "last.ckpt"

    summary = json.loads(
        Path(stdout.strip().splitlines()[-1].removeprefix("summary: ")).read_text()
    )
    assert (summary["status"], summary["reason"]) == ("interrupted", REASONS[kind])
    assert summary["resume"] == shlex.join(command)
    assert summary["paths"]["last_checkpoint"] == str((folder / command[-1]).resolve())
    # Saved at the step where every process stopped (the signal may reach one process
    # alone): nothing trained after the checkpoint.
    stops = [
        json.loads((folder / "probe" / f"stop-rank-{rank}.json").read_text())
        for rank in range(ranks)
        if rank == 0 or _wait_for(folder / "probe" / f"stop-rank-{rank}.json")
    ]
    assert len(stops) == ranks
    assert {stop["global_step"] for stop in stops} == {checkpoint["global_step"]}
    assert {stop["exception"] for stop in stops} == {"TrainingInterrupted"}
    assert summary["global_step"] == checkpoint["global_step"] >= 1


def _wait_for(path: Path, timeout_s: float = 60) -> bool:
    """Another DDP process's file: it may still be exiting when the launcher has."""
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.exists()


STOP_AFTER_STEP = 25  # epochs of 20 steps: the signal comes 5 steps into the second


@pytest.mark.slow
@pytest.mark.filterwarnings("error:.*ended before the epoch ended")  # "not resumable"
def test_a_run_stopped_mid_epoch_resumes_with_its_command_to_the_uninterrupted_weights(
    tmp_path: Path, restore_torch_flags: None, restore_signal_handlers: None
) -> None:
    """In this process (one thread, as the reference): a real SIGTERM at a known step, the
    resume by the printed command, and a run that was never stopped."""
    args = ["--config", preset("reproducible"), "--trainer.max_epochs", "2"]
    args += ["--export.formats", "[]"]
    probe = ["--trainer.callbacks+=tests.probes.SendSignal", "--trainer.callbacks.signal"]
    probe += ["SIGTERM", "--trainer.callbacks.step", str(STOP_AFTER_STEP)]
    (tmp_path / "stopped").mkdir()
    (tmp_path / "uninterrupted").mkdir()
    with one_thread():
        stopped = run_until_exit(tmp_path / "stopped", *args, *probe)
        assert stopped.code == 143, stopped.stderr
        command = resume_line(stopped.stderr)
        saved = read_checkpoint(tmp_path / "stopped" / command[-1])
        resumed = run_training(tmp_path / "stopped", *command[2:])
        reference = run_training(tmp_path / "uninterrupted", *args)

    # The step after the signal's, in the middle of the second epoch.
    assert (saved["epoch"], saved["global_step"]) == (1, STOP_AFTER_STEP + 1)
    assert command[2:-2] == [*args, *probe]
    assert resumed.summary["status"] == "completed"
    assert resumed.summary["global_step"] == reference.summary["global_step"]
    assert_same_weights(
        resumed.summary["paths"]["last_checkpoint"], reference.summary["paths"]["last_checkpoint"]
    )


@pytest.mark.slow
def test_a_ddp_run_stopped_on_one_process_resumes_to_the_uninterrupted_weights(
    ddp_runs: DDPRuns,
) -> None:
    """ddp-cpu, 2 processes: a real SIGTERM to rank 0 alone at a known step (both stop at the
    next), the resume by the printed command, and the same run never stopped."""
    folder, stopped = ddp_runs.stopped.folder, ddp_runs.stopped.result
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    # SIGTERM reached the launching process alone (as `kill` does): both stopped there.
    assert_stopped_with_resume(folder, stopped.stdout, stopped.stderr, "sigterm", ranks=2)
    command = resume_line(stopped.stderr)
    saved = read_checkpoint(folder / command[-1])
    assert (saved["epoch"], saved["global_step"]) == (1, DDP_STOP_AFTER_STEP + 1)

    resumed = run_train(folder, *command[2:])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    complete = ddp_runs.complete
    assert complete.result.returncode == 0, complete.result.stderr[-3000:]
    (reference,) = complete.folder.glob("runs/**/checkpoints/last.ckpt")
    assert_same_weights(folder / command[-1], reference)


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_without_saving(
    tmp_path: Path, restore_signal_handlers: None
) -> None:
    probe = ["--trainer.callbacks+=tests.probes.SendSignal", "--trainer.callbacks.signal"]
    probe += ["SIGINT", "--trainer.callbacks.step", "3", "--trainer.callbacks.times", "2"]
    stopped = run_until_exit(tmp_path, "--trainer.max_epochs", "5", *probe)
    assert stopped.code == 130
    assert "interrupted: stopped by Ctrl-C" in stopped.stderr
    assert "resume: " not in stopped.stderr
    assert "Traceback" not in stopped.stderr
    (summary_path,) = tmp_path.glob("runs/**/summary.json")
    summary = json.loads(summary_path.read_text())
    assert (summary["status"], summary["global_step"]) == ("interrupted", 3)
    assert not list(tmp_path.glob("runs/**/last.ckpt")), "the second Ctrl-C saves nothing"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "python train.py --ckpt_path runs/x/last.ckpt"),
        (
            ["--config", "my run.yaml", "--ckpt_path", "last", "--trainer.max_epochs", "9"],
            "python train.py --config 'my run.yaml' --trainer.max_epochs 9 "
            "--ckpt_path runs/x/last.ckpt",
        ),
        (["--ckpt_path=old.ckpt"], "python train.py --ckpt_path runs/x/last.ckpt"),
    ],
    ids=["no-args", "replaces-ckpt-path", "replaces-ckpt-path-equals"],
)
def test_resume_command_keeps_the_arguments_and_replaces_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resume_command(args, tmp_path / "runs" / "x" / "last.ckpt") == expected
