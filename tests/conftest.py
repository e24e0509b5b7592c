"""Helpers shared by the template's tests: bake a project, list its files, run commands in it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

TEMPLATE_DIR = Path(__file__).resolve().parents[1]
DEFAULT_SLUG = "digits-classifier"
DEFAULT_PACKAGE = "digits_classifier"


def load_hook(name: str) -> ModuleType:
    """Import a hook as a module: its checks are plain functions, its Jinja only in __main__."""
    spec = importlib.util.spec_from_file_location(name, TEMPLATE_DIR / "hooks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def project_files(root: Path) -> set[str]:
    """Every file under root, as POSIX paths relative to it."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def run(
    args: list[str], cwd: Path, timeout: float = 600, **env: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        args,
        cwd=cwd,
        env={**os.environ, "WANDB_MODE": "offline", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.fixture
def bake(cookies):
    """Bake with the given answers and return the project path; fail loudly on error."""

    def _bake(**answers: str) -> Path:
        result = cookies.bake(extra_context=answers)
        assert result.exit_code == 0, result.exception
        assert result.exception is None
        return Path(result.project_path)

    return _bake


PYTHON = sys.executable
