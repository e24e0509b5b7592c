"""scipy.signal's stand-in (deferred_imports.py) exists only while torchmetrics imports: what
torchmetrics and inspect read there loads nothing, and afterwards everyone, mocks included,
gets the real module. (tests/test_train.py checks a real `train.py --help` loads none of it.)"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import scipy

from {{ cookiecutter.package_name }}.deferred_imports import (
    DEFERRED,
    DeferDuringImport,
    DeferredModule,
    defer_scipy_signal_during_torchmetrics_import,
)

# What torchmetrics/__init__.py does, and an inspect walk over every module in sys.modules.
IMPORTER_SOURCE = """
import inspect
import sys

import scipy.signal

seen = type(scipy.signal).__name__
patched = hasattr(scipy.signal, "hamming")
inspect.getmodule(sys._getframe().f_code)
"""
# An importer that uses scipy.signal for real while it imports.
USING_SOURCE = """
import scipy.signal

window = scipy.signal.hamming(3).tolist()
butter = scipy.signal.butter
"""


@pytest.fixture
def no_scipy_signal() -> Iterator[None]:
    """This process as one that has not imported scipy.signal yet; afterwards exactly what it
    had (its modules and scipy's attribute) is put back."""
    missing = object()
    attribute = vars(scipy).get("signal", missing)
    saved = {name: sys.modules[name] for name in list(sys.modules) if is_scipy_signal(name)}
    for name in saved:
        del sys.modules[name]
    if attribute is not missing:
        del scipy.signal
    try:
        yield
    finally:
        for name in [name for name in sys.modules if is_scipy_signal(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
        vars(scipy).pop("signal", None)
        if attribute is not missing:
            scipy.signal = attribute


def is_scipy_signal(name: str) -> bool:
    return name == DEFERRED or name.startswith(f"{DEFERRED}.")


def import_under_the_finder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> tuple[types.ModuleType, DeferDuringImport]:
    """Import a module made of ``source`` with the finder watching for it, as for torchmetrics."""
    name = f"importer_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = DeferDuringImport(importer=name)
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name), finder


def test_the_importer_reads_the_stand_in_and_nothing_is_left_after_it(
    no_scipy_signal: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    importer, finder = import_under_the_finder(tmp_path, monkeypatch, IMPORTER_SOURCE)
    assert importer.seen == "DeferredModule" and importer.patched
    assert DEFERRED not in sys.modules, "loaded, or the stand-in left behind"
    assert finder.done and finder.find_spec(importer.__name__) is None, "one import only"
    assert type(importer.__loader__).__name__ == "SourceFileLoader"  # its own, not ours
    assert importer.__spec__ is not None and importer.__spec__.loader is importer.__loader__
    # Everyone else gets the real module, as without the stand-in.
    import scipy.signal
    from scipy.signal._ltisys import TransferFunction

    assert not isinstance(scipy.signal, DeferredModule)
    assert scipy.signal.TransferFunction is TransferFunction
    with mock.patch("scipy.signal.butter", return_value="patched"):
        assert scipy.signal.butter(2, 0.5) == "patched"
    assert not hasattr(scipy.signal, "hamming"), "SciPy's own module, unpatched"


def test_a_read_the_stand_in_cannot_answer_loads_the_real_module(
    no_scipy_signal: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    importer, _ = import_under_the_finder(tmp_path, monkeypatch, USING_SOURCE)
    assert importer.window == pytest.approx([0.08, 1.0, 0.08])
    real = sys.modules[DEFERRED]
    assert not isinstance(real, DeferredModule)
    assert importer.butter is real.butter
    numerator, _ = real.butter(2, 0.5)
    assert numerator.tolist() == pytest.approx([0.2929, 0.5858, 0.2929], abs=1e-4)


def test_nothing_is_installed_once_torchmetrics_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torchmetrics  # noqa: F401  (what every test process has imported by now)

    finders = list(sys.meta_path)
    defer_scipy_signal_during_torchmetrics_import()
    assert sys.meta_path == finders


def test_torchmetrics_still_imports_scipy_signal_for_nothing() -> None:
    """The day this fails, torchmetrics imports scipy.signal no more: delete
    deferred_imports.py, its call in __init__.py and this file."""
    import torchmetrics

    assert "import scipy.signal" in inspect.getsource(torchmetrics)
