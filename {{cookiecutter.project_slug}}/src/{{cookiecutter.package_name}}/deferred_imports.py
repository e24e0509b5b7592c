"""scipy.signal, which torchmetrics imports for nothing a run uses, loads when first read.

Whenever SciPy is installed (scikit-learn brings it), `import torchmetrics` imports
scipy.signal to add `scipy.signal.hamming` for SRMRpy, a package it never imports
(Lightning-AI/torchmetrics#3457, open). Lightning imports torchmetrics at its own import, so
every process that imports Lightning spent ~0.6 s of its ~3 s start-up on scipy.signal
(BENCHMARKS.md of the template, issue 17). Our own code because no library can stand in:
importlib.util.LazyLoader loads its module on any attribute read, and torchmetrics reads
`hamming`. Delete this module once torchmetrics no longer imports scipy.signal.

The stand-in is registered under the module's name in sys.modules. It answers `hamming`
(what torchmetrics checks for) and dunder probes (inspect walks every module for
`__file__`) itself; any other read, `__path__` (a submodule import) included, loads the real
module, which then takes the stand-in's place, with torchmetrics' `hamming` patch applied.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

DEFERRED = "scipy.signal"
_load_lock = threading.Lock()


def _hamming(*args: Any, **kwargs: Any) -> Any:
    """scipy.signal.windows.hamming, imported when called (what torchmetrics' patch adds)."""
    from scipy.signal.windows import hamming

    return hamming(*args, **kwargs)


class DeferredModule(types.ModuleType):
    """scipy.signal's stand-in: imports the real module on the first read it cannot answer."""

    def __init__(self, name: str, origin: str | None) -> None:
        super().__init__(name)
        self.__file__ = origin
        self.hamming = _hamming

    def __getattr__(self, attribute: str) -> Any:
        # Only called for what the stand-in lacks. inspect.getmodule and friends probe every
        # module in sys.modules for dunders: a miss, not a reason to load.
        if attribute.startswith("__") and attribute != "__path__":
            raise AttributeError(attribute)
        return getattr(load_real(self), attribute)


def load_real(stand_in: DeferredModule) -> types.ModuleType:
    """Import the real module in the stand-in's place, patched as torchmetrics patches it."""
    name = stand_in.__name__
    with _load_lock:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        real = importlib.import_module(name)
    if not hasattr(real, "hamming"):
        real.hamming = real.windows.hamming  # type: ignore[attr-defined]
    return real


def defer_scipy_signal() -> None:
    """Put the stand-in in sys.modules, unless scipy.signal is loaded already or SciPy is
    not installed (then torchmetrics imports nothing)."""
    if DEFERRED in sys.modules or importlib.util.find_spec("scipy") is None:
        return
    spec = importlib.util.find_spec(DEFERRED)
    if spec is not None:
        sys.modules[DEFERRED] = DeferredModule(DEFERRED, spec.origin)
