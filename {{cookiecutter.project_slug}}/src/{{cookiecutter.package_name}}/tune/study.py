"""The study: Optuna's RDB storage, TPE seeded per trial, the median pruner, and the loop
that runs trials in this process until the study has its finished trials. Processes on one
machine or many share a study through its storage: Optuna numbers the trials, beats a
heartbeat for each running one, fails the trial of a process that stopped beating (killed,
machine lost) and queues it again (RetryHeartbeatStaleTrialCallback)."""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna
import sqlalchemy
from optuna.exceptions import ExperimentalWarning
from optuna.samplers import BaseSampler, TPESampler
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from .space import SweepSpec

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# Each running trial beats every HEARTBEAT_S; one silent for GRACE_S is failed and retried
# (at most MAX_RETRIES times) by the next process that looks, a rerun of this one included.
HEARTBEAT_S, GRACE_S, MAX_RETRIES = 2, 10, 2
WAIT_S = 1.0  # how often a process whose peers run the study's last trials looks again
MAX_FAILURES_IN_A_ROW = 3  # then the settings, not bad luck, are the problem: stop
SURPLUS = "surplus: another process took the study's last trial first"


class SweepError(RuntimeError):
    """The sweep cannot go on (repeated failures, a study started with other settings)."""


class SweepInterrupted(Exception):
    """Ctrl-C or SIGTERM during a trial: Optuna fails the trial, the sweep stops. (An
    Exception, so that Optuna records the trial's state before it raises it again.)"""

    def __init__(self, reason: str, exit_code: int) -> None:
        super().__init__(reason)
        self.exit_code = exit_code


class TrialFailed(Exception):
    """A trial whose settings cannot run (its note says why): failed, the sweep goes on."""


def open_storage(url: str, attempts: int = 5) -> RDBStorage:
    """Optuna's RDB storage (SQLite, PostgreSQL, MySQL), with heartbeats and retries.

    Processes started together on a new database each create Optuna's tables, and all but
    the first may fail ("UNIQUE constraint failed: alembic_version", "already exists"):
    Optuna leaves that to its users (optuna/optuna#1092, "no simple solution"). The tables
    exist by then, and opening the storage again finds them."""
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    with warnings.catch_warnings():  # heartbeats and retries: "experimental" in Optuna
        warnings.simplefilter("ignore", ExperimentalWarning)
        retry = RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)
        for attempt in range(1, attempts + 1):
            try:
                return RDBStorage(
                    url,
                    engine_kwargs=engine,
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=GRACE_S,
                    heartbeat_stale_trial_callback=retry,
                )
            except sqlalchemy.exc.SQLAlchemyError as error:
                lost = any(s in str(error).lower() for s in ("exists", "unique", "duplicate"))
                if attempt == attempts or not lost:
                    raise
                time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


class TrialSeededSampler(BaseSampler):
    """TPE, made afresh for each trial with the sweep's seed plus the trial's number: a
    study draws the same values for trial N every time (a resumed study goes on as if never
    stopped), and processes sharing it never draw the same. Trial N < len(starts) takes
    ``starts[N]`` (sweep.yaml's start points) for the keys they give; by number, not with
    Optuna's enqueue_trial, which processes opening a new study together would each do."""

    def __init__(self, seed: int, startup_trials: int, starts: Sequence[dict[str, Any]]) -> None:
        self.seed, self.startup_trials, self.starts = seed, startup_trials, list(starts)
        self.tpe = TPESampler(seed=seed, n_startup_trials=startup_trials)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.tpe = TPESampler(seed=self.seed + trial.number, n_startup_trials=self.startup_trials)
        self.tpe.before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> Any:
        return self.tpe.infer_relative_search_space(study, trial)  # TPE's independent: none

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, space: Any) -> Any:
        return self.tpe.sample_relative(study, trial, space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, name: str, distribution: Any
    ) -> Any:
        start = self.starts[trial.number] if trial.number < len(self.starts) else {}
        if name in start:
            return start[name]
        return self.tpe.sample_independent(study, trial, name, distribution)


def open_study(name: str, url: str, spec: SweepSpec, seed: int, starts: list) -> optuna.Study:
    """The study ``name`` in ``url``, created by the first process that asks for it."""
    # Median: a trial worse than the median of the earlier ones at the same epoch stops.
    median = optuna.pruners.MedianPruner(spec.startup_trials, spec.warmup_epochs)
    pruner = median if spec.pruner == "median" else optuna.pruners.NopPruner()
    sampler = TrialSeededSampler(seed, spec.startup_trials, starts)
    return optuna.create_study(
        storage=open_storage(url),
        sampler=sampler,
        pruner=pruner,
        study_name=name,
        direction=StudyDirection[spec.direction.upper()],
        load_if_exists=True,
    )


def count(study: optuna.Study, *states: TrialState) -> int:
    return len(study.get_trials(deepcopy=False, states=states or FINISHED))


def run_trials(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], float],
    target: int,
    progress: Callable[[FrozenTrial, float], None],
) -> None:
    """Run trials until the study has ``target`` finished ones. Raises SweepInterrupted on a
    signal (after Optuna failed the trial), SweepError after MAX_FAILURES_IN_A_ROW failures."""
    failures, done = 0, list[FrozenTrial]()  # the trial each optimize ran, from its callback
    while True:
        with warnings.catch_warnings():  # Optuna's own check of the heartbeats
            warnings.simplefilter("ignore", ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        if count(study) >= target:
            return
        if count(study) + count(study, TrialState.RUNNING) >= target:
            time.sleep(WAIT_S)  # peers run the last trials (or a dead one's heartbeat ends)
            continue
        start, record = time.perf_counter(), [lambda _, trial: done.append(trial)]
        study.optimize(objective, n_trials=1, catch=(TrialFailed,), callbacks=record)
        gc.collect()  # the trial's Trainer, model and loaders: cycles (GPU memory too)
        trial = done.pop()
        note = trial.user_attrs.get("note", "")
        if note == SURPLUS:
            continue
        failures = failures + 1 if trial.state == TrialState.FAIL else 0
        if failures >= MAX_FAILURES_IN_A_ROW:
            raise SweepError(
                f"{failures} trials in a row failed, the last with: {note}: fix the settings, "
                "then rerun the same command"
            )
        progress(trial, time.perf_counter() - start)


def claim_slot(trial: optuna.Trial, target: int) -> None:
    """Run this trial only if fewer than ``target`` trials are finished, running or queued
    ahead of it: another process may have taken the last free one since this one looked."""
    states = (*FINISHED, TrialState.RUNNING, TrialState.WAITING)
    ahead = trial.study.get_trials(deepcopy=False, states=states)
    if sum(t.number < trial.number for t in ahead) >= target:
        trial.set_user_attr("note", SURPLUS)
        raise TrialFailed(SURPLUS)


def check_same_settings(study: optuna.Study, args: list[str], space: str, folds: int) -> None:
    """A study keeps the arguments, the space and the folds it was started with: a rerun
    (or another process) with others would mix trials that cannot be compared."""
    given: dict[str, Any] = {"args": args, "space": space, "folds": folds}
    stored = study.user_attrs.get("settings")
    if stored is None:
        study.set_user_attr("settings", given)
    elif stored != given:
        folds_text = f" --folds {stored['folds']}" if stored["folds"] > 1 else ""
        raise SweepError(
            f"study {study.study_name!r} was started with other arguments or another space "
            f"({' '.join(stored['args']) or 'no arguments'}{folds_text}): rerun with those, "
            "or pick a new --name"
        )
