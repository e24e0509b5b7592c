"""The training system: steps, metrics, optimizer and schedule around the plain network."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from .model import Classifier, MLPClassifier

Batch = tuple[torch.Tensor, torch.Tensor]


class LitClassifier(L.LightningModule):
    """Trains any network (see model.py for the contract) with AdamW, linear warm-up then
    cosine decay per step, around the network's own preprocessing (``Classifier``)."""

    def __init__(
        self,
        net: nn.Module | None = None,
        input_shape: tuple[int, ...] = (1, 8, 8),
        num_classes: int = 10,
        class_names: list[str] | None = None,
        lr: float = 3e-3,
        weight_decay: float = 1e-2,
        warmup_fraction: float = 0.05,
        label_smoothing: float = 0.1,
        class_prior_bias: bool = True,
    ) -> None:
        """
        Args:
            net: the network, an ``nn.Module`` meeting the contract in model.py: in the
                config `model.net: {class_path: ..., init_args: ...}`, or `--model.net
                mynet.TinyNet`. None: ``MLPClassifier`` with its defaults.
            input_shape: one sample's shape; linked to the data module's ``input_shape``.
            num_classes: output size; linked to the data module's ``num_classes``.
            class_names: one name per class; linked to the data module's ``class_names``.
            lr: peak learning rate, reached at the end of the warm-up.
            weight_decay: AdamW decay, applied to weight matrices and kernels only.
            warmup_fraction: share of all optimizer steps spent warming up linearly.
            label_smoothing: training-loss smoothing; val/test report the plain loss.
            class_prior_bias: add the log training-split class frequencies to the logits
                (a fixed bias, in every export), so training starts from the priors.
        """
        super().__init__()
        # Plain values only: checkpoints stay loadable with weights_only=True. Built by
        # train.py's LightningCLI, `net` is saved as its config (class_path + init_args),
        # which load_from_checkpoint rebuilds; a network object passed in code is not
        # saved (give it again: LitClassifier.load_from_checkpoint(path, net=...)).
        with warnings.catch_warnings():  # "'net' is an instance of nn.Module": handled here
            warnings.filterwarnings("ignore", message="Attribute 'net' is an instance of")
            self.save_hyperparameters()
        if not isinstance(self.hparams.get("net"), dict):
            self.hparams.pop("net", None)
        input_shape = tuple(input_shape)
        net = MLPClassifier(input_shape, num_classes) if net is None else net
        self.model = Classifier(net, input_shape, num_classes)
        # Lets Lightning's model summary show input/output shapes and FLOPs.
        self.example_input_array = torch.zeros(2, *input_shape)
        # Every metric state here is a sum, so DDP processes sync it with one all_reduce.
        summed = all_reduce_sum
        self.train_acc = MulticlassAccuracy(num_classes, average="micro", dist_sync_fn=summed)
        self.val_acc = MulticlassAccuracy(num_classes, average="micro", dist_sync_fn=summed)
        self.test_acc = MulticlassAccuracy(num_classes, average="micro", dist_sync_fn=summed)
        # Sample-weighted mean loss per epoch. (Not nan_strategy="disable": torchmetrics 1.9
        # then ignores the weights; a NaN loss is dropped with a warning, and in training
        # GradientMonitor stops the run at that step.)
        self.train_loss, self.val_loss, self.test_loss = (
            MeanMetric(dist_sync_fn=summed) for _ in range(3)
        )
        # Read after trainer.test for confusion_matrix.png (compute() syncs across DDP ranks).
        self.test_confusion = MulticlassConfusionMatrix(num_classes, dist_sync_fn=summed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, batch_idx, "train")

    def validation_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, batch_idx, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, batch_idx, "test")

    def predict_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        """Class probabilities (B, num_classes); Lightning runs this in eval + inference mode."""
        return self(batch[0]).softmax(dim=-1)

    def on_test_epoch_start(self) -> None:
        self.test_confusion.reset()  # one matrix per test run, not a sum over runs

    def configure_optimizers(self) -> Any:
        decay = [p for p in self.parameters() if p.ndim >= 2]
        no_decay = [p for p in self.parameters() if p.ndim < 2]
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": self.hparams["weight_decay"]},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=self.hparams["lr"],
            fused=fused_kernels_apply(self.parameters()),
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
        """Fit starts from the data: training-split input statistics and class priors.

        (On a resume the checkpoint's values replace these right after.)"""
        datamodule: Any = getattr(self.trainer, "datamodule", None)
        if stage == "fit" and hasattr(datamodule, "input_stats"):
            self.model.standardize.set_stats(*datamodule.input_stats())
            if self.hparams["class_prior_bias"]:
                self.model.set_class_priors(datamodule.class_priors())

    def _shared_step(self, batch: Batch, batch_idx: int, stage: str) -> torch.Tensor:
        x, y = batch
        if batch_idx == 0:
            check_batch(x, y)
        logits = self(x)
        smoothing = self.hparams["label_smoothing"] if stage == "train" else 0.0
        loss = F.cross_entropy(logits, y, label_smoothing=smoothing)
        # .update, not a forward call: no per-batch value is computed that nobody reads.
        accuracy, mean_loss = getattr(self, f"{stage}_acc"), getattr(self, f"{stage}_loss")
        accuracy.update(logits, y)
        mean_loss.update(loss.detach(), weight=len(y))
        if stage == "test":
            self.test_confusion.update(logits, y)
        if batch_idx == 0:
            # Epoch metrics, logged once per epoch: Lightning computes the metric objects
            # (every batch's updates, synced across DDP processes) and resets them at the
            # epoch's end. One self.log per step costs ~1.6 ms, more than this model's step.
            self.log(f"{stage}/loss", mean_loss, on_step=False, on_epoch=True)
            self.log(
                f"{stage}/acc", accuracy, on_step=False, on_epoch=True, prog_bar=stage == "val"
            )
        return loss


def fused_kernels_apply(parameters: Iterable[torch.Tensor]) -> bool:
    """Whether AdamW may use its fused kernel: one kernel for every parameter instead of a
    Python loop of small ops per parameter (CPU, 64-256-256-10 MLP: 0.25 against 0.74 ms a
    step; the default step is ~3 ms). It takes floating-point tensors on CPU or CUDA."""
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in parameters)


def all_reduce_sum(state: torch.Tensor, group: Any = None) -> list[torch.Tensor]:
    """torchmetrics' ``dist_sync_fn`` for states that are sums: one all_reduce.

    Its default gathers every process's copy (a barrier, then two all_gathers per state) to
    reduce them afterwards; a sum needs one collective. With the ddp-cpu preset (2 processes,
    gloo) the epoch-end metric sync went from ~27 to ~6 ms. Only for states reduced with a
    sum (counts, totals): tests/test_module.py checks every metric of this module.
    """
    summed = state.clone()
    torch.distributed.all_reduce(summed, group=group)
    return [summed]  # torchmetrics stacks the list and sums it: this one tensor


def check_batch(x: torch.Tensor, y: torch.Tensor) -> None:
    """Fail on the first batch, with the fix, instead of training on silently broadcast shapes."""
    if not x.is_floating_point():
        raise TypeError(f"inputs must be floating point, got {x.dtype}: convert with x.float().")
    if y.dtype != torch.long:
        raise TypeError(f"labels must be int64 class indices, got {y.dtype}: use y.long().")
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(
            f"labels must have shape [B] = [{len(x)}], got {list(y.shape)}: "
            "use y.view(-1) (a [B, 1] label column broadcasts wrongly in the loss)."
        )
