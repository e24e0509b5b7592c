"""The data: scikit-learn's bundled 8x8 handwritten digits, real images with no download.

To bring your own data, point ``data.path`` at an .npz or .csv file (see data_files.py), or
replace ``load_arrays`` (features float32 (N, F), labels int64 (N,)); splitting,
statistics, loaders and the model's input/output sizes follow from the arrays.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, Dataset, TensorDataset

from .data_files import DataError, read_data_file
from .runtime import available_cores


def load_arrays(path: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """All samples: features (N, F) float32, labels (N,) int64.

    Without a path, the digits: 1,797 samples of 64 pixel values 0..16, classes 0..9.
    """
    if path is not None:
        return read_data_file(path)
    features, labels = load_digits(return_X_y=True)
    return features.astype(np.float32), labels.astype(np.int64)


def split_indices(
    labels: np.ndarray, val_fraction: float, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified, seeded train/val/test indices: the same split on every run and rank."""
    if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
        raise ValueError(
            f"val_fraction={val_fraction} and test_fraction={test_fraction} must each be in "
            "(0, 1) and sum to less than 1, e.g. 0.15 and 0.15."
        )
    indices = np.arange(len(labels))
    rest, test = train_test_split(
        indices, test_size=test_fraction, stratify=labels, random_state=seed
    )
    train, val = train_test_split(
        rest,
        test_size=val_fraction / (1 - test_fraction),
        stratify=labels[rest],
        random_state=seed,
    )
    return np.sort(train), np.sort(val), np.sort(test)


class DigitsDataModule(L.LightningDataModule):
    """Splits, training-split statistics and loaders for the arrays of ``load_arrays``."""

    def __init__(
        self,
        path: str | None = None,
        batch_size: int = 64,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        split_seed: int = 0,
        num_workers: int | None = None,
        shift_prob: float = 0.3,
    ) -> None:
        """
        Args:
            path: an .npz or .csv file of features and labels (see data_files.py); None
                for the built-in digits.
            batch_size: samples per batch (per process under DDP).
            val_fraction: share of samples held out for validation and checkpoint choice.
            test_fraction: share of samples held out for the final test.
            split_seed: seed of the split, independent of the training seed.
            num_workers: loader worker processes; None picks them from the dataset and the
                available cores (see ``default_num_workers``).
            shift_prob: share of training images shifted by one pixel (augmentation,
                training batches only); set 0 for data that are not 8x8 images.
        """
        super().__init__()
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.shift_prob = shift_prob
        self.num_workers = num_workers
        self.path = path
        # Read and split now, while the CLI builds its objects: a bad file stops the run
        # before any training, with a DataError that names it.
        if shift_prob > 0 and self.num_features != 64:
            raise DataError(
                f"data.shift_prob={shift_prob} shifts 8x8 images, but {path} has "
                f"{self.num_features} features per sample: set --data.shift_prob 0."
            )
        self.train_idx, self.val_idx, self.test_idx = split_indices(
            self._arrays[1], val_fraction, test_fraction, split_seed
        )

    @cached_property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return load_arrays(self.path)

    @property
    def num_features(self) -> int:
        return int(self._arrays[0].shape[1])

    @property
    def num_classes(self) -> int:
        return int(self._arrays[1].max()) + 1

    def input_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-feature mean and std of the training split only (never val/test)."""
        train = torch.from_numpy(self._arrays[0][self.train_idx])
        return train.mean(dim=0), train.std(dim=0)

    def class_priors(self) -> torch.Tensor:
        """Class frequencies in the training split."""
        counts = np.bincount(self._arrays[1][self.train_idx], minlength=self.num_classes)
        return torch.from_numpy(counts / counts.sum()).float()

    def setup(self, stage: str | None = None) -> None:
        features, labels = (torch.from_numpy(a) for a in self._arrays)
        self.train_set, self.val_set, self.test_set = (
            TensorDataset(features[idx], labels[idx])
            for idx in (self.train_idx, self.val_idx, self.test_idx)
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Augment whole training batches on the device; val/test/predict see raw data."""
        training = self.trainer is not None and self.trainer.training
        # Only (inputs, labels) batches: Lightning also passes its example input through here.
        if self.shift_prob > 0 and training and isinstance(batch, (list, tuple)):
            x, y = batch
            shifted = random_shift(x.view(-1, 8, 8)).view_as(x)
            chosen = torch.rand(len(x), 1, device=x.device) < self.shift_prob
            batch = (torch.where(chosen, shifted, x), y)
        return batch

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        workers = default_num_workers(dataset) if self.num_workers is None else self.num_workers
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=workers,
            persistent_workers=workers > 0,
        )


def default_num_workers(dataset: Dataset) -> int:
    """Worker processes worth starting for ``dataset`` on this machine.

    In-memory tensors need none: a worker only adds inter-process copies (measured on 2
    cores: one worker made the default 60-epoch run 1.6x slower). A dataset that does real
    work per item (reading, decoding files) gets one worker per spare core, at most 4.
    """
    if isinstance(dataset, TensorDataset):
        return 0
    return max(0, min(4, available_cores() - 1))


def random_shift(images: torch.Tensor, max_shift: int = 1) -> torch.Tensor:
    """Move each image (B, H, W) by up to ``max_shift`` pixels each way, filling with zeros."""
    count, height, width = images.shape
    padded = F.pad(images, (max_shift,) * 4)  # (B, H + 2s, W + 2s)
    offsets = torch.randint(0, 2 * max_shift + 1, (2, count, 1, 1), device=images.device)
    rows = offsets[0] + torch.arange(height, device=images.device).view(1, height, 1)
    cols = offsets[1] + torch.arange(width, device=images.device).view(1, 1, width)
    batch_index = torch.arange(count, device=images.device).view(count, 1, 1)
    return padded[batch_index, rows, cols]
