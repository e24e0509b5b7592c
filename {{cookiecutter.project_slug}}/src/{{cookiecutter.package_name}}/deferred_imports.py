"""torchmetrics imports without loading scipy.signal, which it imports for nothing we use.

Whenever SciPy is installed (scikit-learn brings it), `import torchmetrics` imports
scipy.signal to add `scipy.signal.hamming` for SRMRpy, a package it never imports
(Lightning-AI/torchmetrics#3457, open; its fix moves the patch into torchmetrics' tests).
Lightning imports torchmetrics at its own import, so every process that imports Lightning
spent ~0.6 s of its start-up on scipy.signal (BENCHMARKS.md of the template, issue 17).

Our own code, because no library does it (importlib.util.LazyLoader loads its module on any
attribute read, and torchmetrics reads `hamming`): while torchmetrics' own import runs, and
only then, `sys.modules["scipy.signal"]` holds a stand-in that answers `hamming` and dunder
probes (inspect walks every module for `__file__`); any other read loads the real module.
Once torchmetrics is imported the stand-in is gone, so everything else, your code and your
tests' mocks included, imports the real scipy.signal, unpatched: `scipy.signal.hamming` is
not there, as in SciPy itself since 1.13. tests/test_deferred_imports.py fails once
torchmetrics stops importing scipy.signal: then delete this module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence
from typing import Any

DEFERRED = "scipy.signal"
IMPORTER = "torchmetrics"


class DeferredModule(types.ModuleType):
    """scipy.signal's stand-in: imports the real module on the first read it cannot answer."""

    def hamming(self, *args: Any, **kwargs: Any) -> Any:
        """scipy.signal.windows.hamming (what torchmetrics' patch adds), loaded when called."""
        return self.load().windows.hamming(*args, **kwargs)

    def load(self) -> types.ModuleType:
        """The real module, imported in the stand-in's place."""
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return importlib.import_module(self.__name__)

    def __getattr__(self, attribute: str) -> Any:
        # Only called for what the stand-in lacks. inspect.getmodule and friends probe every
        # module in sys.modules for dunders: a miss, not a reason to load.
        if attribute.startswith("__") and attribute != "__path__":
            raise AttributeError(attribute)
        return getattr(self.load(), attribute)


class _StandInWhileExecuting(importlib.abc.Loader):
    """Runs one module's import with the stand-in in sys.modules, then takes it away."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        # The module keeps its own loader (importlib.resources and others read it).
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        stand_in = None
        if DEFERRED not in sys.modules:
            stand_in = sys.modules[DEFERRED] = DeferredModule(DEFERRED)
        try:
            self.loader.exec_module(module)
        finally:
            if stand_in is not None and sys.modules.get(DEFERRED) is stand_in:
                del sys.modules[DEFERRED]


class DeferDuringImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: on the first import of ``importer``, it hands back the spec the
    other finders give, its loader wrapped in _StandInWhileExecuting; after that, nothing.
    (It stays in sys.meta_path: removing it could make another thread's import, walking the
    list at that moment, skip the finder after it.)"""

    def __init__(self, importer: str = IMPORTER) -> None:
        self.importer = importer
        self.done = False

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.importer or self.done:
            return None
        self.done = True  # before the call below, which asks every finder, this one too
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _StandInWhileExecuting(spec.loader)
        return spec


def defer_scipy_signal_during_torchmetrics_import() -> None:
    """Install the finder, unless torchmetrics or scipy.signal is imported already or SciPy
    is not installed (then torchmetrics imports nothing of it)."""
    if IMPORTER in sys.modules or DEFERRED in sys.modules:
        return
    if any(isinstance(finder, DeferDuringImport) for finder in sys.meta_path):
        return
    if importlib.util.find_spec("scipy") is None:
        return
    sys.meta_path.insert(0, DeferDuringImport())
