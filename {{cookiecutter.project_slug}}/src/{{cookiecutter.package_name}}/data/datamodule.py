"""The data: any source (sources.py) split, standardised with training-split statistics,
batched and augmented; what the network, the task and the exports need follows from it."""

from __future__ import annotations

import os
from functools import cached_property
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from jsonargparse.typing import ClosedUnitInterval, NonNegativeInt, OpenUnitInterval, PositiveInt
from torch.utils.data import DataLoader

from .images import ColorMode
from .loading import EpochSampler, InMemoryDataset, ResumableLoader, keep_batch
from .sources import Column, DataError, DataSource, TaskName, read_data
{%- if cookiecutter.tuning == "yes" %}
from .splits import split_indices, strata, validation_fold
{%- else %}
from .splits import split_indices, strata
{%- endif %}

SPLITS = ("train", "val", "test")


class DataModule(L.LightningDataModule):
    """A ``DataSource`` split, standardised and batched."""

    def __init__(
        self,
        path: str | None = None,
        batch_size: PositiveInt = 64,
        val_fraction: OpenUnitInterval = 0.15,
        test_fraction: OpenUnitInterval = 0.15,
        split_seed: int = 0,
        num_workers: NonNegativeInt = 0,
        shift_prob: ClosedUnitInterval | None = None,
        image_size: PositiveInt | tuple[PositiveInt, PositiveInt] | None = None,
        color_mode: ColorMode | None = None,
        label_column: Column | list[Column] | None = None,
        ignore_columns: list[Column] | None = None,
        task: TaskName | None = None,
        target_transform: Literal["none", "log1p"] = "none",
{%- if cookiecutter.tuning == "yes" %}
        val_fold: NonNegativeInt = 0,
{%- endif %}
    ) -> None:
        """
        Args:
            path: an .npz or .csv file, or a folder of images in one subfolder per class
                (sources.py); None for the built-in digits.
            batch_size: samples per batch (per process under DDP).
            val_fraction: share of samples held out for validation and checkpoint choice.
            test_fraction: share of samples held out for the final test.
            split_seed: seed of the split, independent of the training seed.
            num_workers: loader worker processes (in-memory data needs none).
            shift_prob: share of training images shifted by up to one pixel; None: 0.3 for
                images, 0 for flat features.
            image_size: image folders: resize to 32 or [height, width]; None: the first's.
            color_mode: image folders: L (grayscale) or RGB; None: the first image's.
            label_column: .csv: the target column (a 0-based index or a header name), or a
                list of them (regression); None: the last.
            ignore_columns: .csv: columns that are no feature (an id, a name).
            task: classification or regression; None: what the targets say (sources.py).
            target_transform: regression: log1p trains on log(1 + y) (prices, counts), undone
                in every export.
{%- if cookiecutter.tuning == "yes" %}
            val_fold: k > 0 validates on the k-th part of the training split of the
                validation split's size (k-fold cross-validation, sweep.py --folds).
{%- endif %}
        """
        super().__init__()
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.resume_batches = 0  # a resumed run: training batches of its epoch already done
        # Read and split now, while the CLI builds its objects: bad data stops the run before
        # any training, with a DataError that names it.
        images = len(self.input_shape) == 3
        if shift_prob and not images:
            raise DataError(
                f"data.shift_prob={shift_prob} shifts images, but {path} has flat samples of "
                f"shape {self.input_shape}: set --data.shift_prob 0."
            )
        self.shift_prob = (0.3 if images else 0.0) if shift_prob is None else shift_prob
        regression = self.task == "regression"
        if target_transform == "log1p" and (not regression or self.source.targets.min() <= -1):
            found = "smaller ones" if regression else "classes"
            raise DataError(
                f"data.target_transform log1p takes regression targets above -1: "
                f"{path or 'the data'} has {found}."
            )
        labels = strata(self.source.targets)
        names = self.output_names if self.task == "classification" else None
        try:
            self.train_idx, self.val_idx, self.test_idx = split_indices(
                labels, val_fraction, test_fraction, split_seed, names
            )
{%- if cookiecutter.tuning == "yes" %}
            self.train_idx, self.val_idx = validation_fold(
                self.train_idx, self.val_idx, labels, val_fold, split_seed
            )
{%- endif %}
        except DataError as error:
            raise DataError(f"{path or 'the built-in digits'}: {error}") from None

    @cached_property
    def source(self) -> DataSource:
        hp = self.hparams
        return read_data(
            hp["path"],
            hp["image_size"],
            hp["color_mode"],
            hp["label_column"],
            hp["ignore_columns"],
            hp["task"],
        )

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One sample's shape: (F,) for features, (C, H, W) for images."""
        return self.source.input_shape

    @property
    def task(self) -> TaskName:
        return self.source.task

    @property
    def num_outputs(self) -> int:
        """The network's output size: the classes, or the regression targets."""
        return len(self.source.names)

    @property
    def output_names(self) -> list[str]:
        """The class names, or the target names."""
        return list(self.source.names)

    @property
    def target_transform(self) -> str:
        return self.hparams["target_transform"]

    @property
    def preprocessing(self) -> dict[str, Any]:
        """How raw inputs were read (image colour mode, size, scaling), for the exports."""
        return dict(self.source.preprocessing)

    def example_file(self) -> str | None:
        """A test-split file that predict.py can read (image folders only)."""
        return self.source.files[self.test_idx[0]] if self.source.files else None

    def split_arrays(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(features (N, *input_shape) float32, targets) of a split, as read: class labels
        (N,) int64, or regression targets (N, K) float32 in their own units."""
        if split not in SPLITS:
            raise ValueError(f"split {split!r}: expected one of {', '.join(SPLITS)}")
        index = {"train": self.train_idx, "val": self.val_idx, "test": self.test_idx}[split]
        return self.source.features[index], self.source.targets[index]

    def input_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of the training split only, per feature or per image channel."""
        train = torch.from_numpy(self.source.features[self.train_idx])
        dims = [0, *range(2, train.ndim)]  # every dimension but the feature / channel one
        return train.mean(dim=dims), train.std(dim=dims)

    def train_targets(self) -> torch.Tensor:
        """The training split's targets (the task fits its output layer to them)."""
        return torch.from_numpy(self.source.targets[self.train_idx])

    def setup(self, stage: str | None = None) -> None:
        self.train_set, self.val_set, self.test_set = (
            InMemoryDataset(*map(torch.from_numpy, self.split_arrays(split))) for split in SPLITS
        )

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        replicas, rank = (trainer.world_size, trainer.global_rank) if trainer else (1, 0)
        sampler = EpochSampler(len(self.train_set), True, run_seed(), replicas, rank)
        sampler.skip, self.resume_batches = self.resume_batches * self.batch_size, 0
        return ResumableLoader(self.train_set, sampler=sampler, **self._loader_options())

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, **self._loader_options())

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, **self._loader_options())

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, **self._loader_options())

    def state_dict(self) -> dict[str, Any]:
        """In checkpoints: how many batches of the running epoch were trained. (Lightning
        restores the data module before the training loader is made.)"""
        trainer = self.trainer
        done = getattr(trainer.train_dataloader, "batches_done", 0) if trainer else 0
        if trainer is not None and 0 < done < trainer.num_training_batches:
            return {"train_batches_done": done}
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.resume_batches = int(state_dict.get("train_batches_done", 0))

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Augment whole training batches on the device; val/test/predict see raw data."""
        training = self.trainer is not None and self.trainer.training
        # Only (inputs, labels) batches: Lightning also passes its example input through here.
        if self.shift_prob > 0 and training and isinstance(batch, (list, tuple)):
            x, y = batch  # x: (B, C, H, W)
            chosen = torch.rand(len(x), 1, 1, 1, device=x.device) < self.shift_prob
            batch = (torch.where(chosen, random_shift(x), x), y)
        return batch

    def _loader_options(self) -> dict[str, Any]:
        workers = self.hparams["num_workers"]
        return dict(
            batch_size=self.batch_size,
            num_workers=workers,
            persistent_workers=workers > 0,
            collate_fn=keep_batch,
            # Each iterator draws its workers' seed from this, not from the global random
            # state, which a resumed run restores mid-epoch, after the epoch's iterator began.
            generator=torch.Generator().manual_seed(run_seed()),
        )


def run_seed() -> int:
    """The run's seed, as Lightning's seed_everything records it (0 if it was not called)."""
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


def random_shift(images: torch.Tensor, max_shift: int = 1) -> torch.Tensor:
    """Move each image (B, C, H, W) by up to ``max_shift`` pixels each way, zero-filled."""
    count, _, height, width = images.shape
    padded = F.pad(images, (max_shift,) * 4).permute(0, 2, 3, 1)  # (B, H + 2s, W + 2s, C)
    offsets = torch.randint(0, 2 * max_shift + 1, (2, count, 1, 1), device=images.device)
    rows = offsets[0] + torch.arange(height, device=images.device).view(1, height, 1)
    cols = offsets[1] + torch.arange(width, device=images.device).view(1, 1, width)
    batch_index = torch.arange(count, device=images.device).view(count, 1, 1)
    return padded[batch_index, rows, cols].permute(0, 3, 1, 2)  # (B, C, H, W)
