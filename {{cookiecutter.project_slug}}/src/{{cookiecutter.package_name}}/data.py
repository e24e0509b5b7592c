"""The data: splits, training-split statistics, loaders and augmentation for any source.

Sources (see data_files.py): scikit-learn's bundled 8x8 digits (the default, no download),
an .npz or .csv file of features, or a folder of images in class subfolders. For another
source, make ``read_data`` return a ``DataSource``: splitting, statistics, the network's
input shape and class count, the class names and the exports' preprocessing follow from it.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

from .data_files import DataError, DataSource, read_data
from .images import ColorMode
from .resumable_loader import ResumableDataLoader, epoch_batches_done
from .runtime import available_cores

DEFAULT_SHIFT_PROB = 0.3  # images only: share of training images shifted by one pixel


def split_indices(
    labels: np.ndarray,
    val_fraction: float,
    test_fraction: float,
    seed: int,
    class_names: list[str] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified, seeded train/val/test indices: the same split on every run and rank.

    Raises DataError unless every class has at least one sample in every split: a class
    missing from validation or test would be scored on nothing, one missing from training
    could never be learnt."""
    if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
        raise DataError(
            f"data.val_fraction={val_fraction} and data.test_fraction={test_fraction} must each "
            "be in (0, 1) and sum to less than 1, e.g. 0.15 and 0.15."
        )
    # Imported here: scikit-learn costs ~0.1 s of start-up that `train.py --help` need not pay.
    from sklearn.model_selection import train_test_split

    indices = np.arange(len(labels))
    try:
        rest, test = train_test_split(
            indices, test_size=test_fraction, stratify=labels, random_state=seed
        )
        train, val = train_test_split(
            rest,
            test_size=val_fraction / (1 - test_fraction),
            stratify=labels[rest],
            random_state=seed,
        )
    except ValueError:  # a class too small for sklearn's stratification: named below
        train = val = test = np.array([], dtype=np.int64)
    counts = np.bincount(labels, minlength=int(labels.max()) + 1)
    for split in (train, val, test):
        missing = np.flatnonzero(np.bincount(labels[split], minlength=len(counts)) == 0)
        if len(missing):
            smallest = int(missing[np.argmin(counts[missing])])
            name = class_names[smallest] if class_names else str(smallest)
            raise DataError(
                f"class {name!r} has {counts[smallest]} samples, too few to appear in each of "
                f"train, validation and test ({len(labels)} samples, val_fraction "
                f"{val_fraction}, test_fraction {test_fraction}): add samples of it, remove "
                "it, or raise data.val_fraction / data.test_fraction."
            )
    return np.sort(train), np.sort(val), np.sort(test)


