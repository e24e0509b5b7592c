"""Optuna sweeps: the study, its storage, and the trials, run one after another in this
process (the imports, the data and the start-up are paid once per sweep, not per trial).

A trial is the run that `python train.py BASE_ARGS --key=value ...` would make, without the
export: it fits with validation every epoch, reports the metric to Optuna after each
validation (optuna-integration's Lightning pruning callback prunes it there), and tests its
best checkpoint. With ``--folds K`` a trial is K such runs (k-fold cross-validation, see
data.validation_fold) and its value their mean: less noise than one small validation split.
Several processes, on one machine or many, share a study through Optuna's
RDB storage; Optuna hands out trial numbers, we only decide when the study is full.
"""

from __future__ import annotations

import contextlib
import gc
import math
import socket
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
import psutil
import sqlalchemy
import torch
from optuna.samplers import BaseSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState
from optuna_integration import PyTorchLightningPruningCallback

from .callbacks import NonFiniteError, UnusedParameterError
from .cli import STARTUP_ERRORS
from .interruption import StopOnSignal, TrainingInterrupted, lightning_stop
from .runtime import end_wandb_run
from .search_space import SweepSpec
from .summary import run_dir

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# Every process beats into the storage while it runs a trial; a trial whose process has not
# beaten for GRACE_S (killed, machine lost) is marked failed by the next process that looks.
HEARTBEAT_S = 10
GRACE_S = 60
WAIT_S = 2.0  # how often a process whose peers run the study's last trials looks again
MAX_FAILURES_IN_A_ROW = 3  # then the settings, not bad luck, are the problem: stop
WORKER_ATTR = "worker"
SCHEMA_ATTEMPTS = 5  # opening a new database that other processes are creating too
# The best checkpoint's criterion (configs/default.yaml): it picks each trial's tested epoch,
# and between trials of equal value the lower loss wins.
TIE_BREAK = "val/loss"
SIZE = "parameter_count"  # the trial model's parameters
VAL_SAMPLES = "val_samples"  # how many samples its accuracy was measured on


class SweepError(RuntimeError):
    """The sweep cannot go on (repeated failures, a study started with other settings)."""


