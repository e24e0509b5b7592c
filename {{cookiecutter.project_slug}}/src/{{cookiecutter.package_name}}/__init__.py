"""The project's package: networks, training system, data, exports and reports (README.md)."""

__version__ = "0.1.0"
