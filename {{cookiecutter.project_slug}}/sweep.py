"""Tune it: an Optuna search over configs/sweep.yaml, trials run in this process, resumable.

To run:
    python sweep.py --trials 20                          # the space in configs/sweep.yaml
    python sweep.py --trials 20 --trainer.max_epochs 15  # any train.py option, every trial
    python sweep.py --trials 40 --name wide --space my-space.yaml --config configs/cnn.yaml
    python sweep.py --trials 100 --storage postgresql://user:pass@host/db  # on every machine
    python sweep.py --trials 20 --folds 5 --data.path small.csv  # cross-validated trials
    python train.py --config runs/sweeps/sweep/best.yaml  # then train the best trial for real

Rerun the same command after a crash or Ctrl-C: only the missing trials run.
"""

from __future__ import annotations

import argparse
import gc
import shlex
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import optuna
from optuna.trial import FrozenTrial

from {{ cookiecutter.package_name }}.runtime import configure_logging, configure_threads, quiet_known_noise
from {{ cookiecutter.package_name }}.tasks.classification import linear_gap
from {{ cookiecutter.package_name }}.training.cli import STARTUP_ERRORS, ProjectCLI, build_cli
from {{ cookiecutter.package_name }}.tune.report import (
    best_trial,
    chosen_trial,
    format_params,
    label,
    state_counts,
    write_atomic,
    write_plots,
    write_report,
)
from {{ cookiecutter.package_name }}.tune.setup import (
    TRIAL_DEFAULTS,
    best_config_text,
    check_edges,
    check_folds,
    check_metric,
    check_runnable_in_process,
    parse_sweep_args,
    quiet_trials,
    trial_log_values,
)
from {{ cookiecutter.package_name }}.tune.space import SpaceError, SweepSpec, args_of, check_keys, load_spec
from {{ cookiecutter.package_name }}.tune.study import (
    SweepError,
    SweepInterrupted,
    check_same_settings,
    finished_count,
    open_study,
    run_trials,
)
from {{ cookiecutter.package_name }}.tune.trial import TrialRunner

ROOT = Path(__file__).resolve().parent
DEFAULT_CONFIG = ROOT / "configs" / "default.yaml"
DEFAULT_SPACE = ROOT / "configs" / "sweep.yaml"


def main(args: list[str] | None = None) -> Path:
    """Run the missing trials of the study, write its report; return the sweep's folder."""
    start = time.perf_counter()
    quiet_known_noise()
    # Each trial's CLI gets its arguments from here, not from sys.argv (the sweep's own).
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    configure_logging()
    configure_threads()
    given = sys.argv[1:] if args is None else args
    options, train_args = parse_sweep_args(given, DEFAULT_SPACE)
    with quiet_trials():
        return sweep(options, train_args, given, start)


def refuse(error: Exception) -> NoReturn:
    print(f"error: {error}", file=sys.stderr)
    raise SystemExit(2) from None


def prepare(
    options: argparse.Namespace, base_args: list[str]
) -> tuple[SweepSpec, ProjectCLI, Path, Callable[[int, int], dict[str, str]], str | None]:
    """Everything that can be checked before the first trial: (the space, the sweep's own
    run built, its folder, the trials' log folders, a hint on folds). Raises SpaceError or
    one of STARTUP_ERRORS."""
    spec = load_spec(options.space)
    base = build_cli(base_args, DEFAULT_CONFIG)
    check_runnable_in_process(base)
    check_keys(spec, base.config.keys())
    folder = (Path(base.config.trainer.default_root_dir) / "sweeps" / options.name).resolve()
    log_values = trial_log_values(base.config, folder)
    fold = {"data.val_fold": 1} if options.folds > 1 else {}
    check_edges(spec, base_args, DEFAULT_CONFIG, {**fold, **log_values(0, 1)})
    check_metric(base, spec.metric)
    return spec, base, folder, log_values, check_folds(base, options.folds)


