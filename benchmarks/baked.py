"""Shared by the benchmarks: bake the template's defaults and import the generated package."""

from __future__ import annotations

import importlib
import io
import os
import platform
import socket
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

from cookiecutter.main import cookiecutter

TEMPLATE_DIR = Path(__file__).resolve().parents[1]
# Modules of the package before its folders by concern (commit aa2eff7 and earlier) whose
# API the benchmarks use unchanged: new dotted name -> old name. import_modules falls back.
BEFORE_FOLDERS = {"training.cli": "cli", "networks": "model"}


def bake(workdir: Path, ref: str | None = None, answers: dict | None = None) -> Path:
    """A fresh project with the default answers (``answers`` override some); returns its
    folder.

    With ``ref`` (a git commit of this repository), the template as it was then, baked as
    package ``digits_before`` so that both versions import side by side in one process:
    before/after comparisons measured in one run."""
    context = dict(answers or {})
    template = TEMPLATE_DIR
    if ref is not None:
        archive = subprocess.run(
            ["git", "archive", ref], cwd=TEMPLATE_DIR, capture_output=True, check=True
        ).stdout
        template = workdir / f"template-{ref}"
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(template, filter="data")
        context["project_name"] = "Digits Before"
    baked = cookiecutter(
        str(template),
        no_input=True,
        output_dir=str(workdir),
        extra_context=context,
        default_config=True,  # not this user's ~/.cookiecutterrc
    )
    return Path(baked)


def import_modules(project: Path, *names: str) -> dict[str, ModuleType]:
    """Import modules of the baked package by dotted name (``training.cli``); lightning is
    imported only from here on. In a project baked before the package's folders, the
    names of BEFORE_FOLDERS import their old modules."""
    sys.path.insert(0, str(project / "src"))
    package = next(path.parent.name for path in (project / "src").glob("*/__init__.py"))
    renamed = {} if (project / "src" / package / "training").is_dir() else BEFORE_FOLDERS
    return {name: importlib.import_module(f"{package}.{renamed.get(name, name)}") for name in names}


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (DDP's rendezvous, a server)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def machine() -> str:
    """CPU model and the cores this process may use (affinity, not the host's count)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        model = names[0].split(":", 1)[1].strip() if names else model
    return f"{model}, {cores} cores"


def epoch_timer():
    """An epoch_clock.EpochClock: each epoch's full wall time in ``.times`` (imported on
    call: lightning is imported only after the bake)."""
    from epoch_clock import EpochClock

    return EpochClock()
