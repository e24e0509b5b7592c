"""Classification as one unit: the output layer, loss and metrics of training, the baselines a
network must beat, the end-of-run lines, the confusion matrix, and the class probabilities
that predict.py, evaluate.py and the exports give. Needs torch and numpy; torchmetrics,
scikit-learn and matplotlib are imported where used (predict.py runs without them).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# The logistic regression baseline is skipped above these sizes, so that it stays quick.
MAX_FEATURES = 4096
MAX_VALUES = 20_000_000  # training samples x features
MAX_ITER = 200
INT8_MAX_ACCURACY_DROP = 0.01  # an int8 export may cost at most 1 point of test accuracy


class ClassPriorBias(nn.Module):
    """Adds the log class frequencies of the training split to the logits (a buffer, zero
    when off): the first loss is the label entropy instead of noise, whatever the network."""

    log_prior: torch.Tensor  # a buffer: declared for type checkers

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.register_buffer("log_prior", torch.zeros(num_classes))

    @torch.no_grad()
    def set_priors(self, priors: torch.Tensor) -> None:
        self.log_prior.copy_(priors.clamp_min(1e-8).log())

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits + self.log_prior


@dataclass
class Classification:
    """Integer class labels (B,) against logits (B, num_classes)."""

    num_classes: int
    class_names: list[str]
    label_smoothing: float = 0.0  # in the training loss only
    class_prior_bias: bool = True
    kind = "classification"
    noun = "classes"
    headline = ("acc", "maximize")  # the metric a sweep compares trials on by default
    plot_name = "confusion_matrix"

    @property
    def names(self) -> list[str]:
        return self.class_names

    def output_layer(self) -> nn.Module:
        return ClassPriorBias(self.num_classes)

    def fit_output(self, layer: ClassPriorBias, train_targets: torch.Tensor) -> None:
        """Training-split class frequencies as the logits' starting point."""
        if self.class_prior_bias:
            counts = torch.bincount(train_targets, minlength=self.num_classes).double()
            layer.set_priors((counts / counts.sum()).float())

    def loss(
        self, raw: torch.Tensor, logits: torch.Tensor, y: torch.Tensor, training: bool
    ) -> torch.Tensor:
        smoothing = self.label_smoothing if training else 0.0
        return F.cross_entropy(logits, y, label_smoothing=smoothing)

    def metrics(self) -> dict[str, Any]:
        """The epoch metrics of each stage, logged as <stage>/<name>."""
        from torchmetrics.classification import MulticlassAccuracy

        return {"acc": MulticlassAccuracy(self.num_classes, average="micro")}

    def update(self, metrics: dict[str, Any], logits: torch.Tensor, y: torch.Tensor) -> None:
        for metric in metrics.values():
            metric.update(logits, y)

    @staticmethod
    def check_batch(x: torch.Tensor, logits: torch.Tensor, y: torch.Tensor) -> None:
        """Fail on the first batch, with the fix, instead of training on broadcast shapes."""
        if not x.is_floating_point():
            raise TypeError(f"inputs must be floating point, got {x.dtype}: use x.float().")
        if y.dtype != torch.long:
            raise TypeError(f"labels must be int64 class indices, got {y.dtype}: use y.long().")
        if y.ndim != 1 or len(y) != len(x):
            raise ValueError(
                f"labels must have shape [B] = [{len(x)}], got {list(y.shape)}: "
                "use y.view(-1) (a [B, 1] label column broadcasts wrongly in the loss)."
            )

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.float().softmax(dim=-1)

    def tolerance(self) -> tuple[float, float]:
        """(rtol, atol) of an fp32 export's logits against the model's."""
        return 0.0, 1e-4

    def score(self, logits: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """The export report's measure of an export on the test split."""
        return {"accuracy": round(accuracy(logits, y), 6)}

    def evaluate(self, logits: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        """Accuracy, loss and each class's precision, recall, F1 and support (evaluate.py)."""
        from torchmetrics.functional.classification import multiclass_stat_scores

        predicted = logits.argmax(dim=-1)
        # Per class: true positives, false positives, true negatives, false negatives, support.
        stats = multiclass_stat_scores(predicted, y, self.num_classes, average=None).double()
        tp, fp, fn, support = stats[:, 0], stats[:, 1], stats[:, 3], stats[:, 4]
        precision = (tp / (tp + fp)).nan_to_num(0.0)
        recall = (tp / (tp + fn)).nan_to_num(0.0)
        f1 = (2 * precision * recall / (precision + recall)).nan_to_num(0.0)
        per_class = {
            name: {
                "precision": float(precision[i]),
                "recall": float(recall[i]),
                "f1": float(f1[i]),
                "support": int(support[i]),
            }
            for i, name in enumerate(self.class_names)
        }
        return {
            "accuracy": float((predicted == y).float().mean()),
            "loss": float(F.cross_entropy(logits.float(), y)),
            "samples": len(y),
            "per_class": per_class,
        }

    def evaluation_lines(self, metrics: dict[str, Any]) -> list[str]:
        worst = min(metrics["per_class"].items(), key=lambda item: item[1]["f1"])
        return [
            f"accuracy {metrics['accuracy']:.4f}, loss {metrics['loss']:.4f}",
            f"lowest F1: class {worst[0]} {worst[1]['f1']:.4f} (each class in metrics.json)",
        ]

    def export_error(self, eager: torch.Tensor, exported: torch.Tensor, y: torch.Tensor) -> str:
        """What an int8 export lost, if more than allowed ('' when within bounds)."""
        before, after = accuracy(eager, y), accuracy(exported, y)
        if before - after <= INT8_MAX_ACCURACY_DROP:
            return ""
        return (
            f"lost {100 * (before - after):.2f} points of test accuracy ({before:.4f} -> "
            f"{after:.4f}; at most {100 * INT8_MAX_ACCURACY_DROP:g} allowed)"
        )

    def plot_test(self, logits: torch.Tensor, y: torch.Tensor, path: Path) -> Path:
        """confusion_matrix.png of the test split (rows: true class, columns: predicted)."""
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
        from torchmetrics.functional.classification import multiclass_confusion_matrix
        from torchmetrics.utilities.plot import plot_confusion_matrix

        confusion = multiclass_confusion_matrix(logits.argmax(dim=-1), y, self.num_classes)
        with warnings.catch_warnings():
            # torchmetrics hands matplotlib a tensor whose __array__ (torch 2.13) lacks numpy 2's
            # copy= keyword: a deprecation between the two libraries, not in this call.
            warnings.filterwarnings("ignore", message=r"__array__ implementation doesn't accept")
            size = max(6.4, 0.45 * self.num_classes)  # inches: room for many class names
            figure, ax = plt.subplots(figsize=(size, size), constrained_layout=True)
            plot_confusion_matrix(
                confusion, ax=ax, add_text=self.num_classes <= 30, labels=self.class_names
            )
        ax.set_title(f"test split: {int(confusion.trace())} of {len(y)} correct")
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
        """Test accuracies of the majority class and a logistic regression, both fit on the
        training split: what a network has to beat to be worth its training."""
        (train_x, train_y), (test_x, test_y) = train, test
        majority = np.bincount(train_y).argmax()  # ties: the lowest class
        result: dict[str, Any] = {
            "majority_class": round(float(np.mean(test_y == majority)), 6),
            "test_samples": len(test_y),
        }
        skipped = too_large(*train_x.reshape(len(train_x), -1).shape)
        if skipped:
            return {**result, "logistic_regression": None, "skipped": skipped}
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from threadpoolctl import threadpool_limits

        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=MAX_ITER))
        # One BLAS thread: lbfgs's thin products gain nothing from threads on a busy machine.
        with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # still a linear model's score
            model.fit(train_x.reshape(len(train_x), -1), train_y)
            score = model.score(test_x.reshape(len(test_x), -1), test_y)
        return {**result, "logistic_regression": round(float(score), 6)}

    def summary_lines(
        self, metrics: dict[str, float], baselines: dict[str, Any] | None
    ) -> list[str]:
        """The test accuracy beside the baselines, and a note when a linear model does better."""
        lines = [
            f"test accuracy {metrics.get('test/acc', math.nan):.4f}, "
            f"test loss {metrics.get('test/loss', math.nan):.4f}"
        ]
        if not baselines:
            return lines
        linear = baselines["logistic_regression"]
        shown = f"{linear:.4f}" if linear is not None else f"skipped: {baselines.get('skipped')}"
        lines.append(
            f"baselines (test split): majority class {baselines['majority_class']:.4f}, "
            f"logistic regression {shown}"
        )
        gap = linear_gap(metrics.get("test/acc"), baselines)
        if gap is not None:
            lines.append(
                f"note: the network gets {gap} than the logistic regression, {gap.verdict()}"
            )
        return lines


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(dim=-1) == y).float().mean())


