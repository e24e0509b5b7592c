"""The data module: splits, folds, training-split statistics, batches, augmentation, and a
training order that resumes mid-epoch."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from {{ cookiecutter.package_name }}.data.datamodule import DataModule, random_shift
from {{ cookiecutter.package_name }}.data.loading import (
    EpochSampler,
    InMemoryDataset,
    ResumableLoader,
    keep_batch,
)
from {{ cookiecutter.package_name }}.data.sources import DataError, read_data

from .conftest import fake_trainer


def builtin_digits():
    return read_data(None)


@pytest.fixture(scope="module")
def datamodule() -> DataModule:
    dm = DataModule(batch_size=32, num_workers=0)
    dm.setup("fit")
    return dm


def test_splits_are_disjoint_and_cover_every_sample(datamodule: DataModule) -> None:
    train, val, test = (
        set(idx.tolist()) for idx in (datamodule.train_idx, datamodule.val_idx, datamodule.test_idx)
    )
    assert not (train & val or train & test or val & test)
    assert len(train | val | test) == len(builtin_digits().targets)


def test_split_is_deterministic_and_follows_its_own_seed(
    datamodule: DataModule,
) -> None:
    again = DataModule(num_workers=0)
    assert np.array_equal(again.test_idx, datamodule.test_idx)
    assert np.array_equal(again.val_idx, datamodule.val_idx)
    other = DataModule(num_workers=0, split_seed=1)
    assert not np.array_equal(other.test_idx, datamodule.test_idx)


def test_split_is_stratified(datamodule: DataModule) -> None:
    labels = builtin_digits().targets
    overall = np.bincount(labels) / len(labels)
    for idx in (datamodule.train_idx, datamodule.val_idx, datamodule.test_idx):
        share = np.bincount(labels[idx], minlength=10) / len(idx)
        assert np.abs(share - overall).max() < 0.02
{%- if cookiecutter.tuning == "yes" %}


def test_cross_validation_folds_are_disjoint_balanced_and_leave_the_test_split_alone(
    datamodule: DataModule,
) -> None:
    """Fold 0 is the run's own split (what best.yaml retrains); folds 1..4 hold out other
    parts of the validation split's size; together they never see the test split."""
    labels = builtin_digits().targets
    pool = np.union1d(datamodule.train_idx, datamodule.val_idx)
    folds = [DataModule(num_workers=0, val_fold=k) for k in range(5)]
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
    again = DataModule(num_workers=0, val_fold=3)
    assert np.array_equal(again.val_idx, folds[3].val_idx)
    assert not torch.allclose(folds[3].input_stats()[0], datamodule.input_stats()[0])


def test_a_fold_beyond_the_training_split_is_refused_with_the_range() -> None:
    with pytest.raises(DataError, match=r"data.val_fold=5: .* use 0 to 4, or lower"):
        DataModule(num_workers=0, val_fold=5)
{%- endif %}


def test_statistics_come_from_the_training_split_only(datamodule: DataModule) -> None:
    features = torch.from_numpy(builtin_digits().features)  # (N, 1, 8, 8)
    mean, std = datamodule.input_stats()
    train = features[datamodule.train_idx]
    assert mean.shape == std.shape == (1,), "images: one mean and std per channel"
    assert torch.allclose(mean, train.mean().view(1))
    assert torch.allclose(std, train.std().view(1))
    assert not torch.allclose(mean, features.mean().view(1)), "stats must not see val/test data"


def test_batches_are_float32_inputs_and_int64_labels_of_shape_b(
    datamodule: DataModule,
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
    with pytest.raises(DataError, match="val_fraction"):
        DataModule(val_fraction=0.6, test_fraction=0.5)


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


def test_augmentation_touches_training_batches_only(datamodule: DataModule) -> None:
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


def test_in_memory_data_is_loaded_without_worker_processes(datamodule: DataModule) -> None:
    assert datamodule.train_dataloader().num_workers == 0
    other = DataModule(num_workers=2)
    other.setup("fit")
    assert other.val_dataloader().num_workers == 2


@pytest.mark.parametrize("workers", [0, 1])
def test_batch_indexed_loading_gives_the_batches_of_a_tensor_dataset(
    datamodule: DataModule, workers: int
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
            dataset,
            64,
            shuffle=True,
            num_workers=workers,
            collate_fn=keep_batch if dataset is train else None,
        )
        loaders.append(list(loader))
    ours, torchs = loaders
    assert len(ours) == len(torchs) == -(-len(train) // 64)
    for (x, y), (x_ref, y_ref) in zip(ours, torchs, strict=True):
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref)
    assert ours[0][0].shape == (64, 1, 8, 8) and ours[-1][0].shape[0] == (len(train) % 64 or 64)


def test_the_data_module_says_what_the_network_and_the_exports_need(
    datamodule: DataModule,
) -> None:
    assert datamodule.input_shape == (1, 8, 8)
    assert datamodule.num_outputs == 10
    assert datamodule.output_names == [str(digit) for digit in range(10)]
    assert datamodule.preprocessing == {
        "kind": "image",
        "color_mode": "L",
        "size": [8, 8],
        "invert": True,
        "scale": 16.0,
    }
    assert datamodule.shift_prob == 0.3, "images are augmented by default"


def test_the_epoch_order_depends_on_the_seed_and_the_epoch_only() -> None:
    orders: dict[tuple[int, int], list[list[int]]] = {}
    for seed, epoch in ((0, 0), (0, 1), (100, 0), (0, 0)):
        sampler = EpochSampler(100, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        torch.manual_seed(epoch + 123)  # the global random state plays no part
        orders.setdefault((seed, epoch), []).append(list(sampler))
    assert orders[(0, 0)][0] == orders[(0, 0)][1], "the same seed and epoch: the same order"
    assert len({tuple(o[0]) for o in orders.values()}) == 3
    assert sorted(orders[(0, 1)][0]) == list(range(100))


@pytest.mark.parametrize("size", [100, 101])
def test_ddp_shards_are_disjoint_and_of_one_length(size: int) -> None:
    """Every process gets as many samples (or DDP hangs at the end of an epoch), and
    together they cover the training split (a short one is padded with repeats)."""
    shards = [list(EpochSampler(size, True, seed=3, replicas=2, rank=rank)) for rank in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == -(-size // 2)
    assert set(shards[0]) | set(shards[1]) == set(range(size))
    if size % 2 == 0:
        assert not set(shards[0]) & set(shards[1])


def test_a_resumed_epoch_yields_the_batches_it_had_left() -> None:
    data = InMemoryDataset(torch.arange(50.0)[:, None], torch.arange(50))

    def loader(skip_batches: int = 0) -> ResumableLoader:
        sampler = EpochSampler(50, shuffle=True, seed=5)
        sampler.set_epoch(2)
        sampler.skip = skip_batches * 8
        return ResumableLoader(data, sampler=sampler, batch_size=8, collate_fn=keep_batch)

    whole = loader()
    batches = [y.tolist() for _, y in whole]
    assert whole.batches_done == len(batches) == 7
    resumed = loader(skip_batches=3)
    iterator = iter(resumed)
    first = next(iterator)
    assert resumed.batches_done == 4, "counted from the batches trained before the stop"
    assert [first[1].tolist()] + [y.tolist() for _, y in iterator] == batches[3:]
    assert [y.tolist() for _, y in resumed] == batches, "the next pass starts afresh"
