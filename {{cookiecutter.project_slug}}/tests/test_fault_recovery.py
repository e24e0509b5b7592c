"""A run killed with SIGKILL mid-training resumes from its last.ckpt and ends with exactly
the weights of a run that was never interrupted; a checkpoint cut short is refused clearly."""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.training.checkpoints import CheckpointError, read_checkpoint

from .conftest import (
    assert_one_logger_run,
    assert_same_weights,
    one_thread,
    run_training,
    run_until_exit,
)
from .subprocesses import preset, script_env, start_train

EPOCHS = 10
KILL_AFTER_EPOCH = 2  # 0-based: killed once last.ckpt holds at least 3 finished epochs


def run_args(folder: Path, *args: str) -> list[str]:
    """The reproducible preset (last.ckpt every epoch, as by default), no export (not what is
    tested here): the same arguments for all three runs, so only the kill differs."""
    return [
        *("--config", preset("reproducible")),
        *("--trainer.max_epochs", str(EPOCHS), "--export.formats", "[]", *args),
    ]


def start(cwd: Path) -> subprocess.Popen:
    """The run to kill: a real process, one thread (as the in-process runs below)."""
    cwd.mkdir(parents=True, exist_ok=True)
    return start_train(cwd, *run_args(cwd.parent), env=script_env(OMP_NUM_THREADS="1"))


def saved_epoch(path: Path) -> int | None:
    """The epoch in a readable last.ckpt, None while there is none."""
    if not path.is_file():
        return None
    try:
        return int(read_checkpoint(path)["epoch"])
    except CheckpointError:
        return None  # being replaced right now: look again


def last_checkpoint(root: Path) -> Path:
    (path,) = root.glob("runs/**/checkpoints/last.ckpt")
    return path


@pytest.mark.slow
@pytest.mark.logger
# Lightning warns when a resume writes to another folder, or next to another run's files.
@pytest.mark.filterwarnings("error:The dirpath has changed")
@pytest.mark.filterwarnings("error:.*exists and is not empty")
def test_sigkilled_run_resumes_to_the_weights_of_an_uninterrupted_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, restore_torch_flags: None
) -> None:
    """Only the killed run needs its own process; the uninterrupted reference and the resume
    run in this one (no second and third start-up), with the same thread count."""
    killed = start(tmp_path / "killed")
    deadline = time.monotonic() + 120
    seen = None
    while (seen is None or seen < KILL_AFTER_EPOCH) and time.monotonic() < deadline:
        assert killed.poll() is None, "finished before it could be killed: raise EPOCHS"
        paths = list((tmp_path / "killed").glob("runs/**/checkpoints/last.ckpt"))
        seen = saved_epoch(paths[0]) if paths else None
        time.sleep(0.02)
    assert seen is not None and seen >= KILL_AFTER_EPOCH, "no checkpoint within 2 minutes"
    killed.send_signal(signal.SIGKILL)  # no handler, no cleanup: as a crash or an OOM kill
    killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL

    last = last_checkpoint(tmp_path / "killed")
    saved = saved_epoch(last)
    assert saved is not None and KILL_AFTER_EPOCH <= saved < EPOCHS - 1
    assert saved >= seen, "no finished epoch is lost: last.ckpt is never older than seen"

    with one_thread(), caplog.at_level(logging.INFO):
        resumed = run_training(tmp_path / "killed", *run_args(tmp_path, "--ckpt_path", "last"))
        (tmp_path / "uninterrupted").mkdir()
        run_training(tmp_path / "uninterrupted", *run_args(tmp_path))
    restored = last.relative_to(tmp_path / "killed")
    assert f"Restoring states from the checkpoint path at {restored}" in caplog.text

    # The resumed run kept writing into the killed run's folder and finished all epochs.
    assert last_checkpoint(tmp_path / "killed") == last
    assert resumed.summary_path == last.parent.parent / "summary.json"
    assert resumed.summary["epochs"] == EPOCHS
    assert_same_weights(last, last_checkpoint(tmp_path / "uninterrupted"))
    # One logger run, its steps going on from the checkpoint without a gap or a repeat (what
    # the killed run logged after its last.ckpt is dropped).
    assert_one_logger_run(last.parent.parent, resumed.stdout, EPOCHS, steps_per_epoch=20)


@pytest.mark.slow
def test_resume_from_a_truncated_last_checkpoint_exits_2_with_the_fix(
    tmp_path: Path, trained_run
) -> None:
    source = Path(trained_run.summary["paths"]["last_checkpoint"])
    folder = tmp_path / "runs" / "csv" / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    # What a kill in the middle of a (non-atomic) copy would leave: the first half.
    (folder / "last.ckpt").write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    result = run_until_exit(tmp_path, "--ckpt_path", "last")
    assert result.code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "error: checkpoint runs/csv/version_0/checkpoints/last.ckpt is truncated"
    )
    assert "resume from an earlier checkpoint or afresh" in line
