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
from pathlib import Path
from typing import Any

from {{ cookiecutter.package_name }}.runtime import configure_logging, configure_threads, quiet_known_noise
from {{ cookiecutter.package_name }}.training.cli import STARTUP_ERRORS, build_cli
from {{ cookiecutter.package_name }}.tune import report, setup
from {{ cookiecutter.package_name }}.tune import study as studies
from {{ cookiecutter.package_name }}.tune.space import SpaceError, args_of, check_keys, load_spec, values
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
    options, train_args = setup.parse_sweep_args(given, DEFAULT_SPACE)
    with setup.quiet_trials():
        try:
            return sweep(options, train_args, given, start)
        except (SpaceError, studies.SweepError, *STARTUP_ERRORS) as error:  # before any trial
            print(f"error: {error}", file=sys.stderr)
            raise SystemExit(2) from None


def prepare(options: argparse.Namespace, base_args: list[str]) -> tuple[Any, ...]:
    """Everything checked before the first trial: (the space, the sweep's own run built, its
    folder, the trials' log folders). Raises SpaceError or one of STARTUP_ERRORS."""
    base = build_cli(base_args, DEFAULT_CONFIG)
    spec = load_spec(options.space).for_task(base.model.task.headline)
    setup.check_runnable_in_process(base)
    check_keys(spec, base.config.keys())
    hint = setup.check_folds(base, options.folds)
    folder = (Path(base.config.trainer.default_root_dir) / "sweeps" / options.name).resolve()
    log_values = setup.trial_log_values(base.config, folder)
    fold = {"data.val_fold": 1} if options.folds > 1 else {}
    setup.check_edges(spec, base_args, DEFAULT_CONFIG, {**fold, **log_values(0, 1)})
    setup.check_metric(base, spec.metric)
    for line in ([hint] if hint else []) + spec.start_params(base.config.get)[1]:
        print(line)
    return spec, base, folder, log_values


def sweep(
    options: argparse.Namespace, train_args: list[str], given: list[str], start: float
) -> Path:
    """The sweep itself, once its own options are parsed (see main)."""
    base_args = [*setup.TRIAL_DEFAULTS, *train_args]
    spec, base, folder, log_values = prepare(options, base_args)
    data, task, seed = base.datamodule, base.model.task, base.config.get("seed_everything") or 0
    baselines = task.baselines(data.split_arrays("train"), data.split_arrays("test"))
    baseline_line = task.summary_lines({}, baselines)[1]  # the same line as train.py's
    starts = spec.start_params(base.config.get)[0]
    del base, data  # what the trials build is theirs
    folder.mkdir(parents=True, exist_ok=True)
    study = studies.open_study(
        options.name, options.storage or f"sqlite:///{folder / 'study.db'}", spec, seed, starts
    )
    studies.check_same_settings(study, train_args, options.space.read_text(), options.folds)
    if before := studies.count(study):
        print(f"study {options.name}: {before} of {options.trials} trials finished before")
    runner = TrialRunner(base_args, DEFAULT_CONFIG, spec, log_values, options.trials, options.folds)
    exit_code, status = 0, ""
    try:
        studies.run_trials(
            study,
            runner,
            options.trials,
            lambda t, s: print(report.progress_line(study, spec, t, s)),
        )
    except studies.SweepInterrupted as interrupted:
        exit_code, status = interrupted.exit_code, f"interrupted: {interrupted}"
    except KeyboardInterrupt:  # Ctrl-C between two trials
        exit_code, status = 130, "interrupted: stopped by Ctrl-C"
    except studies.SweepError as error:
        exit_code, status = 1, f"error: {error}"
    written = finish(study, spec, folder, baselines, train_args)
    seconds = time.perf_counter() - start
    print(f"study {options.name}: {report.state_counts(study)} ({seconds:.1f} s in this process)")
    print("\n".join([*report.summary_lines(study, spec, baselines, baseline_line, folder)]))
    print(f"report: {written}")
    if status:
        print(f"{status}\nresume: python sweep.py {shlex.join(given)}", file=sys.stderr)
    print(f"sweep: {folder}")
    if exit_code:
        raise SystemExit(exit_code)
    return folder


def finish(study: Any, spec: Any, folder: Path, baselines: dict, train_args: list[str]) -> Path:
    """Optuna's plots, report.md, and best.yaml: the chosen trial's full config for train.py."""
    written = report.write_report(
        study, spec, folder, baselines, report.write_plots(study, spec, folder)
    )
    chosen = report.chosen_trial(study, spec.select)
    if chosen is not None:
        header = [
            f"The {spec.chosen_word} trial ({chosen.number}) of sweep {study.study_name}: "
            f"{spec.metric} {chosen.value:.4f}; {report.params_text(chosen)}",
            f"python train.py --config {folder / 'best.yaml'}",
        ]
        args = [*train_args, *args_of(values(chosen.params))]
        report.write_atomic(
            folder / "best.yaml", setup.best_config_text(args, DEFAULT_CONFIG, header)
        )
    return written


if __name__ == "__main__":
    gc.freeze()  # a script: the imports live as long as the process, out of the GC's sight
    main()
