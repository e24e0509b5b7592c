"""scipy.signal's stand-in (deferred_imports.py): torchmetrics' import and inspect's probes
leave it unloaded; any real use gets the real module, patched as torchmetrics patches it."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator

import pytest
import scipy

from {{ cookiecutter.package_name }}.deferred_imports import (
    DEFERRED,
    DeferredModule,
    defer_scipy_signal,
    load_real,
)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[DeferredModule]:
    """scipy.signal as a process sees it before anything imported it: neither it nor its
    submodules loaded (what this process had is put back afterwards)."""
    if "signal" in vars(scipy):  # (only a read through scipy's own __getattr__ if not)
        monkeypatch.delattr(scipy, "signal")
    for name in [name for name in sys.modules if f"{name}.".startswith(f"{DEFERRED}.")]:
        monkeypatch.delitem(sys.modules, name)
    defer_scipy_signal()
    module = sys.modules[DEFERRED]
    assert isinstance(module, DeferredModule)
    yield module


def test_what_torchmetrics_and_inspect_read_does_not_load_it(stand_in: DeferredModule) -> None:
    import scipy.signal  # torchmetrics/__init__.py, then its check for the patch:

    assert hasattr(scipy.signal, "hamming")
    assert inspect.getmodule(test_what_torchmetrics_and_inspect_read_does_not_load_it)
    assert not hasattr(stand_in, "__wrapped__")  # a dunder probe is a miss, not a load
    assert sys.modules[DEFERRED] is stand_in
    assert stand_in.hamming(3).tolist() == pytest.approx([0.08, 1.0, 0.08])  # still usable


def test_any_other_read_loads_the_real_module_patched_as_torchmetrics_does(
    stand_in: DeferredModule,
) -> None:
    from scipy.signal import butter

    real = sys.modules[DEFERRED]
    assert not isinstance(real, DeferredModule)
    assert real.butter is butter and scipy.signal is real
    assert real.hamming is real.windows.hamming
    numerator, _ = butter(2, 0.5)
    assert numerator.tolist() == pytest.approx([0.2929, 0.5858, 0.2929], abs=1e-4)
    assert stand_in.butter is butter  # a name bound to the stand-in keeps working


def test_a_submodule_import_goes_through_the_real_package(stand_in: DeferredModule) -> None:
    import scipy.signal.windows

    assert not isinstance(sys.modules[DEFERRED], DeferredModule)
    assert scipy.signal.windows.hamming(3).tolist() == pytest.approx([0.08, 1.0, 0.08])


def test_nothing_is_deferred_once_the_real_module_is_loaded(stand_in: DeferredModule) -> None:
    real = load_real(stand_in)
    defer_scipy_signal()
    assert sys.modules[DEFERRED] is real