def validation_fold(
    train: np.ndarray, val: np.ndarray, labels: np.ndarray, fold: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The (train, val) indices of cross-validation fold ``fold``; the test split never moves.

    Fold 0 is the validation split itself, so a fold-0 run is the plain run (what best.yaml
    retrains). Fold k > 0 holds out the k-th of the training split's disjoint, class-balanced
    parts of the validation split's size, and trains on the rest plus the validation split.
    (scikit-learn's KFold would re-cut the validation split too; fold 0 must stay the run's.)
    """
    folds = max_folds(len(train), len(val))
    if not 0 <= fold < folds:
        raise DataError(
            f"data.val_fold={fold}: with {len(train)} training and {len(val)} validation "
            f"samples there are {folds} folds of the validation split's size: use 0 to "
            f"{folds - 1}, or lower data.val_fraction for more folds."
        )
    if fold == 0:
        return train, val
    order = np.random.default_rng(seed).permutation(train)
    # Interleave the classes (each sample keyed by its rank within its class, scaled by the
    # class's count): consecutive parts of `order` then keep the classes' proportions.
    ranks = np.zeros(len(order))
    for label in np.unique(labels[order]):
        members = np.flatnonzero(labels[order] == label)
        ranks[members] = (np.arange(len(members)) + 0.5) / len(members)
    order = order[np.argsort(ranks, kind="stable")]
    held = order[(fold - 1) * len(val) : fold * len(val)]
    rest = np.setdiff1d(train, held)
    return np.sort(np.concatenate([rest, val])), np.sort(held)


def max_folds(train_size: int, val_size: int) -> int:
    """Cross-validation folds of the validation split's size: itself, and as many disjoint
    parts of the training split as fit (5 with the default fractions)."""
    return 1 + train_size // max(val_size, 1)


class ClassificationDataModule(L.LightningDataModule):
    """The project's data: a ``DataSource`` split, standardised and batched."""

    def __init__(
        self,
        path: str | None = None,
        batch_size: int = 64,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        split_seed: int = 0,
        num_workers: int | None = None,
        shift_prob: float | None = None,
        image_size: int | tuple[int, int] | None = None,
        color_mode: ColorMode | None = None,
        label_column: int | str | None = None,
        val_fold: int = 0,
    ) -> None:
        """
        Args:
            path: an .npz or .csv file of features and labels, or a folder of images with
                one subfolder per class (see data_files.py); None for the built-in digits.
            batch_size: samples per batch (per process under DDP).
            val_fraction: share of samples held out for validation and checkpoint choice.
            test_fraction: share of samples held out for the final test.
            split_seed: seed of the split, independent of the training seed.
            num_workers: loader worker processes; None picks them from the dataset and the
                available cores (see ``default_num_workers``).
            shift_prob: share of training images shifted by up to one pixel (augmentation,
                training batches only); None: 0.3 for images, 0 for flat features.
            image_size: image folders: every image is resized to this (an int or [height,
                width]); None: the size of the first image.
            color_mode: image folders: L (grayscale) or RGB; None: the first image's.
            label_column: .csv files: the label column, by 0-based index or header name;
                None: the last column. (int first: `--data.label_column 2` is an index.)
            val_fold: 0: validate on the validation split above; k > 0: on the k-th part of
                the training split of the same size, training on the rest (k-fold
                cross-validation, `python sweep.py --folds K`). The test split never moves.
        """
        super().__init__()
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.path = path
        self.image_size = image_size
        self.color_mode = color_mode
        self.label_column = label_column
        self._train_loader_state: dict[str, Any] | None = None
        # Read and split now, while the CLI builds its objects: a bad file stops the run
        # before any training, with a DataError that names it.
        images = len(self.input_shape) == 3
        if shift_prob is not None and shift_prob > 0 and not images:
            raise DataError(
                f"data.shift_prob={shift_prob} shifts images, but {path} has flat samples of "
                f"shape {self.input_shape}: set --data.shift_prob 0."
            )
        self.shift_prob = (
            (DEFAULT_SHIFT_PROB if images else 0.0) if shift_prob is None else shift_prob
        )
        try:
            self.train_idx, self.val_idx, self.test_idx = split_indices(
                self._source.labels, val_fraction, test_fraction, split_seed, self.class_names
            )
            self.train_idx, self.val_idx = validation_fold(
                self.train_idx, self.val_idx, self._source.labels, val_fold, split_seed
            )
        except DataError as error:  # name the data it is about
            raise DataError(f"{path or 'the built-in digits'}: {error}") from None

    @cached_property
    def _source(self) -> DataSource:
        return read_data(self.path, self.image_size, self.color_mode, self.label_column)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One sample's shape: (F,) for features, (C, H, W) for images."""
        return self._source.input_shape

    @property
    def num_classes(self) -> int:
        return len(self._source.class_names)

    @property
    def class_names(self) -> list[str]:
        return list(self._source.class_names)

    @property
    def preprocessing(self) -> dict[str, Any]:
        """How raw inputs were read (image colour mode, size, scaling), for the exports."""
        return dict(self._source.preprocessing)

    def example_file(self) -> str | None:
        """A file of the test split that predict.py can read (image folders only)."""
        files = self._source.files
        return files[self.test_idx[0]] if files else None

    def split_arrays(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """The (features (N, *input_shape) float32, labels (N,) int64) of "train", "val" or
        "test", as read: for models outside Lightning (baselines.py), on the same split."""
        return self._source.features[self._split(split)], self.split_labels(split)

    def split_labels(self, split: str) -> np.ndarray:
        """The labels (N,) of a split, without copying its features."""
        return self._source.labels[self._split(split)]

    def _split(self, split: str) -> np.ndarray:
        splits = {"train": self.train_idx, "val": self.val_idx, "test": self.test_idx}
        if split not in splits:
            raise ValueError(f"split {split!r}: expected one of {', '.join(splits)}")
        return splits[split]

    def input_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of the training split only (never val/test): per feature for flat
        samples, per channel for images."""
        train = torch.from_numpy(self._source.features[self.train_idx])
        dims = [0, *range(2, train.ndim)]  # every dimension but the feature / channel one
        return train.mean(dim=dims), train.std(dim=dims)

    def class_priors(self) -> torch.Tensor:
        """Class frequencies in the training split."""
        counts = np.bincount(self._source.labels[self.train_idx], minlength=self.num_classes)
        return torch.from_numpy(counts / counts.sum()).float()

    def setup(self, stage: str | None = None) -> None:
        features, labels = (
            torch.from_numpy(a) for a in (self._source.features, self._source.labels)
        )
        self.train_set, self.val_set, self.test_set = (
            InMemoryDataset(features[idx], labels[idx])
            for idx in (self.train_idx, self.val_idx, self.test_idx)
        )

    def train_dataloader(self) -> DataLoader:
        resume, self._train_loader_state = self._train_loader_state, None
        return self._loader(self.train_set, shuffle=True, resume_from=resume)

    def state_dict(self) -> dict[str, Any]:
        """Saved in checkpoints: where the training loader is in its epoch.

        (The loader's own state_dict is saved by Lightning too, but Lightning gives it back
        only to a loader made after the restore, and a module whose optimizer schedule asks
        for trainer.estimated_stepping_batches has its loader made before.)"""
        trainer = self.trainer
        loader = trainer.train_dataloader if trainer is not None else None
        # After an epoch's last batch the next epoch starts afresh.
        if not isinstance(loader, ResumableDataLoader) or epoch_batches_done(trainer):
            return {}
        return {"train_loader": loader.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restored before the training loader is made: it resumes where it was."""
        self._train_loader_state = state_dict.get("train_loader")

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
            x, y = batch  # x: (B, C, H, W)
            shifted = random_shift(x)
            chosen = torch.rand(len(x), 1, 1, 1, device=x.device) < self.shift_prob
            batch = (torch.where(chosen, shifted, x), y)
        return batch

    def _loader(
        self, dataset: Dataset, shuffle: bool, resume_from: dict[str, Any] | None = None
    ) -> DataLoader:
        workers = default_num_workers(dataset) if self.num_workers is None else self.num_workers
        options: dict[str, Any] = dict(
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=workers,
            persistent_workers=workers > 0,
            collate_fn=batch_collate(dataset),
        )
        if shuffle:  # training: resumable in the middle of an epoch, batch for batch
            return ResumableDataLoader(dataset, resume_from=resume_from, **options)
        return DataLoader(dataset, **options)


class InMemoryDataset(TensorDataset):
    """torch's TensorDataset, fetched a whole batch at a time.

    A DataLoader asks ``__getitems__`` for a batch's indices at once (torch >= 2.0): one
    tensor index per batch instead of a ``__getitem__`` call per sample and a collate that
    stacks them (an epoch of the digits' 1257 training samples: 6.2 ms against 1.0 ms on
    one core). Samplers, DDP's DistributedSampler and loader workers are unchanged, so the
    batches are the same as a TensorDataset's. Load it with ``collate_fn=keep_batch``
    (``batch_collate`` picks it): the default collate would stack a batch again.
    """

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        index = torch.as_tensor(indices, dtype=torch.long)
        return tuple(tensor[index] for tensor in self.tensors)


def keep_batch(batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The collate of an ``InMemoryDataset``: its batch is already stacked. (A module-level
    function, not a lambda, so loader workers can unpickle it.)"""
    return batch


def batch_collate(dataset: Dataset) -> Any:
    """The collate_fn a DataLoader needs for ``dataset``: None (torch's default) for any
    dataset that yields single samples."""
    return keep_batch if isinstance(dataset, InMemoryDataset) else None


def default_num_workers(dataset: Dataset) -> int:
    """Worker processes worth starting for ``dataset`` on this machine.

    In-memory tensors need none: a worker only adds inter-process copies (measured on 2
    cores: one worker made the default 60-epoch run 1.6x slower). A dataset that does real
    work per item (reading, decoding files) gets one worker per spare core, at most 4.
    """
    if isinstance(dataset, TensorDataset):
        return 0
    return max(0, min(4, available_cores() - 1))


def stack_dataset(dataset: Dataset, batch_size: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """All of a dataset's (inputs, labels) as two tensors, whatever Dataset class it is."""
    loader = DataLoader(dataset, batch_size, shuffle=False, collate_fn=batch_collate(dataset))
    batches = list(loader)
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])


def random_shift(images: torch.Tensor, max_shift: int = 1) -> torch.Tensor:
    """Move each image (B, C, H, W) by up to ``max_shift`` pixels each way, all its channels
    alike, filling with zeros."""
    count, _, height, width = images.shape
    padded = F.pad(images, (max_shift,) * 4).permute(0, 2, 3, 1)  # (B, H + 2s, W + 2s, C)
    offsets = torch.randint(0, 2 * max_shift + 1, (2, count, 1, 1), device=images.device)
    rows = offsets[0] + torch.arange(height, device=images.device).view(1, height, 1)
    cols = offsets[1] + torch.arange(width, device=images.device).view(1, 1, width)
    batch_index = torch.arange(count, device=images.device).view(count, 1, 1)
    return padded[batch_index, rows, cols].permute(0, 3, 1, 2)  # (B, C, H, W)