class SweepInterrupted(Exception):
    """Ctrl-C or SIGTERM during a trial: that trial is marked failed, the sweep stops.
    (An Exception, so that Optuna records the trial's state before it re-raises.)"""

    def __init__(self, reason: str, exit_code: int) -> None:
        super().__init__(reason)
        self.exit_code = exit_code


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage (SQLite, PostgreSQL, MySQL) with heartbeats, so that a trial
    whose process died is failed instead of counted as running forever."""
    engine: dict[str, Any] = {}
    if url.startswith("sqlite"):  # several local processes: wait for the lock, not fail
        engine["connect_args"] = {"timeout": 60}
    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            with warnings.catch_warnings():  # heartbeats: "experimental" since Optuna 2.9
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(
                    url, engine_kwargs=engine, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S
                )
            break
        except sqlalchemy.exc.SQLAlchemyError as error:
            # Processes started together on a new database each create Optuna's tables and
            # stamp their version; all but the first fail ("table ... already exists",
            # "UNIQUE constraint failed", "duplicate key"). The tables are there now: open
            # it again, which finds them.
            text = str(error).lower()
            lost_race = any(sign in text for sign in ("already exists", "unique", "duplicate"))
            if not lost_race or attempt == SCHEMA_ATTEMPTS - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    if url.startswith("sqlite"):
        # Write-ahead log, synced at checkpoints: each trial reports every epoch, and a full
        # sync per report cost ~3 ms (0.17 s of a 60-epoch trial); readers (other sweep
        # processes) no longer wait for writers. Safe on a local disk, not on NFS.
        sqlalchemy.event.listen(storage.engine, "connect", _sqlite_wal)
        storage.engine.dispose()  # connections made before the listener: reopened with it
    return storage


def _sqlite_wal(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class TrialSeededSampler(BaseSampler):
    """TPE, seeded afresh for each trial from the sweep's seed and the trial's number.

    With one process, the same study draws the same parameters for trial N every time (a
    resumed study goes on as if never stopped); with several processes sharing a study,
    no two trials share a seed (one seed for the whole sampler would give every process
    the same random start-up trials). TPE keeps no state but its random generator: its
    model is rebuilt from the study's trials at every draw.

    Trial N < len(starts) takes its values from ``starts[N]`` (sweep.yaml's start points)
    and draws only the keys left out. By trial number, not with Optuna's enqueue_trial:
    processes that open a new study together would each enqueue them, and run them twice;
    a trial number goes to one process only. (A start trial that fails is not run again.)
    """

    def __init__(
        self, seed: int, startup_trials: int, starts: Sequence[dict[str, Any]] = ()
    ) -> None:
        self.seed = seed
        self.startup_trials = startup_trials
        self.starts = list(starts)
        self._tpe = self._new(0)

    def _start(self, trial: FrozenTrial) -> dict[str, Any]:
        return self.starts[trial.number] if trial.number < len(self.starts) else {}

    def _new(self, number: int) -> TPESampler:
        return TPESampler(seed=self.seed + number, n_startup_trials=self.startup_trials)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._tpe = self._new(trial.number)
        self._tpe.before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> Any:
        if self._start(trial):  # every key of a start trial is fixed or drawn on its own
            return {}
        return self._tpe.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, space: Any) -> Any:
        return self._tpe.sample_relative(study, trial, space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, name: str, distribution: Any
    ) -> Any:
        start = self._start(trial)
        if name in start:
            return start[name]
        return self._tpe.sample_independent(study, trial, name, distribution)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: Any, values: Any) -> None:
        self._tpe.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._tpe.reseed_rng()


def make_pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    """Median pruning: after ``warmup_epochs`` epochs, a trial whose metric is worse than
    the median of earlier trials at the same epoch stops (once ``startup_trials`` trials
    have finished)."""
    if spec.pruner == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(
        n_startup_trials=spec.startup_trials, n_warmup_steps=spec.warmup_epochs
    )


class ReportingPruningCallback(PyTorchLightningPruningCallback):
    """optuna-integration's pruning callback, which also keeps the metric and the validation
    loss of every epoch. The trial's value is the metric of the epoch that train.py tests
    and exports, the lowest validation loss (the best checkpoint): the value best.yaml
    reproduces, not the luckiest epoch's (a maximum over noisy epochs flatters noisy trials).
    With ``prune=False`` (the other folds of a cross-validated trial) it only keeps them.
    """

    def __init__(
        self, trial: optuna.Trial, monitor: str, maximize: bool, prune: bool = True
    ) -> None:
        super().__init__(trial, monitor)
        self.maximize = maximize
        self.prune = prune
        self.epochs: list[tuple[float, float]] = []  # (metric, validation loss)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        metrics = trainer.callback_metrics
        score = metrics.get(self.monitor)
        if not trainer.sanity_checking and score is not None:
            loss = metrics.get(TIE_BREAK)
            self.epochs.append((float(score), math.inf if loss is None else float(loss)))
        if self.prune:
            super().on_validation_end(trainer, pl_module)

    def best_epoch(self) -> tuple[float, float]:
        """(metric, loss) of the epoch with the lowest validation loss (ties: the better
        metric); without a logged validation loss, of the best metric."""
        sign = -1 if self.maximize else 1
        return min(self.epochs, key=lambda epoch: (epoch[1], sign * epoch[0]))


@contextlib.contextmanager
def stopped_by_lightning(trainer: Any) -> Iterator[None]:
    """Lightning's own handling of a signal outside the training loop (before it, or while
    testing) ends in SystemExit: a stop of the sweep, not a crash."""
    try:
        yield
    except SystemExit as exit:
        if not trainer.interrupted:
            raise
        raise SweepInterrupted(*lightning_stop(exit)) from None


def validation_samples(trainer: Any) -> int | None:
    """The size of the validation set the trial's metric was measured on (None when the
    loader has no sized dataset, or validation was limited to some batches)."""
    loader = trainer.val_dataloaders
    limit = trainer.limit_val_batches
    if isinstance(loader, list) or not (isinstance(limit, float) and limit == 1.0):
        return None
    try:
        return len(loader.dataset)
    except (AttributeError, TypeError):
        return None


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def worker_identity() -> dict[str, Any]:
    """Which process runs a trial: the host, the pid and the pid's start time (a pid can be
    reused; the pair cannot)."""
    process = psutil.Process()
    return {"host": socket.gethostname(), "pid": process.pid, "started": process.create_time()}


def _is_alive(worker: dict[str, Any]) -> bool:
    try:
        return psutil.Process(worker["pid"]).create_time() == worker["started"]
    except (psutil.NoSuchProcess, KeyError, TypeError):
        return False


def fail_dead_trials(study: optuna.Study) -> list[int]:
    """Mark failed the running trials whose process is gone: at once for processes of this
    machine (a kill, a crash, a reboot), after the heartbeat's grace period for others."""
    failed = []
    host = socket.gethostname()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get(WORKER_ATTR)
        if isinstance(worker, dict) and worker.get("host") == host and not _is_alive(worker):
            try:
                study.tell(trial.number, state=TrialState.FAIL)
            except (RuntimeError, ValueError):  # another process marked it first
                continue
            failed.append(trial.number)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # other machines' trials, after GRACE_S
    return failed


