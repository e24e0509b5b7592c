"""Run `python train.py` (or torchrun) as a user would: a real process, its own launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
TRAIN = PROJECT / "train.py"


def script_env(**extra: str) -> dict[str, str]:
    """The package and tests/ importable without an install; loggers offline. Without this
    process's W&B service (WANDB_SERVICE, set once a test here used wandb): a process started
    from a terminal has its own, and a SIGKILLed run must not stay "in use" in ours."""
    path = os.pathsep.join([str(PROJECT / "src"), str(PROJECT), os.environ.get("PYTHONPATH", "")])
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    return {**env, "PYTHONPATH": path, "WANDB_MODE": "offline", **extra}


def train_command(*args: str, torchrun_processes: int = 0) -> list[str]:
    launcher = [sys.executable]
    if torchrun_processes:
        launcher += ["-m", "torch.distributed.run", "--standalone"]
        launcher += [f"--nproc_per_node={torchrun_processes}"]
    return [*launcher, str(TRAIN), "--trainer.enable_progress_bar", "false", *args]


def start_train(
    cwd: Path, *args: str, env: dict[str, str] | None = None, **popen: Any
) -> subprocess.Popen:
    """Start `python train.py ARGS` in ``cwd``, its output piped; ``popen``: more of
    subprocess.Popen's options (start_new_session, ...)."""
    return subprocess.Popen(
        train_command(*args),
        cwd=cwd,
        env=env or script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        **popen,
    )


def run_train(cwd: Path, *args: str, torchrun_processes: int = 0, timeout: float = 300):
    """Run to the end in ``cwd`` (runs/ lands there); return the CompletedProcess."""
    return subprocess.run(
        train_command(*args, torchrun_processes=torchrun_processes),
        cwd=cwd,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def preset(name: str) -> str:
    return str(PROJECT / "configs" / f"{name}.yaml")
