"""The guards of callbacks.py, each triggered for real on short CPU trainings."""

from __future__ import annotations

import csv
import logging
import random
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from {{ cookiecutter.package_name }}.data.datamodule import DataModule
from {{ cookiecutter.package_name }}.module import LitModel
from {{ cookiecutter.package_name }}.networks import MLP
from {{ cookiecutter.package_name }}.training.callbacks import (
    GradientMonitor,
    MemoryMonitor,
    NonFiniteError,
    RandomState,
    UnusedParameterError,
)

from .conftest import Run
from .networks import KINDS, make_net


def mlp(*hidden_sizes: int) -> MLP:
    return MLP(hidden_sizes=hidden_sizes)


CALLBACKS_LOGGER = "{{ cookiecutter.package_name }}.training.callbacks"


def fit(
    root: Path,
    epochs: int,
    module: LitModel | None = None,
    workers: int = 0,
    extra_callbacks: tuple[L.Callback, ...] = (),
    guards: tuple[L.Callback, ...] | None = None,
    ckpt_path: str | None = None,
    kind: str | None = None,
    **trainer_args,
) -> tuple[LitModel, L.Trainer]:
    """Seed, build and fit like train.py does, with a small model (one of networks.KINDS, or
    an MLP of width 64) and an every-epoch last.ckpt."""
    L.seed_everything(42, workers=True, verbose=False)
    module = module or LitModel(net=make_net(kind) if kind else mlp(64))
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=trainer_args.pop("logger", False),
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=10,
        default_root_dir=root,
        callbacks=[
            ModelCheckpoint(dirpath=root / "checkpoints", filename="last"),
            *(
                guards
                if guards is not None
                else (RandomState(), GradientMonitor(), MemoryMonitor())
            ),
            *extra_callbacks,
        ],
        **trainer_args,
    )
    datamodule = DataModule(num_workers=workers)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    return module, trainer


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    return all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


class StopAfterEpoch(L.Callback):
    """Ends fit after epoch ``last`` (0-based), as a crash or a time limit would."""

    def __init__(self, last: int) -> None:
        self.last = last

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.last:
            trainer.should_stop = True


# --- randomness -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_same_seed_gives_bit_identical_weights(tmp_path: Path, workers: int) -> None:
    first, _ = fit(tmp_path / "a", epochs=2, workers=workers)
    second, _ = fit(tmp_path / "b", epochs=2, workers=workers)
    assert same_weights(first, second)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
@pytest.mark.parametrize("kind", KINDS)
def test_resumed_run_ends_bit_identical_to_an_uninterrupted_one(tmp_path: Path, kind: str) -> None:
    short: dict[str, Any] = {"limit_train_batches": 5, "limit_val_batches": 2, "kind": kind}
    uninterrupted, _ = fit(tmp_path / "full", epochs=4, **short)

    fit(tmp_path / "part", epochs=4, extra_callbacks=(StopAfterEpoch(1),), **short)
    last = tmp_path / "part" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["epoch"] == 1
    resumed, trainer = fit(tmp_path / "part", epochs=4, ckpt_path=str(last), **short)
    assert trainer.current_epoch == 4
    assert same_weights(resumed, uninterrupted)
    if kind != "mlp":
        return
    # Without the saved RNG states the resumed run shuffles, drops out and augments differently.
    fit(tmp_path / "bare", epochs=4, extra_callbacks=(StopAfterEpoch(1),), guards=(), **short)
    bare, _ = fit(
        tmp_path / "bare",
        epochs=4,
        ckpt_path=str(tmp_path / "bare/checkpoints/last.ckpt"),
        guards=(),
        **short,
    )
    assert not same_weights(bare, uninterrupted)


def test_rng_states_round_trip_and_load_weights_only(tmp_path: Path) -> None:
    checkpoint: dict = {}
    RandomState().on_save_checkpoint(None, None, checkpoint)
    drawn = (random.random(), np.random.rand(), torch.rand(1))
    torch.save(checkpoint, tmp_path / "states.pt")
    loaded = torch.load(tmp_path / "states.pt", weights_only=True)
    RandomState().on_load_checkpoint(None, None, loaded)
    assert (random.random(), np.random.rand(), torch.rand(1)) == drawn


@pytest.mark.slow
def test_seed_is_recorded_in_hyperparameters_and_checkpoints(trained_run: Run) -> None:
    # The best checkpoint holds weights and hyper-parameters; last.ckpt all a resume needs.
    best = torch.load(trained_run.summary["paths"]["best_checkpoint"], weights_only=True)
    assert best["hyper_parameters"]["seed"] == 42
    last = torch.load(trained_run.summary["paths"]["last_checkpoint"], weights_only=True)
    assert {"python", "numpy", "torch"} <= last["rng_states"].keys()


# --- gradients ------------------------------------------------------------------------


class PlainListLayers(LitModel):
    """The classic bug: extra layers in a Python list are used but never registered."""

    def __init__(self) -> None:
        super().__init__(net=mlp(32))
        self.extra_layers = [nn.Linear(10, 10)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.extra_layers[0](self.model(x))


class UnusedBranch(LitModel):
    def __init__(self) -> None:
        super().__init__(net=mlp(32))
        self.auxiliary_head = nn.Linear(32, 10)  # registered, never called in forward


def guard_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == CALLBACKS_LOGGER]


