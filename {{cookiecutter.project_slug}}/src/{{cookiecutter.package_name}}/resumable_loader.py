"""A training DataLoader that can resume in the middle of an epoch, batch for batch.

A run stopped by Ctrl-C or SIGTERM saves last.ckpt between two steps of an epoch. Lightning
stores the state of a loader that has ``state_dict``/``load_state_dict`` in checkpoints and
gives it back on resume, before the epoch's iterator is made; a plain DataLoader would
restart the epoch with another shuffle (drawn from the random state of the checkpoint, not
of the epoch's start) and train some samples twice and others never.

Written here rather than taken from torchdata's StatefulDataLoader: that one is a fork of
torch's DataLoader iterators (as of torch 2.6, in torchdata 0.11, its last release), and
it draws a resumed epoch's shuffle from its own saved sampler state, while this keeps
torch's DataLoader, samplers and workers as they are and only replays the epoch's start.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader


def epoch_batches_done(trainer: Any) -> bool:
    """The running epoch's last training batch (all of them, or trainer.limit_train_batches)
    has been fetched: a checkpoint from here on has nothing of this epoch left to replay."""
    return trainer.fit_loop.epoch_loop.batch_progress.is_last_batch


class ResumableDataLoader(DataLoader):
    """torch's DataLoader whose place in the epoch is saved in checkpoints.

    An epoch draws from the global random state twice: when its iterator is made (the
    workers' base seed) and when its first batch is asked for (a RandomSampler's shuffle;
    Lightning makes the first epoch's iterator before it calls ``set_epoch``, so this
    draw must stay where torch makes it). Its state: both random states and the number of
    batches trained. On resume both draws are made again from them, without disturbing the
    restored random state, and the trained batches are skipped by their indices, without
    loading them. Every argument, sampler (DistributedSampler under DDP too) and worker
    setting is torch's.
    """

    def __init__(self, *args: Any, resume_from: dict[str, Any] | None = None, **kwargs: Any):
        """``resume_from``: a ``state_dict()`` to go on from (a constructor argument, so
        that it survives Lightning re-creating the loader with a DistributedSampler)."""
        super().__init__(*args, **kwargs)
        self._resume_from = resume_from
        self._yielded = 0
        self._iter_random_state: torch.Tensor | None = None
        self._first_random_state: torch.Tensor | None = None
        self._resume_first: tuple[torch.Tensor, int] | None = None

    def state_dict(self) -> dict[str, Any]:
        # Lightning fetches no batch ahead from a loader with a length: every batch handed
        # out has been trained when a checkpoint is written (tests/test_interruption.py
        # checks the outcome, bit-identical weights after a resume).
        return {
            "iter_random_state": self._iter_random_state,
            "first_random_state": self._first_random_state,
            "batches_trained": self._yielded,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_from = state_dict

    # A generator around DataLoader's own iterator (Lightning takes any iterator).
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        resume, self._resume_from = self._resume_from, None
        if resume is None or resume.get("first_random_state") is None:
            self._iter_random_state = self._random_state()
            self._resume_first = None
            self._yielded = 0
            return self._count(super().__iter__())
        restored = self._random_state()
        self._iter_random_state = resume["iter_random_state"]
        self._resume_first = (resume["first_random_state"], int(resume["batches_trained"]))
        self._yielded = int(resume["batches_trained"])
        self._set_random_state(self._iter_random_state)
        try:
            batches = super().__iter__()
        finally:
            self._set_random_state(restored)
        return self._count(batches)

    def _count(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            self._yielded += 1
            yield batch

    @property
    def _index_sampler(self) -> Any:
        # torch's iterators take the batches' indices from here, once per epoch.
        return _ResumableIndices(super()._index_sampler, self)

    def _random_state(self) -> torch.Tensor:
        generator = self.generator
        return generator.get_state() if generator is not None else torch.get_rng_state()

    def _set_random_state(self, state: torch.Tensor) -> None:
        generator = self.generator
        if generator is not None:
            generator.set_state(state)
        else:
            torch.set_rng_state(state)


class _ResumableIndices:
    """The batches' indices of an epoch: records the random state at the first batch, and
    on resume draws the shuffle from the saved one and drops the trained batches."""

    def __init__(self, sampler: Any, loader: ResumableDataLoader) -> None:
        self.sampler = sampler
        self.loader = loader

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[Any]:
        resume, self.loader._resume_first = self.loader._resume_first, None
        return self._indices(resume)

    def _indices(self, resume: tuple[torch.Tensor, int] | None) -> Iterator[Any]:
        # A generator: this runs when the first batch is asked for, as torch's sampler does.
        loader = self.loader
        if resume is None:
            loader._first_random_state = loader._random_state()
            yield from self.sampler
            return
        state, skip = resume
        loader._first_random_state = state
        restored = loader._random_state()
        loader._set_random_state(state)
        try:
            indices = iter(self.sampler)
            for _ in range(skip):
                next(indices, None)
            first = next(indices, None)  # the sampler's draws happen here
        finally:
            loader._set_random_state(restored)
        if first is not None:
            yield first
            yield from indices
