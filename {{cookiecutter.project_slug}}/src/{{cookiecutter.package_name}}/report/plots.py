"""curves.png: each epoch's training and validation metrics, whatever the logger."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch


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
        # One table tensor (NaN where a metric is missing), loadable weights-only.
        columns = sorted({name for row in self.history for name in row})
        values = [[row.get(name, math.nan) for name in columns] for row in self.history]
        return {"columns": columns, "values": torch.tensor(values, dtype=torch.float64)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        columns, values = state_dict["columns"], state_dict["values"].tolist()
        self.history = [
            {name: value for name, value in zip(columns, row, strict=True) if not math.isnan(value)}
            for row in values
        ]


def write_curves(history: Sequence[dict[str, float]], path: Path) -> Path | None:
    """Each metric per epoch (loss first), train against val, one panel each; None without
    data."""
    names = {key.split("/", 1)[1] for row in history for key in row if "/" in key}
    metrics = sorted(names, key=lambda name: (name != "loss", name))
    if not metrics:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    epochs = [row["epoch"] for row in history]
    figure, axes = plt.subplots(
        1, len(metrics), figsize=(5 * len(metrics), 4), constrained_layout=True, squeeze=False
    )
    for ax, metric in zip(axes[0], metrics, strict=True):
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
