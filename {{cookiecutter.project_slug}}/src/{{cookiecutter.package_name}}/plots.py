"""curves.png and confusion_matrix.png: what a run did, readable at a glance."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch

from .summary import run_dir


class MetricHistory(L.Callback):
    """Every epoch-level metric (train/*, val/*) per epoch, for curves.png.

    Kept in checkpoints, so the curves of a resumed run start at epoch 0, not at the resume.
    Logger-independent: the plots exist whichever logger (or none) is configured.
    """

    def __init__(self) -> None:
        self.history: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning has aggregated this epoch's train metrics and run validation by now.
        row = {"epoch": float(trainer.current_epoch)}
        for name, value in trainer.callback_metrics.items():
            if name.startswith(("train/", "val/")) and value.numel() == 1:
                row[name] = float(value)
        self.history.append(row)

    def state_dict(self) -> dict[str, Any]:
        # One table tensor (NaN where a metric is missing), not a dict per epoch: every
        # checkpoint carries the history, and each pickled float costs time at every save.
        columns = sorted({name for row in self.history for name in row})
        values = [[row.get(name, math.nan) for name in columns] for row in self.history]
        return {"columns": columns, "values": torch.tensor(values, dtype=torch.float64)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        columns, values = state_dict["columns"], state_dict["values"].tolist()
        self.history = [
            {name: value for name, value in zip(columns, row, strict=True) if not math.isnan(value)}
            for row in values
        ]


def write_plots(
    trainer: L.Trainer, confusion: torch.Tensor | None, class_names: Sequence[str] | None = None
) -> dict[str, str]:
    """Both plots into the run directory (rank zero only); returns {name: path}."""
    directory = run_dir(trainer)
    callbacks = trainer.callbacks  # type: ignore[attr-defined]  # set by Lightning at init
    history = next((c.history for c in callbacks if isinstance(c, MetricHistory)), [])
    written = {
        "curves": write_curves(history, directory / "curves.png"),
        "confusion_matrix": (
            write_confusion_matrix(confusion, directory / "confusion_matrix.png", class_names)
            if confusion is not None and confusion.sum() > 0
            else None
        ),
    }
    return {name: str(path) for name, path in written.items() if path is not None}


def write_curves(history: Sequence[dict[str, float]], path: Path) -> Path | None:
    """Loss and accuracy per epoch, train against val, one panel each; None without data."""
    if not history:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    epochs = [row["epoch"] for row in history]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for ax, metric in zip(axes, ("loss", "acc"), strict=True):
        for stage in ("train", "val"):
            values = [row.get(f"{stage}/{metric}", math.nan) for row in history]
            if not all(math.isnan(v) for v in values):
                ax.plot(epochs, values, marker=".", label=stage)
        ax.set(xlabel="epoch", ylabel=metric, title=f"{metric} per epoch")
        ax.grid(alpha=0.3)
        ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def write_confusion_matrix(
    confusion: torch.Tensor, path: Path, class_names: Sequence[str] | None = None
) -> Path:
    """Test-split confusion matrix (rows: true class, columns: predicted), with counts and
    the class names (counts only beyond 30 classes, where they stop being readable)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from torchmetrics.utilities.plot import plot_confusion_matrix

    with warnings.catch_warnings():
        # torchmetrics hands matplotlib a tensor, whose __array__ (torch 2.13) lacks numpy 2's
        # copy= keyword: a deprecation inside the two libraries, not in this call.
        warnings.filterwarnings(
            "ignore",
            message=r"__array__ implementation doesn't accept a copy",
            category=DeprecationWarning,
        )
        classes = len(confusion)
        size = max(6.4, 0.45 * classes)  # inches: room for the names of many classes
        figure, ax = plt.subplots(figsize=(size, size), constrained_layout=True)
        figure, ax = plot_confusion_matrix(
            confusion.cpu(),
            ax=ax,
            add_text=classes <= 30,
            labels=list(class_names) if class_names else None,
        )
    ax.set_title(f"test split: {int(confusion.trace())} of {int(confusion.sum())} correct")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
