"""Batches: in-memory datasets fetched a batch at a time, and a training loader that can
resume in the middle of an epoch, batch for batch, through public torch and Lightning APIs."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset


class InMemoryDataset(TensorDataset):
    """torch's TensorDataset, indexed a whole batch at a time (``__getitems__``, which torch's
    DataLoader asks first): one tensor index per batch instead of one call per sample."""

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, ...]:
        index = torch.as_tensor(indices, dtype=torch.long)
        return tuple(tensor[index] for tensor in self.tensors)


def keep_batch(batch: Any) -> Any:
    """The collate of an ``InMemoryDataset``: its batch is stacked already."""
    return batch


class EpochSampler(DistributedSampler):
    """torch's DistributedSampler (a shuffle seeded by seed and epoch, one shard per DDP
    process, the same number of samples on each) that can start an epoch part-way.

    Lightning leaves a DistributedSampler in place and calls its ``set_epoch``; the order
    depends on nothing but (seed, epoch), so a resumed run sees the epoch it left. With one
    process it is an ordinary seeded shuffle."""

    def __init__(self, size: int, shuffle: bool, seed: int, replicas: int = 1, rank: int = 0):
        indices = cast(Dataset, range(size))  # it needs only the length
        super().__init__(indices, num_replicas=replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.skip = 0  # samples of this epoch's shard already trained (a resume)

    def __iter__(self) -> Iterator[int]:
        skip, self.skip = self.skip, 0
        return itertools.islice(super().__iter__(), skip, None)


class ResumableLoader(DataLoader):
    """torch's DataLoader that counts the batches it has handed to the training loop this
    epoch: a checkpoint written between two steps records it (data module state), and the
    resumed run skips that many batches of the same order."""

    batches_done = 0

    # Lightning's interface of a resumable loader: without it, a resume mid-epoch warns that
    # the loader is not resumable. (Lightning restores it only where it makes the loader after
    # the restore; the data module carries the same count for the other case: datamodule.py.)
    def state_dict(self) -> dict[str, int]:
        return {"batches_done": self.batches_done}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        if isinstance(self.sampler, EpochSampler):
            self.sampler.skip = state_dict["batches_done"] * (self.batch_size or 1)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator over torch's
        skip = self.sampler.skip if isinstance(self.sampler, EpochSampler) else 0
        self.batches_done = skip // (self.batch_size or 1)
        for batch in super().__iter__():
            self.batches_done += 1
            yield batch
