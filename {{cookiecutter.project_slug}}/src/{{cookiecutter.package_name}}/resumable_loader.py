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

import itertools
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader


class ResumableDataLoader(DataLoader):
    """torch's DataLoader whose place in the epoch is saved in checkpoints.

    Its state: the random state the epoch's iterator was made from (the shuffle order and
    the workers' seeds derive from it) and the number of batches trained. On resume the
    epoch's iterator is made again from that random state, without disturbing the restored
    one, and skips the trained batches by their indices, without loading them. Every
    argument, sampler (DistributedSampler under DDP too) and worker setting is torch's.
    """

    def __init__(self, *args: Any, resume_from: dict[str, Any] | None = None, **kwargs: Any):
        """``resume_from``: a ``state_dict()`` to go on from (a constructor argument, so
        that it survives Lightning re-creating the loader with a DistributedSampler)."""
        super().__init__(*args, **kwargs)
        self._resume_from = resume_from
        self._yielded = 0
        self._skip = 0
        self._epoch_random_state: torch.Tensor | None = None

    def state_dict(self) -> dict[str, Any]:
        # Lightning fetches no batch ahead from a loader with a length: every batch handed
        # out has been trained when a checkpoint is written (tests/test_interruption.py
        # checks the outcome, bit-identical weights after a resume).
        return {"random_state": self._epoch_random_state, "batches_trained": self._yielded}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_from = state_dict

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume_from = self._resume_from, None
        if resume is None or resume.get("random_state") is None:
            self._epoch_random_state = self._random_state()
            self._skip = 0
            batches = super().__iter__()
        else:
            restored = self._random_state()
            self._set_random_state(resume["random_state"])
            self._epoch_random_state = resume["random_state"]
            self._skip = int(resume["batches_trained"])
            try:
                batches = super().__iter__()  # draws the epoch's seeds, skips trained batches
            finally:
                self._set_random_state(restored)
        self._yielded = self._skip
        return self._count(batches)

    def _count(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            self._yielded += 1
            yield batch

    @property
    def _index_sampler(self) -> Any:
        # torch's iterators take the batches' indices from here, once per epoch.
        return _SkipFirst(super()._index_sampler, self)

    def _random_state(self) -> torch.Tensor:
        generator = self.generator
        return generator.get_state() if generator is not None else torch.get_rng_state()

    def _set_random_state(self, state: torch.Tensor) -> None:
        generator = self.generator
        if generator is not None:
            generator.set_state(state)
        else:
            torch.set_rng_state(state)


class _SkipFirst:
    """A sampler of batch indices that drops the loader's ``_skip`` first batches at the
    start of an iteration. Its ``__iter__`` is eager: the shuffle is drawn when the epoch's
    iterator is made, from the random state the loader saves."""

    def __init__(self, sampler: Any, loader: ResumableDataLoader) -> None:
        self.sampler = sampler
        self.loader = loader

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[Any]:
        skip, self.loader._skip = self.loader._skip, 0
        indices = iter(self.sampler)
        for _ in range(skip):
            next(indices, None)
        # torch's RandomSampler draws its shuffle at its first batch, whenever the loop asks
        # for it: drawn here, the shuffle depends only on the random state saved above.
        first = next(indices, None)
        return indices if first is None else itertools.chain([first], indices)
