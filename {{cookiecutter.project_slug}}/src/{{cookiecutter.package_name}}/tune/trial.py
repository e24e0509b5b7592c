"""One trial: the run `python train.py SWEEP_ARGS --key=value ...` would make, fitted with
Optuna's Lightning pruning callback, its best checkpoint tested; with ``--folds K``, K fits."""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna_integration import PyTorchLightningPruningCallback

from ..training.callbacks import NonFiniteError, UnusedParameterError
from ..training.checkpoints import run_dir
from ..training.cli import STARTUP_ERRORS, build_cli
from ..training.interruption import StopOnSignal, TrainingInterrupted, lightning_stop
from ..training.loggers import end_logger_run
from .space import SweepSpec, args_of
from .study import SweepError, SweepInterrupted, TrialFailed, claim_slot

# The best checkpoint's criterion (configs/default.yaml): it picks each trial's tested epoch,
# and between trials of equal value the lower loss wins.
TIE_BREAK = "val/loss"
SIZE = "parameter_count"  # the trial model's parameters
VAL_SAMPLES = "val_samples"  # how many samples its accuracy was measured on


class ReportingPruningCallback(PyTorchLightningPruningCallback):
    """optuna-integration's pruning callback, which also keeps each epoch's metric and
    validation loss. The trial's value is the metric of the epoch train.py tests and exports
    (the lowest validation loss): what best.yaml reproduces, not the luckiest epoch's. With
    ``prune=False`` (a cross-validated trial's other folds) it only keeps them."""

    def __init__(self, trial: optuna.Trial, monitor: str, maximize: bool, prune: bool) -> None:
        super().__init__(trial, monitor)
        self.sign, self.prune = -1 if maximize else 1, prune
        self.epochs: list[tuple[float, float]] = []  # (metric, validation loss)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        score, loss = (trainer.callback_metrics.get(key) for key in (self.monitor, TIE_BREAK))
        if not trainer.sanity_checking and score is not None:
            self.epochs.append((float(score), math.inf if loss is None else float(loss)))
        if self.prune:
            super().on_validation_end(trainer, pl_module)

    def best_epoch(self) -> tuple[float, float]:
        """(metric, loss) of the epoch with the lowest loss (ties: the better metric)."""
        return min(self.epochs, key=lambda epoch: (epoch[1], self.sign * epoch[0]))


@contextlib.contextmanager
def as_trial_outcome(trial: optuna.Trial, trainer: Any, fold: int = 0) -> Iterator[None]:
    """Training's errors as the sweep's: a signal stops the sweep (outside the training loop
    Lightning's own handling ends in SystemExit), settings that diverge prune the trial,
    settings that cannot run fail it."""
    try:
        yield
    except SystemExit as exit:
        if not trainer.interrupted:
            raise
        raise SweepInterrupted(*lightning_stop(exit)) from None
    except TrainingInterrupted as interrupted:
        raise SweepInterrupted(str(interrupted), interrupted.exit_code) from None
    except NonFiniteError as error:  # a bad trial, not a broken one
        trial.set_user_attr("note", f"diverged{f' (fold {fold})' if fold else ''}: {error}")
        raise optuna.TrialPruned(trial.user_attrs["note"]) from None
    except (UnusedParameterError, torch.OutOfMemoryError) as error:
        raise failed(trial, str(error)) from None


def failed(trial: optuna.Trial, note: str) -> TrialFailed:
    trial.set_user_attr("note", note)
    return TrialFailed(note)


@dataclass
class TrialRunner:
    """The objective of study.optimize."""

    base_args: list[str]  # the sweep's own arguments: a trial adds its values
    default_config: Path
    spec: SweepSpec
    log_values: Callable[[int, int], dict[str, str]]  # (trial number, fold) -> log folders
    target: int  # the study's total of finished trials
    folds: int = 1

    def __call__(self, trial: optuna.Trial) -> float:
        claim_slot(trial, self.target)
        settings = self.spec.suggest(trial)
        # Fold 0 is the plain run (what best.yaml trains again): it reports to the pruner and
        # is tested. The other folds, of a trial that was not pruned, add their values.
        values, losses = [], []
        for fold in range(self.folds):
            extra = {"data.val_fold": fold} if fold else {}
            value, loss = self.fit(
                trial, {**settings, **extra, **self.log_values(trial.number, fold)}, fold
            )
            values.append(value)
            losses.append(loss)
            gc.collect()  # this fold's Trainer and loaders before the next one's
        if self.folds > 1:
            trial.set_user_attr("fold_values", [round(v, 6) for v in values])
        if math.isfinite(sum(losses)):
            trial.set_user_attr(TIE_BREAK, sum(losses) / len(losses))
        return sum(values) / len(values)

    def fit(self, trial: optuna.Trial, values: dict[str, Any], fold: int) -> tuple[float, float]:
        """One fit: (metric, validation loss) of its best epoch; fold 0 is also tested."""
        try:
            cli = build_cli([*self.base_args, *args_of(values)], self.default_config)
        except (SystemExit, *STARTUP_ERRORS) as error:  # SystemExit: the parser said why
            raise failed(trial, str(error) or "the option parser refused a value") from None
        trainer: Any = cli.trainer  # (its callbacks attribute is set at run time, untyped)
        maximize = self.spec.direction == "maximize"
        pruning = ReportingPruningCallback(trial, self.spec.metric, maximize, prune=fold == 0)
        trainer.callbacks.append(pruning)
        try:
            with as_trial_outcome(trial, trainer, fold):
                trainer.fit(cli.model, datamodule=cli.datamodule)
            # Ctrl-C or SIGTERM after the last training step (in the last validation): the
            # fit ended without acting on it, but the sweep stops here, this trial failed.
            for callback in trainer.callbacks:
                missed = callback.missed_request() if isinstance(callback, StopOnSignal) else None
                if missed:
                    raise SweepInterrupted(*missed)
            if not pruning.epochs:
                raise SweepError(
                    f"no epoch of trial {trial.number} logged {self.spec.metric}: check "
                    "trainer.check_val_every_n_epoch and trainer.limit_val_batches"
                )
            if fold == 0:
                self.test(trial, cli)
            return pruning.best_epoch()
        finally:  # each trial its own logger run (W&B would reuse one in progress)
            end_logger_run(trainer.loggers)

    def test(self, trial: optuna.Trial, cli: Any) -> None:
        """Test the best checkpoint; keep what select: simplest needs (the model's size, the
        validation samples: read before testing replaces the loaders)."""
        trainer = cli.trainer
        trial.set_user_attr(SIZE, sum(p.numel() for p in cli.model.parameters()))
        dataset = getattr(trainer.val_dataloaders, "dataset", None)  # (one loader, sized)
        whole = trainer.limit_val_batches == 1.0 and type(trainer.limit_val_batches) is float
        if whole and isinstance(dataset, Sized) and self.spec.metric_is_accuracy:
            trial.set_user_attr(VAL_SAMPLES, len(dataset))
        best = getattr(trainer.checkpoint_callback, "best_model_path", "") or None
        with as_trial_outcome(trial, trainer):  # Ctrl-C while testing
            tested = trainer.test(
                cli.model, datamodule=cli.datamodule, ckpt_path=best, verbose=False
            )
        for key, value in (tested[0] if tested else {}).items():
            trial.set_user_attr(key, round(float(value), 6))
        trial.set_user_attr("log_dir", str(run_dir(trainer)))
