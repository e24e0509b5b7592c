"""The training system: the network inside what is exported, its loss, metrics, optimizer and
learning-rate schedule."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, Literal

import lightning as L
import torch
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, PositiveFloat
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
from torchmetrics import MeanMetric

from .data.sources import TaskName
from .networks import MLP
from .tasks import make_task

Batch = tuple[torch.Tensor, torch.Tensor]
STAGES = ("train", "val", "test")


def stats_shape(input_shape: Sequence[int]) -> tuple[int, ...]:
    """One statistic per feature for flat inputs (F,), per channel for (C, ...) inputs."""
    if len(input_shape) == 1:
        return (input_shape[0],)
    return (input_shape[0],) + (1,) * (len(input_shape) - 1)


class Standardize(nn.Module):
    """(x - mean) / std, with training-split statistics kept as buffers in every state_dict."""

    mean: torch.Tensor  # buffers: declared for type checkers
    std: torch.Tensor

    def __init__(self, input_shape: Sequence[int]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(stats_shape(input_shape)))
        self.register_buffer("std", torch.ones(stats_shape(input_shape)))

    @torch.no_grad()
    def set_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """A constant feature or channel (std 0) is only centred."""
        self.mean.copy_(mean.view_as(self.mean))
        std = std.view_as(self.std)
        self.std.copy_(torch.where(std > 1e-6, std, torch.ones_like(std)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class InferenceModel(nn.Module):
    """Raw inputs -> standardise -> any network -> the task's output layer: what is exported,
    so that serving takes raw inputs and cannot drift from training."""

    output: Any  # the task's output layer (tasks/), with the task's own setters

    def __init__(self, net: nn.Module, input_shape: Sequence[int], output: nn.Module) -> None:
        super().__init__()
        self.standardize = Standardize(input_shape)
        self.net = net
        self.output = output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.net(self.standardize(x)))


class LitModel(L.LightningModule):
    """Trains any network (see networks.py for the contract) with AdamW, a linear warm-up
    then a cosine decay per step."""

    def __init__(
        self,
        net: nn.Module | None = None,
        input_shape: tuple[int, ...] = (1, 8, 8),
        num_outputs: int = 10,
        output_names: list[str] | None = None,
        task_kind: TaskName = "classification",
        target_transform: str = "none",
        lr: PositiveFloat = 3e-3,
        weight_decay: NonNegativeFloat = 1e-2,
        warmup_fraction: ClosedUnitInterval = 0.05,
        label_smoothing: ClosedUnitInterval = 0.1,
        class_prior_bias: bool = True,
        regression_loss: Literal["mse", "huber", "l1"] = "mse",
    ) -> None:
        """
        Args:
            net: the network (`--model.net mynet.TinyNet`); None: ``MLP``.
            input_shape, num_outputs, output_names, task_kind, target_transform: linked from
                the data (the task, the class or target names, how targets were read).
            lr: peak learning rate, reached at the end of the warm-up.
            weight_decay: AdamW decay of weight matrices and kernels (not biases).
            warmup_fraction: share of all optimizer steps spent warming up linearly.
            label_smoothing: classification: training-loss smoothing (val/test: plain loss).
            class_prior_bias: classification: start the logits at the log class frequencies.
            regression_loss: regression: mse, huber or l1, on the standardised targets.
        """
        super().__init__()
        # Plain values only, so checkpoints load with weights_only=True. Built by the CLI,
        # `net` is saved as its config (class_path + init_args), which load_from_checkpoint
        # rebuilds; a network object passed in code is not saved (pass it again to load).
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Attribute 'net' is an instance of")
            self.save_hyperparameters()
        if not isinstance(self.hparams.get("net"), dict):
            self.hparams.pop("net", None)
        input_shape = tuple(input_shape)
        names = list(output_names or map(str, range(num_outputs)))
        self.task = make_task(
            task_kind,
            names,
            label_smoothing=label_smoothing,
            class_prior_bias=class_prior_bias,
            loss_name=regression_loss,
            transform=target_transform,
        )
        net = MLP(input_shape, num_outputs) if net is None else net
        self.model = InferenceModel(net, input_shape, self.task.output_layer())
        self.example_input_array = torch.zeros(2, *input_shape)  # for the model summary
        # Each stage's epoch metrics: the sample-weighted mean loss and the task's own.
        self.train_metrics, self.val_metrics, self.test_metrics = (
            nn.ModuleDict({"loss": MeanMetric(), **self.task.metrics()}) for _ in STAGES
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, batch_idx, "train")

    def validation_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, batch_idx, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, batch_idx, "test")

    def predict_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self(batch[0])  # class logits, or values in the targets' units

    def configure_optimizers(self) -> Any:
        decay = [p for p in self.parameters() if p.ndim >= 2]
        no_decay = [p for p in self.parameters() if p.ndim < 2]
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": self.hparams["weight_decay"]},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=self.hparams["lr"],
            # One kernel for all parameters instead of a loop of small ops per parameter.
            fused=all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in decay),
        )
        total = max(2, int(self.trainer.estimated_stepping_batches))
        warmup = min(total - 1, max(1, round(self.hparams["warmup_fraction"] * total)))
        scheduler = SequentialLR(
            optimizer,
            [
                LinearLR(optimizer, start_factor=1.0 / warmup, total_iters=warmup),
                CosineAnnealingLR(optimizer, T_max=total - warmup),
            ],
            milestones=[warmup],
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }

    def setup(self, stage: str) -> None:
        """Fit starts from training-split statistics: the inputs' and the task's own (class
        priors, target scale); a resume then loads the checkpoint's over them."""
        datamodule: Any = getattr(self.trainer, "datamodule", None)
        if stage == "fit" and hasattr(datamodule, "input_stats"):
            self.model.standardize.set_stats(*datamodule.input_stats())
            self.task.fit_output(self.model.output, datamodule.train_targets())

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Epochs whose training ran to the end: what a resume checks (check_resumable).
        # (Lightning types the tracker as its base class, which has no `processed`.)
        progress = self.trainer.fit_loop.epoch_progress.current
        checkpoint["epochs_trained"] = progress.processed  # type: ignore[attr-defined]

    def _shared_step(self, batch: Batch, batch_idx: int, stage: str) -> torch.Tensor:
        x, y = batch
        raw = self.model.net(self.model.standardize(x))
        outputs = self.model.output(raw)  # what the export answers: logits, or values
        if batch_idx == 0:
            self.task.check_batch(x, outputs, y)
        loss = self.task.loss(raw, outputs, y, training=stage == "train")
        metrics = getattr(self, f"{stage}_metrics")
        metrics["loss"].update(loss.detach(), weight=len(y))
        self.task.update({k: m for k, m in metrics.items() if k != "loss"}, outputs.detach(), y)
        if batch_idx == 0:
            # Metric objects, logged once: Lightning computes them over every batch's updates
            # (synced across DDP processes) at the epoch's end, then resets them.
            for name, metric in metrics.items():
                shown = stage == "val" and name != "loss"  # in the progress bar
                self.log(f"{stage}/{name}", metric, on_step=False, on_epoch=True, prog_bar=shown)
        return loss
