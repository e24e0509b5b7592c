from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from {{ cookiecutter.package_name }}.data import (
    DigitsDataModule,
    default_num_workers,
    load_arrays,
    random_shift,
)
from {{ cookiecutter.package_name }}.runtime import available_cores


@pytest.fixture(scope="module")
def datamodule() -> DigitsDataModule:
    dm = DigitsDataModule(batch_size=32, num_workers=0)
    dm.setup("fit")
    return dm


def test_splits_are_disjoint_and_cover_every_sample(datamodule: DigitsDataModule) -> None:
    train, val, test = (
        set(idx.tolist()) for idx in (datamodule.train_idx, datamodule.val_idx, datamodule.test_idx)
    )
    assert not (train & val or train & test or val & test)
    assert len(train | val | test) == len(load_arrays()[1])


def test_split_is_deterministic_and_follows_its_own_seed(datamodule: DigitsDataModule) -> None:
    again = DigitsDataModule(num_workers=0)
    assert np.array_equal(again.test_idx, datamodule.test_idx)
    assert np.array_equal(again.val_idx, datamodule.val_idx)
    other = DigitsDataModule(num_workers=0, split_seed=1)
    assert not np.array_equal(other.test_idx, datamodule.test_idx)


def test_split_is_stratified(datamodule: DigitsDataModule) -> None:
    labels = load_arrays()[1]
    overall = np.bincount(labels) / len(labels)
    for idx in (datamodule.train_idx, datamodule.val_idx, datamodule.test_idx):
        share = np.bincount(labels[idx], minlength=10) / len(idx)
        assert np.abs(share - overall).max() < 0.02


def test_statistics_come_from_the_training_split_only(datamodule: DigitsDataModule) -> None:
    features = torch.from_numpy(load_arrays()[0])
    mean, std = datamodule.input_stats()
    assert torch.allclose(mean, features[datamodule.train_idx].mean(dim=0))
    assert torch.allclose(std, features[datamodule.train_idx].std(dim=0))
    assert not torch.allclose(mean, features.mean(dim=0)), "stats must not see val/test data"


def test_batches_are_float32_inputs_and_int64_labels_of_shape_b(
    datamodule: DigitsDataModule,
) -> None:
    for loader in (
        datamodule.train_dataloader(),
        datamodule.val_dataloader(),
        datamodule.test_dataloader(),
    ):
        x, y = next(iter(loader))
        assert x.dtype == torch.float32 and x.shape == (32, 64)
        assert y.dtype == torch.int64 and y.shape == (32,)


def test_bad_fractions_are_refused() -> None:
    with pytest.raises(ValueError, match="val_fraction"):
        DigitsDataModule(val_fraction=0.6, test_fraction=0.5)


def test_random_shift_moves_by_at_most_one_pixel_and_fills_with_zeros() -> None:
    torch.manual_seed(0)
    images = torch.zeros(200, 8, 8)
    images[:, 4, 4] = 1.0
    shifted = random_shift(images)
    assert shifted.shape == images.shape
    rows, cols = torch.nonzero(shifted, as_tuple=True)[1:]
    assert len(rows) == 200, "one bright pixel per image, never lost or duplicated"
    assert rows.min() >= 3 and rows.max() <= 5 and cols.min() >= 3 and cols.max() <= 5
    assert len(set(zip(rows.tolist(), cols.tolist(), strict=True))) == 9, "all nine offsets occur"


def test_augmentation_touches_training_batches_only(datamodule: DigitsDataModule) -> None:
    batch = next(iter(datamodule.val_dataloader()))
    datamodule.shift_prob = 1.0
    try:
        datamodule.trainer = SimpleNamespace(training=False)
        x, _ = datamodule.on_after_batch_transfer(batch, 0)
        assert torch.equal(x, batch[0])
        datamodule.trainer = SimpleNamespace(training=True)
        x, _ = datamodule.on_after_batch_transfer(batch, 0)
        assert not torch.equal(x, batch[0])
    finally:
        datamodule.trainer = None
        datamodule.shift_prob = 0.3


def test_worker_count_follows_the_dataset_and_the_cores() -> None:
    assert default_num_workers(TensorDataset(torch.zeros(4, 2))) == 0, "in-memory: no workers"

    class FileLike(Dataset):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, index: int) -> int:
            return index

    assert default_num_workers(FileLike()) == max(0, min(4, available_cores() - 1))