@pytest.mark.parametrize(
    ("module_class", "named"),
    [(PlainListLayers, "extra_layers"), (UnusedBranch, "auxiliary_head.weight")],
)
def test_untrainable_parameters_are_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, module_class: type, named: str
) -> None:
    with caplog.at_level(logging.WARNING, logger=CALLBACKS_LOGGER):
        fit(tmp_path, epochs=1, module=module_class(), max_steps=2, limit_val_batches=0)
    messages = guard_messages(caplog)
    assert len(messages) == 1 and named in messages[0], messages

    with pytest.raises(UnusedParameterError, match=named):
        fit(
            tmp_path / "strict",
            epochs=1,
            module=module_class(),
            max_steps=2,
            limit_val_batches=0,
            guards=(GradientMonitor(on_unused="error"),),
        )


def test_default_model_triggers_no_guard(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=CALLBACKS_LOGGER):
        fit(tmp_path, epochs=1, module=LitModel(), max_steps=3, limit_val_batches=0)
    assert guard_messages(caplog) == []


class NaNAtStep(LitModel):
    def __init__(self, bad_step: int) -> None:
        super().__init__(net=mlp(32))
        self.bad_step = bad_step

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * float("nan") if self.global_step == self.bad_step else loss


def test_nan_loss_stops_the_run_naming_the_step_before_weights_change(tmp_path: Path) -> None:
    module = NaNAtStep(bad_step=3)
    with pytest.raises(NonFiniteError, match=r"loss is nan at global step 3 \(epoch 0\)"):
        fit(tmp_path, epochs=1, module=module, limit_val_batches=0)
    assert all(torch.isfinite(p).all() for p in module.parameters()), "the NaN step was not applied"


class InfGradientAtStep(LitModel):
    """A finite loss whose gradients overflow at one step, as exploding gradients do."""

    def __init__(self, bad_step: int) -> None:
        super().__init__(net=mlp(32))
        self.bad_step = bad_step

    def on_after_backward(self) -> None:
        if self.global_step == self.bad_step:
            grad = next(self.parameters()).grad
            assert grad is not None
            grad.fill_(float("inf"))


def test_inf_gradients_stop_the_run_at_the_step_when_checked_every_step(tmp_path: Path) -> None:
    module = InfGradientAtStep(bad_step=3)
    with pytest.raises(NonFiniteError, match=r"gradient norm is inf at global step 3 \(epoch 0\)"):
        fit(
            tmp_path,
            epochs=1,
            module=module,
            limit_val_batches=0,
            guards=(GradientMonitor(log_every_n_steps=1),),
        )
    assert all(torch.isfinite(p).all() for p in module.parameters()), "the inf step was not applied"


# Non-finite values are the point: torchmetrics drops a NaN from the epoch mean, warning.
@pytest.mark.filterwarnings("ignore:Encountered `nan` values in tensor")
def test_inf_gradients_between_checks_are_named_at_the_next_step(tmp_path: Path) -> None:
    # Default: gradients checked every 50 steps, the loss every step.
    with pytest.raises(NonFiniteError, match=r"global step 4 .* weights are already NaN/inf"):
        fit(tmp_path, epochs=1, module=InfGradientAtStep(bad_step=3), limit_val_batches=0)


# --- memory ---------------------------------------------------------------------------


class KeepsLossGraphs(LitModel):
    """The classic leak: a diagnostic loss stored with its graph, which is never freed."""

    def __init__(self) -> None:
        super().__init__(net=mlp(1024, 1024))
        self.history: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        x, y = batch
        # Never backwarded, so every activation it saved stays alive: use .item() instead.
        self.history.append(torch.nn.functional.cross_entropy(self(x), y))
        return loss


@pytest.mark.slow
def test_memory_growth_from_kept_graphs_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monitor = MemoryMonitor(growth_epochs=3)
    with caplog.at_level(logging.WARNING, logger=CALLBACKS_LOGGER):
        fit(tmp_path, epochs=5, module=KeepsLossGraphs(), guards=(monitor,), limit_val_batches=0)
    messages = guard_messages(caplog)
    assert len(messages) == 1 and "loss.item()" in messages[0], messages


@pytest.mark.slow
def test_default_training_does_not_warn_about_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=CALLBACKS_LOGGER):
        fit(tmp_path, epochs=8, module=LitModel(), guards=(MemoryMonitor(growth_epochs=3),))
    assert guard_messages(caplog) == []


# --- what reaches the logger ----------------------------------------------------------


def test_gradient_norms_and_memory_reach_the_logger(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, name="csv")
    guards = (GradientMonitor(log_every_n_steps=5), MemoryMonitor())
    fit(tmp_path, epochs=2, logger=logger, guards=guards, limit_val_batches=2)
    with open(Path(logger.log_dir) / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    columns = rows[0].keys()
    assert {"grad_2.0_norm_total", "grad_2.0_norm/model.net.head.weight"} <= columns
    assert "memory/rss_mib" in columns
    grad_steps = sorted({int(r["step"]) for r in rows if r["grad_2.0_norm_total"]})
    assert grad_steps[:3] == [0, 5, 10]
    rss = [float(r["memory/rss_mib"]) for r in rows if r["memory/rss_mib"]]
    assert len(rss) == 2 and all(value > 10 for value in rss)  # once per epoch
