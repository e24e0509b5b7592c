"""The project's package: model, training system, data and run helpers (see README.md)."""

__version__ = "0.1.0"
