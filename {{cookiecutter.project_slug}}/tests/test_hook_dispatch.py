"""Per-batch hooks a callback inherits unchanged are not called; the ones it defines are,
through Lightning's own dispatch, on a real fit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import pytest
from lightning.pytorch.callbacks import Callback, LambdaCallback
from lightning.pytorch.demos.boring_classes import BoringModel

from {{ cookiecutter.package_name }}.callbacks import GradientMonitor, RandomState
from {{ cookiecutter.package_name }}.hook_dispatch import PER_BATCH_HOOKS, skip_no_op_batch_hooks

from .conftest import build


class CountsBatches(Callback):
    """Implements two per-batch hooks and counts them; inherits the others."""

    def __init__(self) -> None:
        self.calls = {"on_train_batch_end": 0, "on_validation_batch_end": 0}

    def on_train_batch_end(self, *args: Any) -> None:
        self.calls["on_train_batch_end"] += 1

    def on_validation_batch_end(self, *args: Any) -> None:
        self.calls["on_validation_batch_end"] += 1


class CountsMore(CountsBatches):
    """A subclass: what its parent defines is its own too."""

    def on_before_backward(self, *args: Any) -> None:
        self.calls["on_before_backward"] = self.calls.get("on_before_backward", 0) + 1


@dataclass(frozen=True)
class FrozenCallback(Callback):
    """Takes no new attribute: every hook stays, as Lightning would call them anyway."""

    name: str = "frozen"


def test_a_callback_that_takes_no_new_attribute_is_left_as_it_is() -> None:
    frozen = FrozenCallback()
    assert skip_no_op_batch_hooks([frozen, RandomState()]) == 8  # RandomState's only
    assert all(callable(getattr(frozen, name)) for name in PER_BATCH_HOOKS)


@pytest.mark.slow
def test_the_project_cli_skips_them_in_the_runs_it_builds(tmp_path: Path) -> None:
    cli = build(tmp_path, "--trainer.max_epochs=1")
    callbacks: list[Callback] = cli.trainer.callbacks
    state = next(c for c in callbacks if isinstance(c, RandomState))
    guard = next(c for c in callbacks if isinstance(c, GradientMonitor))
    assert all(getattr(state, name) is None for name in PER_BATCH_HOOKS)
    assert callable(guard.on_before_backward) and guard.on_train_batch_start is None


def test_only_the_inherited_no_op_hooks_are_skipped() -> None:
    counts, more, guard, state = CountsBatches(), CountsMore(), GradientMonitor(), RandomState()
    lambdas = LambdaCallback(on_train_batch_start=lambda *args: None)
    skipped = skip_no_op_batch_hooks([counts, more, guard, state, lambdas])
    assert counts.on_train_batch_start is None and counts.on_before_zero_grad is None
    assert callable(counts.on_train_batch_end) and callable(counts.on_validation_batch_end)
    assert callable(more.on_before_backward) and callable(more.on_train_batch_end)
    assert callable(guard.on_before_backward) and callable(guard.on_before_optimizer_step)
    assert all(getattr(state, name) is None for name in PER_BATCH_HOOKS)
    assert callable(lambdas.on_train_batch_start)  # set on the object, not inherited
    assert all(callable(getattr(Callback, name)) for name in PER_BATCH_HOOKS)  # class intact
    expected = (8 - 2) + (8 - 3) + (8 - 2) + 8 + (8 - 1)
    assert skipped == expected


@pytest.mark.slow
def test_lightning_skips_them_and_still_calls_the_defined_ones(tmp_path: Path) -> None:
    """Lightning's dispatch skips what is not callable: a change there would fail here, not
    in a user's run."""
    counts = CountsBatches()
    assert skip_no_op_batch_hooks([counts]) == 6
    trainer = L.Trainer(
        max_steps=3,
        limit_val_batches=2,
        val_check_interval=3,
        callbacks=[counts],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(BoringModel())
    assert counts.calls == {"on_train_batch_end": 3, "on_validation_batch_end": 2 + 2}
