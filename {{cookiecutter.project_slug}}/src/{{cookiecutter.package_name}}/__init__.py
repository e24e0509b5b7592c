"""The project's package: model, training system, data and run helpers (see README.md)."""

from .deferred_imports import defer_scipy_signal_during_torchmetrics_import

__version__ = "0.1.0"

# Every script imports this package before Lightning: each process that imports Lightning
# starts ~0.6 s sooner (deferred_imports.py).
defer_scipy_signal_during_torchmetrics_import()
