"""Ctrl-C and SIGTERM end a real run with their exit codes and a summary.json that says so."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .subprocesses import script_env, train_command

SIGNALS = {"ctrl-c": signal.SIGINT, "sigterm": signal.SIGTERM}


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """Both runs at once (their start-ups overlap), each stopped by its signal once a
    training step has run: name -> (exit code, stdout, stderr)."""
    processes = {}
    for name in SIGNALS:
        folder = tmp_path_factory.mktemp(name)
        processes[name] = (
            folder,
            subprocess.Popen(
                train_command(
                    *("--trainer.max_epochs", "1000", "--export.formats", "[]"),
                    "--trainer.callbacks+=tests.probes.TrainingStarted",
                    *("--trainer.callbacks.out_dir", "probe"),
                ),
                cwd=folder,
                env=script_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
            ),
        )
    deadline = time.monotonic() + 120  # bounds the wait, asserts nothing about speed
    waiting = dict(processes)
    while waiting and time.monotonic() < deadline:
        for name, (folder, process) in list(waiting.items()):
            assert process.poll() is None, process.communicate()
            if (folder / "probe" / "started").exists():
                process.send_signal(SIGNALS[name])  # inside fit: a training step has run
                del waiting[name]
        time.sleep(0.05)
    assert not waiting, f"no training step within 2 minutes: {sorted(waiting)}"
    results = {}
    for name, (_, process) in processes.items():
        stdout, stderr = process.communicate(timeout=120)
        results[name] = process.returncode, stdout, stderr
    return results


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "exit_code", "reason"),
    [("ctrl-c", 130, "stopped by Ctrl-C"), ("sigterm", 143, "stopped by SIGTERM")],
    ids=["ctrl-c", "sigterm"],
)
def test_an_interrupted_run_exits_with_its_code_and_says_so(
    interrupted: dict[str, tuple[int, str, str]], name: str, exit_code: int, reason: str
) -> None:
    returncode, stdout, stderr = interrupted[name]
    assert returncode == exit_code, stderr[-3000:]
    assert "Traceback" not in stderr
    summary = json.loads(
        Path(stdout.strip().splitlines()[-1].removeprefix("summary: ")).read_text()
    )
    assert (summary["status"], summary["reason"]) == ("interrupted", reason)
    assert summary["epochs"] < 1000
