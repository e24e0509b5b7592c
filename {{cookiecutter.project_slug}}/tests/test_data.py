import numpy as np
import pytest
import torch
from {{ cookiecutter.package_name }}.data_files import DataError, builtin_digits
from torch.utils.data import DataLoader, Dataset, TensorDataset

from {{ cookiecutter.package_name }}.data import (
    ClassificationDataModule,
    InMemoryDataset,
    batch_collate,
    default_num_workers,
    random_shift,
    stack_dataset,
)
from {{ cookiecutter.package_name }}.runtime import available_cores

from .conftest import fake_trainer


@pytest.fixture(scope="module")
def datamodule() -> ClassificationDataModule:
    dm = ClassificationDataModule(batch_size=32, num_workers=0)
    dm.setup("fit")
    return dm


def test_splits_are_disjoint_and_cover_every_sample(datamodule: ClassificationDataModule) -> None:
    train, val, test = (
        set(idx.tolist()) for idx in (datamodule.train_idx, datamodule.val_idx, datamodule.test_idx)
    )
    assert not (train & val or train & test or val & test)
    assert len(train | val | test) == len(builtin_digits().labels)


def test_split_is_deterministic_and_follows_its_own_seed(
    datamodule: ClassificationDataModule,
) -> None:
    again = ClassificationDataModule(num_workers=0)
    assert np.array_equal(again.test_idx, datamodule.test_idx)
    assert np.array_equal(again.val_idx, datamodule.val_idx)
    other = ClassificationDataModule(num_workers=0, split_seed=1)
    assert not np.array_equal(other.test_idx, datamodule.test_idx)


def test_split_is_stratified(datamodule: ClassificationDataModule) -> None:
    labels = builtin_digits().labels
    overall = np.bincount(labels) / len(labels)
    for idx in (datamodule.train_idx, datamodule.val_idx, datamodule.test_idx):
        share = np.bincount(labels[idx], minlength=10) / len(idx)
        assert np.abs(share - overall).max() < 0.02


def test_cross_validation_folds_are_disjoint_balanced_and_leave_the_test_split_alone(
    datamodule: ClassificationDataModule,
) -> None:
    """Fold 0 is the run's own split (what best.yaml retrains); folds 1..4 hold out other
    parts of the validation split's size; together they never see the test split."""
    labels = builtin_digits().labels
    pool = np.union1d(datamodule.train_idx, datamodule.val_idx)
    folds = [ClassificationDataModule(num_workers=0, val_fold=k) for k in range(5)]
    assert np.array_equal(folds[0].train_idx, datamodule.train_idx)
    assert np.array_equal(folds[0].val_idx, datamodule.val_idx)
    held = [fold.val_idx for fold in folds]
    assert len(np.unique(np.concatenate(held))) == sum(map(len, held)), "folds overlap"
    overall = np.bincount(labels[pool]) / len(pool)
    for fold in folds:
        assert np.array_equal(fold.test_idx, datamodule.test_idx)
        assert len(fold.val_idx) == len(datamodule.val_idx)
        assert not np.intersect1d(fold.train_idx, fold.val_idx).size
        assert np.array_equal(np.union1d(fold.train_idx, fold.val_idx), pool)
        share = np.bincount(labels[fold.val_idx], minlength=10) / len(fold.val_idx)
        assert np.abs(share - overall).max() < 0.02  # class-balanced, like the split
    # The same fold on every run (and rank), and statistics from its own training part.
    again = ClassificationDataModule(num_workers=0, val_fold=3)
    assert np.array_equal(again.val_idx, folds[3].val_idx)
    assert not torch.allclose(folds[3].input_stats()[0], datamodule.input_stats()[0])


def test_a_fold_beyond_the_training_split_is_refused_with_the_range() -> None:
    with pytest.raises(DataError, match=r"data.val_fold=5: .* use 0 to 4, or lower"):
        ClassificationDataModule(num_workers=0, val_fold=5)


def test_statistics_come_from_the_training_split_only(datamodule: ClassificationDataModule) -> None:
    features = torch.from_numpy(builtin_digits().features)  # (N, 1, 8, 8)
    mean, std = datamodule.input_stats()
    train = features[datamodule.train_idx]
    assert mean.shape == std.shape == (1,), "images: one mean and std per channel"
    assert torch.allclose(mean, train.mean().view(1))
    assert torch.allclose(std, train.std().view(1))
    assert not torch.allclose(mean, features.mean().view(1)), "stats must not see val/test data"