def too_large(samples: int, features: int) -> str | None:
    """Why a logistic regression on (samples, features) inputs would not be quick, or None."""
    if features > MAX_FEATURES:
        return f"{features:,} input values per sample, over the {MAX_FEATURES:,} of a quick fit"
    if samples * features > MAX_VALUES:
        return f"{samples:,} x {features:,} training values, over {MAX_VALUES:.0e} for a quick fit"
    return None


@dataclass(frozen=True)
class LinearGap:
    """How many fewer test samples a model gets right than the logistic regression."""

    samples: int  # at least 1
    test_samples: int
    chance: float  # two standard errors of the logistic regression's accuracy, in samples

    @property
    def within_chance(self) -> bool:
        return self.samples < self.chance

    def __str__(self) -> str:
        return f"{self.samples} fewer of the {self.test_samples} test samples right"

    def verdict(self) -> str:
        if self.within_chance:
            return (
                f"within two standard errors of its accuracy ({self.chance:.1f} samples): not "
                "distinguishable from chance"
            )
{%- if cookiecutter.tuning == "yes" %}
        return "beyond chance: tune it with python sweep.py (README: Tune it)"
{%- else %}
        return "beyond chance: a smaller network or more regularisation may do better"
{%- endif %}


def linear_gap(accuracy: float | None, baselines: dict[str, Any]) -> LinearGap | None:
    """The gap of ``accuracy`` below the logistic regression in whole test samples; None when
    under one sample (float32 against float64 accuracies of the same count) or unknown."""
    linear, test_samples = baselines.get("logistic_regression"), baselines.get("test_samples")
    if accuracy is None or linear is None or not test_samples:
        return None
    samples = round((linear - accuracy) * test_samples)
    if samples < 1:
        return None
    chance = 2 * test_samples * binomial_standard_error(linear, test_samples)
    return LinearGap(samples, test_samples, chance)


def binomial_standard_error(proportion: float, samples: int) -> float:
    """The standard error of an accuracy over ``samples``, with Agresti and Coull's two
    successes and two failures added: a perfect score still has one."""
    adjusted = (proportion * samples + 2) / (samples + 4)
    return math.sqrt(adjusted * (1 - adjusted) / samples)