@dataclass
class TrialResult:
    number: int
    state: str  # complete, pruned or fail
    value: float | None
    seconds: float
    note: str = ""


class TrialFailed(Exception):
    """A trial whose settings cannot run (the note says why): failed, not counted."""


@dataclass
class TrialRunner:
    """The objective: one trial, built like `python train.py` with the trial's values
    (``build``: trial_builder.TrialBuilder)."""

    build: Callable[[dict[str, Any]], Any]  # the trial's config values -> a built ProjectCLI
    spec: SweepSpec
    log_values: Callable[[int, int], dict[str, str]]  # (trial number, fold) -> where its logs go
    target: int  # the study's total of finished trials
    folds: int = 1  # k-fold cross-validation: the value is the mean over the folds
    last_number: int | None = None

    def __call__(self, trial: optuna.Trial) -> float:
        self.last_number = trial.number
        trial.set_user_attr(WORKER_ATTR, worker_identity())
        self._claim_slot(trial)
        params = {d.key: d.suggest(trial) for d in self.spec.space}
        settings = self.spec.values(params)
        # Fold 0 is the plain run (the one best.yaml retrains): it reports to the pruner and
        # is tested. The other folds, only for a trial that was not pruned, add their value.
        value, loss = self._fit(trial, {**settings, **self.log_values(trial.number, 0)}, fold=0)
        values, losses = [value], [loss]
        for fold in range(1, self.folds):
            gc.collect()  # the previous fold's Trainer and loaders (GPU memory included)
            fold_values = {**settings, "data.val_fold": fold, **self.log_values(trial.number, fold)}
            value, loss = self._fit(trial, fold_values, fold)
            values.append(value)
            losses.append(loss)
        if self.folds > 1:
            trial.set_user_attr("fold_values", [round(v, 6) for v in values])
        loss = sum(losses) / len(losses)
        if math.isfinite(loss):
            trial.set_user_attr(TIE_BREAK, loss)
        return sum(values) / len(values)

    def _fit(self, trial: optuna.Trial, values: dict[str, Any], fold: int) -> tuple[float, float]:
        """One fit of the trial: (metric, validation loss) of its best epoch. Fold 0 reports
        every epoch to the pruner, and tests its best checkpoint into the trial's attrs."""
        try:
            cli = self.build(values)
        except STARTUP_ERRORS as error:
            raise self._failed(trial, str(error)) from None
        trainer = cli.trainer
        try:
            maximize = self.spec.direction == "maximize"
            pruning = ReportingPruningCallback(trial, self.spec.metric, maximize, prune=fold == 0)
            trainer.callbacks.append(pruning)
            try:
                with stopped_by_lightning(trainer):
                    trainer.fit(cli.model, datamodule=cli.datamodule)
            except TrainingInterrupted as interrupted:
                raise SweepInterrupted(str(interrupted), interrupted.exit_code) from None
            except NonFiniteError as error:  # settings that diverge: a bad trial, not a broken one
                where = f" (fold {fold})" if fold else ""
                trial.set_user_attr("note", f"diverged{where}: {error}")
                raise optuna.TrialPruned(f"diverged{where}: {error}") from None
            except (UnusedParameterError, torch.OutOfMemoryError) as error:
                raise self._failed(trial, str(error)) from None
            # A Ctrl-C or SIGTERM after the last training step (in the final validation): the fit
            # ended without acting on it, but the sweep stops here, the trial failed like any other.
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
                # For sweep.yaml's select: simplest (sweep_report.chosen_trial). The size of
                # the validation set, before testing replaces the loaders.
                trial.set_user_attr(SIZE, sum(p.numel() for p in cli.model.parameters()))
                samples = validation_samples(trainer)
                if samples is not None and self.spec.metric_is_accuracy:
                    trial.set_user_attr(VAL_SAMPLES, samples)
                best = getattr(trainer.checkpoint_callback, "best_model_path", "") or None
                with stopped_by_lightning(trainer):  # Ctrl-C while testing
                    tested = trainer.test(
                        cli.model, datamodule=cli.datamodule, ckpt_path=best, verbose=False
                    )
                for key, value in (tested[0] if tested else {}).items():
                    trial.set_user_attr(key, round(float(value), 6))
                trial.set_user_attr("log_dir", str(run_dir(trainer)))
            return pruning.best_epoch()
        finally:  # each trial its own W&B run (Lightning reuses a run in progress)
            end_wandb_run(trainer.loggers)

    def _claim_slot(self, trial: optuna.Trial) -> None:
        """Run this trial only if fewer than ``target`` trials are finished or ahead of it
        (another process may have taken the last free slot since this one looked)."""
        ahead = trial.study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING))
        if sum(t.number < trial.number for t in ahead) >= self.target:
            trial.set_user_attr("note", SURPLUS)
            raise TrialFailed(SURPLUS)

    @staticmethod
    def _failed(trial: optuna.Trial, note: str) -> TrialFailed:
        trial.set_user_attr("note", note)
        return TrialFailed(note)


