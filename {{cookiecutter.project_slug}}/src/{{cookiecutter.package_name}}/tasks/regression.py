"""Regression as one unit: float targets (B, K) learnt on their training-split standardised
values (optionally of log1p), answered in their own units by every export; MSE (or Huber, L1)
loss; MAE, RMSE and R²; the training mean and a ridge regression as baselines; predicted
against true values on the test split. torchmetrics, scikit-learn and matplotlib are imported
where used (predict.py runs without them)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

INT8_MAX_RMSE_RISE = 0.05  # an int8 export's RMSE may exceed the model's by 5 % of the spread
MAX_PANELS = 4  # predictions.png shows the first targets, the metrics hold every one


class Destandardize(nn.Module):
    """Standardised network outputs back to the targets' units: y = z * std + mean, then
    expm1 when the targets were learnt as log1p. Buffers: every export carries them."""

    mean: torch.Tensor  # buffers: declared for type checkers
    std: torch.Tensor

    def __init__(self, num_targets: int, transform: str = "none") -> None:
        super().__init__()
        self.log1p = transform == "log1p"
        self.register_buffer("mean", torch.zeros(num_targets))
        self.register_buffer("std", torch.ones(num_targets))

    def standardize(self, y: torch.Tensor) -> torch.Tensor:
        return ((torch.log1p(y) if self.log1p else y) - self.mean) / self.std

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        y = z * self.std + self.mean
        return torch.expm1(y) if self.log1p else y


@dataclass
class Regression:
    """Float targets (B, K) against network outputs (B, K)."""

    target_names: list[str]
    loss_name: Literal["mse", "huber", "l1"] = "mse"
    transform: str = "none"
    kind = "regression"
    noun = "targets"
    plot_name = "predictions"

    @property
    def names(self) -> list[str]:
        return self.target_names

    @property
    def num_outputs(self) -> int:
        return len(self.target_names)

    @property
    def headline(self) -> tuple[str, str]:
        """What a sweep compares trials on by default (several targets: their joint loss)."""
        return ("rmse", "minimize") if self.num_outputs == 1 else ("loss", "minimize")

    def output_layer(self) -> nn.Module:
        self.layer = Destandardize(self.num_outputs, self.transform)
        return self.layer

    def fit_output(self, layer: Destandardize, train_targets: torch.Tensor) -> None:
        values = torch.log1p(train_targets) if layer.log1p else train_targets
        with torch.no_grad():
            layer.mean.copy_(values.mean(dim=0))
            layer.std.copy_(values.std(dim=0).clamp_min(1e-12))

    def loss(
        self, raw: torch.Tensor, outputs: torch.Tensor, y: torch.Tensor, training: bool
    ) -> torch.Tensor:
        """On the standardised targets: every target weighs alike, whatever its units."""
        target = self.layer.standardize(y)
        if self.loss_name == "huber":
            return F.huber_loss(raw, target)
        return F.l1_loss(raw, target) if self.loss_name == "l1" else F.mse_loss(raw, target)

    def metrics(self) -> dict[str, Any]:
        """MAE, RMSE, R² in the targets' units, each target apart when there are several."""
        from torchmetrics import MeanAbsoluteError, MeanSquaredError, R2Score

        def one() -> dict[str, Any]:
            rmse = MeanSquaredError(squared=False)
            return {"mae": MeanAbsoluteError(), "rmse": rmse, "r2": R2Score()}

        if self.num_outputs == 1:
            return one()
        return {f"{name}/{k}": m for k in self.metric_names() for name, m in one().items()}

    def metric_names(self) -> list[str]:
        """The targets' names as metric keys (a module name holds no dot)."""
        return [name.replace(".", "_") for name in self.target_names]

    def update(self, metrics: dict[str, Any], outputs: torch.Tensor, y: torch.Tensor) -> None:
        names = self.metric_names()
        for key, metric in metrics.items():
            column = names.index(key.split("/", 1)[1]) if "/" in key else 0
            metric.update(outputs[:, column], y[:, column])

    def check_batch(self, x: torch.Tensor, outputs: torch.Tensor, y: torch.Tensor) -> None:
        """The seed's pitfall: an output (B, 1) against a target (B,), or the other way round,
        broadcasts to (B, B) in the loss and trains on the wrong objective, silently."""
        if not x.is_floating_point():
            raise TypeError(f"inputs must be floating point, got {x.dtype}: use x.float().")
        if not y.is_floating_point():
            raise TypeError(f"regression targets must be floats, got {y.dtype}: use y.float().")
        if outputs.shape != y.shape:
            raise ValueError(
                f"the network's output has shape {list(outputs.shape)} and the target "
                f"{list(y.shape)}: they must be equal, (B, {self.num_outputs}) here (a (B, 1) "
                "output against a (B,) target broadcasts to (B, B) in the loss): make the "
                f"network return (batch, num_outputs={self.num_outputs})."
            )

    def values(self, outputs: torch.Tensor) -> list[dict[str, float]]:
        """Each sample's predicted values, by target name (predict.py, serve.py)."""
        return [dict(zip(self.target_names, row, strict=True)) for row in outputs.tolist()]

    def score(self, outputs: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """The export report's measure of an export on the test split."""
        return {"rmse": round(rmse(outputs, y), 6)}

    def tolerance(self) -> tuple[float, float]:
        """(rtol, atol) of an fp32 export's outputs: relative to the targets' spread."""
        return 1e-4, 1e-4 * float(self.layer.std.max())

    def export_error(self, eager: torch.Tensor, exported: torch.Tensor, y: torch.Tensor) -> str:
        """What an int8 export lost, if more than allowed ('' when within bounds)."""
        before, after = rmse(eager, y), rmse(exported, y)
        allowed = INT8_MAX_RMSE_RISE * float(y.float().std(dim=0).mean())
        if after - before <= allowed:
            return ""
        return f"raised the test RMSE from {before:.4g} to {after:.4g} (at most +{allowed:.3g})"

    def evaluate(self, outputs: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        """MAE, RMSE and R² of each target, and their mean over the targets (evaluate.py)."""
        outputs, y = outputs.double(), y.double()
        per_target = {}
        for k, name in enumerate(self.target_names):
            error = outputs[:, k] - y[:, k]
            total = ((y[:, k] - y[:, k].mean()) ** 2).sum()
            per_target[name] = {
                "mae": float(error.abs().mean()),
                "rmse": float(error.square().mean().sqrt()),
                "r2": float(1 - error.square().sum() / total),
            }
        targets = per_target.values()
        mean = {m: float(np.mean([t[m] for t in targets])) for m in ("mae", "rmse", "r2")}
        return {**mean, "samples": len(y), "per_target": per_target}

    def evaluation_lines(self, metrics: dict[str, Any]) -> list[str]:
        lines = [f"MAE {metrics['mae']:.4g}, RMSE {metrics['rmse']:.4g}, R² {metrics['r2']:.4f}"]
        if len(metrics["per_target"]) > 1:
            lines += [
                f"  {name}: MAE {t['mae']:.4g}, RMSE {t['rmse']:.4g}, R² {t['r2']:.4f}"
                for name, t in metrics["per_target"].items()
            ]
        return lines

    def plot_test(self, outputs: torch.Tensor, y: torch.Tensor, path: Path) -> Path:
        """predictions.png: predicted against true values, and the residuals, per target."""
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt

        shown = min(self.num_outputs, MAX_PANELS)
        figure, axes = plt.subplots(
            shown, 2, figsize=(10, 4 * shown), constrained_layout=True, squeeze=False
        )
        predicted, true = outputs.double().numpy(), y.double().numpy()
        for k, (left, right) in enumerate(axes):
            name, p, t = self.target_names[k], predicted[:, k], true[:, k]
            edges = [min(p.min(), t.min()), max(p.max(), t.max())]
            left.scatter(t, p, s=8, alpha=0.6)
            left.plot(edges, edges, color="grey", linewidth=1)  # perfect predictions
            left.set(xlabel=f"true {name}", ylabel="predicted", title=f"test split: {name}")
            right.scatter(p, p - t, s=8, alpha=0.6)
            right.axhline(0, color="grey", linewidth=1)
            right.set(xlabel=f"predicted {name}", ylabel="predicted - true", title="residuals")
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path

    def baselines(
        self,
        train: tuple[np.ndarray, np.ndarray],
        test: tuple[np.ndarray, np.ndarray],
        outputs: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        """Test RMSE of the training mean and of a ridge regression on the standardised flat
        inputs, both fit on the training split; and how the network's squared errors compare
        with the ridge's, sample by sample (a paired difference, with its standard error)."""
        from sklearn.linear_model import RidgeCV
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        (train_x, train_y), (test_x, test_y) = train, test
        flat = train_x.reshape(len(train_x), -1), test_x.reshape(len(test_x), -1)
        mean = np.broadcast_to(train_y.mean(axis=0), test_y.shape)
        ridge = make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 3, 13)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ill-conditioned fits still make a baseline
            ridge_y = ridge.fit(flat[0], train_y).predict(flat[1]).reshape(test_y.shape)
        result: dict[str, Any] = {
            "training_mean_rmse": round(rmse_np(mean, test_y), 6),
            "ridge_rmse": round(rmse_np(ridge_y, test_y), 6),
            "test_samples": len(test_y),
        }
        if outputs is not None:
            # Per sample, the network's squared error minus the ridge's, in units of each
            # target's spread (several targets weigh alike).
            spread = train_y.std(axis=0)
            network = ((outputs.double().numpy() - test_y) / spread) ** 2
            difference = (network - ((ridge_y - test_y) / spread) ** 2).mean(axis=1)
            result["gap_to_ridge"] = round(float(difference.mean()), 6)
            error = difference.std(ddof=1) / math.sqrt(len(difference))
            result["gap_standard_error"] = round(float(error), 6)
        return result

    def summary_lines(
        self, metrics: dict[str, float], baselines: dict[str, Any] | None
    ) -> list[str]:
        """The test metrics beside the baselines, and a note when the ridge does better."""
        lines = [
            f"test RMSE {metrics.get('test/rmse', math.nan):.4g}, MAE "
            f"{metrics.get('test/mae', math.nan):.4g}, R² {metrics.get('test/r2', math.nan):.4f}"
            if self.num_outputs == 1
            else f"test loss {metrics.get('test/loss', math.nan):.4f} (standardised MSE over "
            f"{self.num_outputs} targets; each target's metrics in summary.json)"
        ]
        if not baselines:
            return lines
        lines.append(
            f"baselines (test split): training mean RMSE {baselines['training_mean_rmse']:.4g}, "
            f"ridge regression RMSE {baselines['ridge_rmse']:.4g}"
        )
        gap, error = baselines.get("gap_to_ridge"), baselines.get("gap_standard_error")
        if gap is not None and error is not None and gap > 0:
            chance = gap < 2 * error
            verdict = (
                "within two standard errors: not distinguishable from chance"
                if chance
{%- if cookiecutter.tuning == "yes" %}
                else "beyond chance: tune it with python sweep.py (README: Tune it)"
{%- else %}
                else "beyond chance: a smaller network or more regularisation may do better"
{%- endif %}
            )
            lines.append(
                f"note: the network's squared errors exceed the ridge regression's by "
                f"{gap:.3g} target variances a sample (standard error {error:.2g}), {verdict}"
            )
        return lines


def rmse(outputs: torch.Tensor, y: torch.Tensor) -> float:
    return float((outputs.double() - y.double()).square().mean().sqrt())


def rmse_np(predicted: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((predicted - y) ** 2)))
