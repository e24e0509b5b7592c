"""MLflow: a local store made absolute, the `mlflow ui` command a run prints serves that run.
(A resumed run goes on in its MLflow run: test_checkpoints.py, marked `logger`.)"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from jsonargparse import Namespace

from {{ cookiecutter.package_name }}.training.loggers import prepare_logger_config

from .conftest import MLFLOW_UI, Run, working_directory


def test_a_relative_sqlite_store_is_made_absolute_and_its_folder_created(tmp_path: Path) -> None:
    """mlflow keeps one engine per URI for the process's life: a relative path would follow
    a process that changes directory."""
    logger = Namespace(class_path="lightning.pytorch.loggers.MLFlowLogger")
    for uri, expected in (
        ("sqlite:///runs/mlflow.db", f"sqlite:///{tmp_path.resolve() / 'runs' / 'mlflow.db'}"),
        ("http://mlflow.example.org:5000", "http://mlflow.example.org:5000"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),
    ):
        logger.init_args = Namespace(tracking_uri=uri)
        with working_directory(tmp_path):
            prepare_logger_config(logger)
        assert logger.init_args.tracking_uri == expected
    assert (tmp_path / "runs").is_dir()


@pytest.mark.slow  # the MLflow server's start-up: ~12 s
@pytest.mark.logger
def test_the_ui_command_a_run_prints_serves_that_run(trained_run: Run, tmp_path: Path) -> None:
    """`mlflow ui ...` as the run's `logs:` line prints it (on a free port of 127.0.0.1, one
    worker): its REST API lists the run with its test accuracy."""
    (line,) = [line for line in trained_run.stdout.splitlines() if line.startswith(MLFLOW_UI)]
    command = shlex.split(line.removeprefix("logs: "))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "server.log"
    with log.open("w") as output:
        options = ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        server = subprocess.Popen(
            [sys.executable, "-m", *command, *options],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            runs = _search_runs(server, f"http://127.0.0.1:{port}", time.monotonic() + 120)
        except AssertionError as error:
            raise AssertionError(f"{error}: {log.read_text()[-3000:]}") from None
        finally:
            server.terminate()
            server.wait(timeout=30)
    run_id = Path(trained_run.summary["paths"]["run_dir"]).name
    (run,) = [run for run in runs if run["info"]["run_id"] == run_id]
    metrics = {metric["key"]: metric["value"] for metric in run["data"]["metrics"]}
    assert metrics["test/acc"] == pytest.approx(trained_run.summary["metrics"]["test/acc"])


def _search_runs(server: subprocess.Popen, url: str, deadline: float) -> list[dict]:
    """Every run of every experiment, once the server answers (polled until ``deadline``)."""
    body = json.dumps({"experiment_ids": ["0", "1"]}).encode()
    while True:
        assert server.poll() is None, "the server exited"
        request = urllib.request.Request(
            f"{url}/api/2.0/mlflow/runs/search",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.load(response)["runs"]
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, "the server did not answer within 2 minutes"
            time.sleep(0.5)
