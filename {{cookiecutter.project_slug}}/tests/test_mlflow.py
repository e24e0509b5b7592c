"""MLflow's store: made absolute, shown by the right command, and taken back to a checkpoint's
step when a run resumes (what a resume must not show twice)."""

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

from {{ cookiecutter.package_name }}.mlflow_store import absolute_store_uri, how_to_view

from .conftest import CONFIGS, MLFLOW_UI, Run, working_directory


def test_a_relative_sqlite_store_is_made_absolute_and_its_folder_created(tmp_path: Path) -> None:
    with working_directory(tmp_path):
        uri = absolute_store_uri("sqlite:///runs/mlflow.db")
        assert uri == f"sqlite:///{tmp_path.resolve() / 'runs' / 'mlflow.db'}"
        assert (tmp_path / "runs").is_dir()
        assert absolute_store_uri(uri) == uri
        assert absolute_store_uri("sqlite:///other/m.db", create=False) is not None
        assert not (tmp_path / "other").exists()
    for kept in ("http://mlflow.example.org:5000", "postgresql://u@db/mlflow", None):
        assert absolute_store_uri(kept) == kept


def test_the_hint_is_the_ui_command_for_a_store_and_the_run_page_for_a_server() -> None:
    assert how_to_view("sqlite:////abs/runs/mlflow.db", "1", "abc") == (
        "mlflow ui --backend-store-uri sqlite:////abs/runs/mlflow.db"
    )
    assert how_to_view("http://host:5000/", "1", "abc") == (
        "mlflow: http://host:5000/#/experiments/1/runs/abc"
    )


def skip_unless_mlflow() -> None:
    if "MLFlowLogger" not in (CONFIGS / "default.yaml").read_text():
        pytest.skip("the project logs elsewhere: configs/default.yaml has no MLFlowLogger")


@pytest.mark.slow  # mlflow's start-up and a new store: ~8 s
@pytest.mark.logger
def test_a_resumed_run_drops_what_was_logged_from_its_checkpoint_step_on(tmp_path: Path) -> None:
    """The values at the checkpoint's step and later go, in the history and in the latest
    values; the others stay; the run is marked running again (it was killed or failed)."""
    skip_unless_mlflow()
    from mlflow.tracking import MlflowClient

    from {{ cookiecutter.package_name }}.mlflow_store import continue_run, run_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("e")
    run = client.create_run(experiment).info.run_id
    other = client.create_run(experiment).info.run_id
    for step in range(10):
        client.log_metric(run, "val/acc", step / 10, step=step)
        client.log_metric(other, "val/acc", step / 10, step=step)
    client.log_metric(run, "test/acc", 0.9, step=9)
    client.set_terminated(run, "FAILED")

    assert run_experiment(uri, run) == experiment
    assert run_experiment(uri, "0" * 32) is None
    assert run_experiment(f"sqlite:///{tmp_path / 'none.db'}", run) is None
    assert not (tmp_path / "none.db").exists(), "asking created no store"

    continue_run(uri, run, step=6)
    history = client.get_metric_history(run, "val/acc")
    assert [(m.step, m.value) for m in history] == [(s, s / 10) for s in range(6)]
    assert client.get_metric_history(run, "test/acc") == []
    latest = client.get_run(run)
    assert latest.data.metrics == {"val/acc": 0.5}
    assert latest.info.status == "RUNNING"
    assert len(client.get_metric_history(other, "val/acc")) == 10, "other runs are untouched"


@pytest.mark.slow  # the MLflow server's start-up: ~12 s
@pytest.mark.logger
def test_the_ui_command_a_run_prints_serves_that_run(trained_run: Run, tmp_path: Path) -> None:
    """`mlflow ui ...` as the run's `logs:` line prints it (on a free port of 127.0.0.1, one
    worker): its REST API lists the run with its test accuracy."""
    skip_unless_mlflow()
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
