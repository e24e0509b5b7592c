"""Tasks: what is learnt from the targets. A task is one unit of code (classification.py,
regression.py), with the same methods: its output layer (exported with the network) and how
it is fitted to the training split; the loss, metrics and first-batch shape check; the
export's check and score; evaluate.py's metrics; the test plot; the baselines and the
end-of-run lines. Everything else (data kinds, networks, exports) works with either."""

from __future__ import annotations

from typing import Any

from .classification import Classification
from .regression import Regression

Task = Classification | Regression


def make_task(kind: str, names: list[str], **options: Any) -> Task:
    """The task ``kind`` ("classification" or "regression") for the class or target names;
    ``options``: the task's own (label_smoothing, class_prior_bias; loss_name, transform)."""
    if kind == "regression":
        keys = ("loss_name", "transform")
        return Regression(names, **{k: v for k, v in options.items() if k in keys})
    keys = ("label_smoothing", "class_prior_bias")
    return Classification(len(names), names, **{k: v for k, v in options.items() if k in keys})