def test_batches_are_float32_inputs_and_int64_labels_of_shape_b(
    datamodule: ClassificationDataModule,
) -> None:
    for loader in (
        datamodule.train_dataloader(),
        datamodule.val_dataloader(),
        datamodule.test_dataloader(),
    ):
        x, y = next(iter(loader))
        assert x.dtype == torch.float32 and x.shape == (32, 1, 8, 8)
        assert y.dtype == torch.int64 and y.shape == (32,)


def test_bad_fractions_are_refused() -> None:
    with pytest.raises(ValueError, match="val_fraction"):
        ClassificationDataModule(val_fraction=0.6, test_fraction=0.5)


def test_random_shift_moves_by_at_most_one_pixel_and_fills_with_zeros() -> None:
    torch.manual_seed(0)
    images = torch.zeros(200, 2, 8, 8)
    images[:, :, 4, 4] = 1.0
    shifted = random_shift(images)
    assert shifted.shape == images.shape
    assert torch.equal(shifted[:, 0], shifted[:, 1]), "every channel of an image moves alike"
    rows, cols = torch.nonzero(shifted[:, 0], as_tuple=True)[1:]
    assert len(rows) == 200, "one bright pixel per image, never lost or duplicated"
    assert rows.min() >= 3 and rows.max() <= 5 and cols.min() >= 3 and cols.max() <= 5
    assert len(set(zip(rows.tolist(), cols.tolist(), strict=True))) == 9, "all nine offsets occur"


def test_augmentation_touches_training_batches_only(datamodule: ClassificationDataModule) -> None:
    batch = next(iter(datamodule.val_dataloader()))
    datamodule.shift_prob = 1.0
    try:
        datamodule.trainer = fake_trainer(training=False)
        x, _ = datamodule.on_after_batch_transfer(batch, 0)
        assert torch.equal(x, batch[0])
        datamodule.trainer = fake_trainer(training=True)
        x, _ = datamodule.on_after_batch_transfer(batch, 0)
        assert not torch.equal(x, batch[0])
    finally:
        datamodule.trainer = None
        datamodule.shift_prob = 0.3


def test_worker_count_follows_the_dataset_and_the_cores() -> None:
    in_memory = InMemoryDataset(torch.zeros(4, 2), torch.zeros(4, dtype=torch.long))
    assert default_num_workers(in_memory) == 0, "in-memory: no workers"

    class FileLike(Dataset):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, index: int) -> int:
            return index

    assert default_num_workers(FileLike()) == max(0, min(4, available_cores() - 1))


@pytest.mark.parametrize("workers", [0, 1])
def test_batch_indexed_loading_gives_the_batches_of_a_tensor_dataset(
    datamodule: ClassificationDataModule, workers: int
) -> None:
    """One index per batch (InMemoryDataset.__getitems__), the same batches in the same
    order as torch's per-sample TensorDataset, with or without loader workers."""
    train = datamodule.train_set
    assert isinstance(train, InMemoryDataset)
    reference = TensorDataset(*train.tensors)
    loaders = []
    for dataset in (train, reference):
        torch.manual_seed(7)
        loader = DataLoader(
            dataset, 64, shuffle=True, num_workers=workers, collate_fn=batch_collate(dataset)
        )
        loaders.append(list(loader))
    ours, torchs = loaders
    assert len(ours) == len(torchs) == -(-len(train) // 64)
    for (x, y), (x_ref, y_ref) in zip(ours, torchs, strict=True):
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref)
    assert ours[0][0].shape == (64, 1, 8, 8) and ours[-1][0].shape[0] == (len(train) % 64 or 64)


def test_the_data_module_says_what_the_network_and_the_exports_need(
    datamodule: ClassificationDataModule,
) -> None:
    assert datamodule.input_shape == (1, 8, 8)
    assert datamodule.num_classes == 10
    assert datamodule.class_names == [str(digit) for digit in range(10)]
    assert datamodule.preprocessing == {
        "kind": "image",
        "color_mode": "L",
        "size": [8, 8],
        "invert": True,
        "scale": 16.0,
    }
    assert datamodule.shift_prob == 0.3, "images are augmented by default"


def test_any_dataset_stacks_into_inputs_and_labels(datamodule: ClassificationDataModule) -> None:
    class Plain(Dataset):  # not a TensorDataset: no .tensors to read
        def __len__(self) -> int:
            return 5

        def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
            return torch.full((1, 2, 2), float(index)), index

    x, y = stack_dataset(Plain(), batch_size=2)
    assert x.shape == (5, 1, 2, 2) and y.tolist() == [0, 1, 2, 3, 4]
    x, y = stack_dataset(datamodule.test_set)
    assert x.shape == (len(datamodule.test_idx), 1, 8, 8)
