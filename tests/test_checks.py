"""The generated project's own checks pass as baked: `pre-commit run --all-files` (ruff with
fixes, ruff format, mypy, file hygiene) in a git repository of it, for baked answers that
between them take every value of every option."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

from .conftest import TEMPLATE_DIR

# Every value of every option at least once (logger, extras, license, CI, Python version).
COMBINATIONS = {
    "defaults": {},  # tensorboard, MIT, GitHub CI, 3.11
    "every-extra-off-csv-3.12": {
        "logger": "csv",
        "tuning": "no",
        "serving": "no",
        "license": "Apache-2.0",
        "github_ci": "no",
        "python_version": "3.12",
    },
    "wandb-3.13": {"logger": "wandb", "license": "BSD-3-Clause", "python_version": "3.13"},
    "mlflow-no-license-no-ci": {"logger": "mlflow", "license": "none", "github_ci": "no"},
}
CHECKS = [sys.executable, "-m", "pre_commit", "run", "--all-files", "--show-diff-on-failure"]


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    """Each combination baked into a new git repository and checked. mypy, most of the time,
    analyses torch and Lightning once per Python version into a shared cache: one project per
    version runs at once, then the others reuse that version's cache."""
    cache = tmp_path_factory.mktemp("cache")
    # The hooks are local: they run the dev extra's tools from the environment (this venv).
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "MYPY_CACHE_DIR": str(cache / "mypy"),
        "PRE_COMMIT_HOME": str(cache / "pre-commit"),
    }
    projects = {}
    for name, answers in COMBINATIONS.items():
        out = tmp_path_factory.mktemp(name)
        baked = cookiecutter(
            str(TEMPLATE_DIR), no_input=True, extra_context=answers, output_dir=str(out)
        )
        project = Path(baked)
        for args in (["init", "--quiet"], ["add", "--all"]):
            subprocess.run(["git", *args], cwd=project, check=True)
        projects[name] = project
    results: dict[str, subprocess.CompletedProcess] = {}
    waves: list[list[str]] = [[], []]
    versions: set[str] = set()
    for name, answers in COMBINATIONS.items():
        version = answers.get("python_version", "3.11")
        waves[version in versions].append(name)
        versions.add(version)
    for wave in waves:
        started = {
            name: subprocess.Popen(
                CHECKS,
                cwd=projects[name],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            for name in wave
        }
        for name, process in started.items():
            stdout, stderr = process.communicate(timeout=600)  # a bound on a hang, not speed
            results[name] = subprocess.CompletedProcess(CHECKS, process.returncode, stdout, stderr)
    return results


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_pre_commit_passes_in_a_new_project(
    checked: dict[str, subprocess.CompletedProcess], name: str
) -> None:
    result = checked[name]
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    for hook in ("ruff check", "ruff format", "mypy", "trim trailing whitespace", "check yaml"):
        assert any(line.startswith(hook) and line.endswith("Passed") for line in lines), hook