def sweep(
    options: argparse.Namespace, train_args: list[str], given: list[str], start: float
) -> Path:
    """The sweep itself, once its own options are parsed (see main)."""
    base_args = [*TRIAL_DEFAULTS, *train_args]
    try:
        spec, base, folder, log_values, hint = prepare(options, base_args)
    except (SpaceError, *STARTUP_ERRORS) as error:
        refuse(error)
    starts, drawn = spec.start_params(base.config.get)
    data, task = base.datamodule, base.model.task
    baselines = task.baselines(data.split_arrays("train"), data.split_arrays("test"))
    baseline_line = task.summary_lines({}, baselines)[1]  # the same line as train.py's
    seed = base.config.get("seed_everything") or 0
    del base, data  # what the trials build is theirs
    folder.mkdir(parents=True, exist_ok=True)
    storage = options.storage or f"sqlite:///{folder / 'study.db'}"
    study = open_study(options.name, storage, spec, seed, starts)
    try:
        check_same_settings(study, train_args, options.space.read_text(), options.folds)
    except SweepError as error:
        refuse(error)
    for line in ([hint] if hint else []) + drawn:
        print(line)
    before = finished_count(study)
    if before:
        print(f"study {options.name}: {before} of {options.trials} trials finished before")
    runner = TrialRunner(
        build=lambda values: build_cli([*base_args, *args_of(values)], DEFAULT_CONFIG),
        spec=spec,
        log_values=log_values,
        target=options.trials,
        folds=options.folds,
    )
    exit_code, status = 0, ""
    try:
        run_trials(
            study,
            runner,
            options.trials,
            lambda trial, seconds: print(progress_line(study, spec, trial, seconds)),
        )
    except SweepInterrupted as interrupted:
        exit_code, status = interrupted.exit_code, f"interrupted: {interrupted}"
    except KeyboardInterrupt:  # Ctrl-C between two trials
        exit_code, status = 130, "interrupted: stopped by Ctrl-C"
    except SweepError as error:
        exit_code, status = 1, f"error: {error}"
    report = write_outputs(study, spec, folder, baselines, train_args)
    print(summary_lines(study, spec, baselines, baseline_line, folder, time.perf_counter() - start))
    print(f"report: {report}")
    if status:
        print(status, file=sys.stderr)
        print(f"resume: python sweep.py {shlex.join(given)}", file=sys.stderr)
    print(f"sweep: {folder}")
    if exit_code:
        raise SystemExit(exit_code)
    return folder


def write_outputs(
    study: optuna.Study,
    spec: SweepSpec,
    folder: Path,
    baselines: dict[str, Any],
    train_args: list[str],
) -> Path:
    """The plots, report.md and best.yaml (the full config of the chosen trial)."""
    report = write_report(study, spec, folder, baselines, write_plots(study, spec, folder))
    chosen = chosen_trial(study, spec.select)
    if chosen is not None:
        header = [
            f"The {spec.chosen_word} trial ({chosen.number}) of sweep {study.study_name}: "
            f"{spec.metric} {chosen.value:.4f}; {format_params(chosen.params)}",
            f"python train.py --config {folder / 'best.yaml'}",
        ]
        args = [*train_args, *spec.as_args(chosen.params)]
        write_atomic(folder / "best.yaml", best_config_text(args, DEFAULT_CONFIG, header))
    return report


def progress_line(study: optuna.Study, spec: SweepSpec, trial: FrozenTrial, seconds: float) -> str:
    """One line per trial: number, state, value, best so far (and the trial best.yaml would
    take, when another), its time, and what it is (a start point, why it failed)."""
    best, chosen = best_trial(study), chosen_trial(study, spec.select)
    value = "" if trial.value is None else f" {trial.value:.4f}"
    best_text = f"best {best.value:.4f} (trial {best.number})" if best else "best: none yet"
    if best is not None and chosen is not None and chosen.number != best.number:
        best_text += f", chosen: trial {chosen.number}"
    note = f"  [{label(spec, trial)}]" if label(spec, trial) else ""
    return (
        f"trial {trial.number:3d} {trial.state.name.lower():8s}{value:>8s}  {best_text}  "
        f"{seconds:5.1f} s  ({finished_count(study)} finished){note}"
    )


def summary_lines(
    study: optuna.Study,
    spec: SweepSpec,
    baselines: dict[str, Any],
    baseline_line: str,
    folder: Path,
    seconds: float,
) -> str:
    """The end: the trials' states, best.yaml's trial beside the baselines, and a note when
    it tests below the logistic regression."""
    lines = [f"study {study.study_name}: {state_counts(study)} ({seconds:.1f} s in this process)"]
    best, chosen = best_trial(study), chosen_trial(study, spec.select)
    if best is None or chosen is None:
        return "\n".join(lines)
    test = chosen.user_attrs.get("test/acc")
    tested = f", test accuracy {test:.4f}" if test is not None else ""
    why = ""
    if chosen.number != best.number:
        why = (
            " (the fewest parameters within one standard error of the best, trial "
            f"{best.number}'s {best.value:.4f})"
        )
    lines += [
        f"{spec.chosen_word} trial {chosen.number}: {spec.metric} {chosen.value:.4f}{tested}; "
        f"{format_params(chosen.params)}{why}",
        baseline_line,
    ]
    gap = linear_gap(test, baselines)
    if gap is not None:
        advice = ": on this data a simpler model, or longer trials, may do better"
        if gap.within_chance:
            advice = f", {gap.verdict()} (README: Tune it)"
        lines.append(
            f"note: the {spec.chosen_word} trial gets {gap} than the logistic regression "
            f"({test:.4f} < {baselines['logistic_regression']:.4f}){advice}; report.md "
            "lists every trial's test accuracy"
        )
    lines.append(f"train it: python train.py --config {folder / 'best.yaml'}")
    return "\n".join(lines)


if __name__ == "__main__":
    gc.freeze()  # a script: the imports live as long as the process, out of the GC's sight
    main()
