"""Ctrl-C and SIGTERM end a real run with their exit codes and a summary.json that says so."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .subprocesses import script_env, train_command


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "exit_code", "reason"),
    [(signal.SIGINT, 130, "stopped by Ctrl-C"), (signal.SIGTERM, 143, "stopped by SIGTERM")],
    ids=["ctrl-c", "sigterm"],
)
def test_an_interrupted_run_exits_with_its_code_and_says_so(
    tmp_path: Path, signum: int, exit_code: int, reason: str
) -> None:
    process = subprocess.Popen(
        train_command(
            *("--trainer.max_epochs", "1000", "--trainer.callbacks+=tests.probes.TrainingStarted"),
            *("--trainer.callbacks.out_dir", "probe"),
        ),
        cwd=tmp_path,
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 120  # bounds the wait, asserts nothing about speed
    while not (tmp_path / "probe" / "started").exists() and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    process.send_signal(signum)  # inside fit: a training step has run
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == exit_code, stderr[-3000:]
    assert "Traceback" not in stderr
    summary = json.loads(
        Path(stdout.strip().splitlines()[-1].removeprefix("summary: ")).read_text()
    )
    assert (summary["status"], summary["reason"]) == ("interrupted", reason)
    assert summary["epochs"] < 1000
