"""W&B: a run never hangs nor prompts for a key; it goes offline and says how to sync."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.training import loggers

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def online_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No WANDB_MODE, no key in the environment or in ~/.netrc."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return monkeypatch


def test_wandb_without_a_key_goes_offline(online_env: pytest.MonkeyPatch) -> None:
    reason = loggers.keep_wandb_offline_safe()
    assert reason is not None and "no wandb API key" in reason
    assert os.environ["WANDB_MODE"] == "offline"


@pytest.mark.slow
def test_wandb_with_a_key_but_no_server_goes_offline_quickly(
    online_env: pytest.MonkeyPatch,
) -> None:
    online_env.setenv("WANDB_API_KEY", "x" * 40)
    # A server that accepts connections and never answers: what made wandb block ~106 s.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        online_env.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        # It returns at all: the probe is bounded by its timeout (wandb itself blocked ~106 s).
        reason = loggers.keep_wandb_offline_safe(timeout_s=0.5)
    assert reason is not None and "unreachable within 0.5 s" in reason
    assert os.environ["WANDB_MODE"] == "offline"


def test_wandb_with_a_key_and_a_server_that_answers_stays_online(
    online_env: pytest.MonkeyPatch,
) -> None:
    online_env.setenv("WANDB_API_KEY", "x" * 40)
    with http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler) as server:
        threading.Thread(target=server.handle_request, daemon=True).start()
        online_env.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_port}")
        assert loggers.keep_wandb_offline_safe() is None  # it answered (501)
    assert "WANDB_MODE" not in os.environ


def test_wandb_left_alone_when_offline(online_env: pytest.MonkeyPatch) -> None:
    """An offline logger in the config (default.yaml's) is never probed."""
    from jsonargparse import Namespace

    offline = Namespace(class_path="lightning.pytorch.loggers.WandbLogger")
    offline.init_args = Namespace(offline=True)
    loggers.prepare_logger_config(offline)
    assert "WANDB_MODE" not in os.environ
    online_env.setenv("WANDB_MODE", "disabled")
    assert loggers.keep_wandb_offline_safe() is None


@pytest.mark.slow
@pytest.mark.logger
def test_online_wandb_run_without_a_key_finishes_offline_with_stdin_closed(
    tmp_path: Path,
) -> None:
    """What a wandb project does when first run without an account. (A run with wandb pays
    its ~5 s start-up and sync files: only where configs/default.yaml logs to wandb.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env |= {"HOME": str(tmp_path), "PYTHONPATH": f"{PROJECT_ROOT / 'src'}:{PROJECT_ROOT}"}
    command = [
        sys.executable,
        str(PROJECT_ROOT / "train.py"),
        "--trainer.logger=lightning.pytorch.loggers.WandbLogger",
        "--trainer.logger.save_dir=runs",
        "--trainer.logger.offline=false",
        "--trainer.max_epochs=2",
        "--export.formats=[]",
    ]
    result = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "wandb logs offline: no wandb API key" in result.stderr
    assert "logs: wandb sync " in result.stdout