SURPLUS = "surplus: another process took the study's last trial first"


def run_trials(
    study: optuna.Study,
    runner: TrialRunner,
    progress: Callable[[optuna.Study, TrialResult], None],
) -> None:
    """Run trials until the study has ``runner.target`` finished ones. Raises
    SweepInterrupted on a signal (after Optuna marked the trial failed), SweepError after
    MAX_FAILURES_IN_A_ROW failed trials."""
    # Everything alive now (the imports, the study) lives as long as the sweep: out of the
    # collector's sight, so that each trial's collection scans only that trial's objects
    # (0.3 s a trial otherwise, with torch and Lightning loaded). In a running process (a
    # notebook, the tests) it is handed back at the end, so that the sweep's objects can go.
    frozen_before = gc.get_freeze_count()
    gc.collect()  # once: what is garbage now (an earlier run in this process) is not frozen
    gc.freeze()
    try:
        _run_until_full(study, runner, progress)
    finally:
        if not frozen_before:
            gc.unfreeze()


def _run_until_full(
    study: optuna.Study,
    runner: TrialRunner,
    progress: Callable[[optuna.Study, TrialResult], None],
) -> None:
    failures = 0
    while True:
        fail_dead_trials(study)
        finished = finished_count(study)
        if finished >= runner.target:
            return
        running = len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
        if finished + running >= runner.target:  # peers run the last ones: wait for them
            time.sleep(WAIT_S)
            continue
        start = time.perf_counter()
        runner.last_number = None
        study.optimize(runner, n_trials=1, catch=(TrialFailed,))
        # The trial's Trainer, model and loaders hold reference cycles: free them now, not
        # one more per trial (GPU memory included). Cheap after run_trials' gc.freeze().
        gc.collect()
        if runner.last_number is None:
            continue
        trial = study.get_trials(deepcopy=False)[runner.last_number]
        note = trial.user_attrs.get("note", "")
        if note == SURPLUS:
            continue
        if trial.state == TrialState.FAIL:
            failures += 1
            if failures >= MAX_FAILURES_IN_A_ROW:
                raise SweepError(
                    f"{failures} trials in a row failed, the last with: {note}: fix the "
                    "settings, then rerun the same command"
                )
        else:
            failures = 0
        state, seconds = trial.state.name.lower(), time.perf_counter() - start
        progress(study, TrialResult(trial.number, state, trial.value, seconds, note))


def check_same_settings(
    study: optuna.Study, args: list[str], spec_text: str, folds: int = 1
) -> None:
    """A study keeps the arguments, the space and the folds it was started with: a rerun
    (or another process) with others would mix incomparable trials in one study."""
    given: dict[str, Any] = {"args": args, "space": spec_text, "folds": folds}
    stored = study.user_attrs.get("settings")
    if stored is None:
        study.set_user_attr("settings", given)
    elif {"folds": 1, **stored} != given:
        folds_text = f" --folds {stored['folds']}" if stored.get("folds", 1) > 1 else ""
        raise SweepError(
            f"study {study.study_name!r} was started with other arguments or another space "
            f"({' '.join(stored['args']) or 'no arguments'}{folds_text}): rerun with those, "
            "or pick a new --name"
        )
