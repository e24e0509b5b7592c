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
import shlex
import sys
import time
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from {{ cookiecutter.package_name }}.baselines import compute_baselines, linear_gap
from {{ cookiecutter.package_name }}.cli import STARTUP_ERRORS, build_cli
from {{ cookiecutter.package_name }}.runtime import (
    configure_logging,
    configure_threads,
    freeze_imports,
    quiet_known_noise,
)
from {{ cookiecutter.package_name }}.search_space import (
    SpaceError,
    SweepSpec,
    check_keys,
    load_spec,
)
from {{ cookiecutter.package_name }}.summary import baseline_lines
from {{ cookiecutter.package_name }}.sweep_report import (
    best_trial,
    chosen_trial,
    format_params,
    start_label,
    write_atomic,
    write_plots,
    write_report,
)
from {{ cookiecutter.package_name }}.sweep_setup import (
    TRIAL_DEFAULTS,
    best_config_text,
    check_folds,
    check_metric,
    check_runnable_in_process,
    parse_sweep_args,
    quiet_trials,
    space_edges,
    trial_log_values,
)
from {{ cookiecutter.package_name }}.trial_builder import TrialBuilder
from {{ cookiecutter.package_name }}.tuning import (
    SweepError,
    SweepInterrupted,
    TrialResult,
    TrialRunner,
    TrialSeededSampler,
    check_same_settings,
    finished_count,
    make_pruner,
    open_storage,
    run_trials,
)

ROOT = Path(__file__).resolve().parent
DEFAULT_CONFIG = ROOT / "configs" / "default.yaml"
DEFAULT_SPACE = ROOT / "configs" / "sweep.yaml"


def main(args: list[str] | None = None) -> Path:
    """Run the missing trials of the study, write its report; return the sweep's folder."""
    start = time.perf_counter()
    quiet_known_noise()
    # Each trial's CLI gets its arguments from here, not from sys.argv (the sweep's own).
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    # Said once per trial on small data (fewer batches than log_every_n_steps): noise here.
    warnings.filterwarnings("ignore", message=r"The number of training batches \(\d+\) is smaller")
    configure_logging()
    configure_threads()
    given = sys.argv[1:] if args is None else args
    options, train_args = parse_sweep_args(given, DEFAULT_SPACE)
    with quiet_trials():
        return sweep(options, train_args, given, start)


def sweep(
    options: argparse.Namespace, train_args: list[str], given: list[str], start: float
) -> Path:
    """The sweep itself, once its own options are parsed (see main)."""
    base_args = [*TRIAL_DEFAULTS, *train_args]
    try:  # everything that can be checked before the first trial
        spec = load_spec(options.space)
        base = build_cli(base_args, DEFAULT_CONFIG)
        check_runnable_in_process(base)
        check_keys(spec, base.config.keys())
        folder = (Path(base.config.trainer.default_root_dir) / "sweeps" / options.name).resolve()
        log_values = trial_log_values(base.config, folder)
        # Parsed at the space's edges (a fold and the log folders with them): values the
        # options refuse stop here, and the trials are built from this parse if they can.
        builder = TrialBuilder(base_args, DEFAULT_CONFIG, parsed=base)
        fold_values = {"data.val_fold": 1} if options.folds > 1 else {}
        builder.verify(space_edges(spec), {**fold_values, **log_values(0, 1)})
        check_metric(base, spec.metric)
        folds_hint = check_folds(base, options.folds)
    except (SpaceError, *STARTUP_ERRORS) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    starts, drawn = spec.start_params(base.config.get)
    baselines = compute_baselines(base.datamodule)
    folder.mkdir(parents=True, exist_ok=True)
    storage = options.storage or f"sqlite:///{folder / 'study.db'}"
    study = optuna.create_study(
        study_name=options.name,
        storage=open_storage(storage),
        load_if_exists=True,
        direction=spec.direction,
        sampler=TrialSeededSampler(
            base.config.get("seed_everything") or 0, spec.startup_trials, starts
        ),
        pruner=make_pruner(spec),
    )
    del base
    runner = TrialRunner(
        build=builder, spec=spec, log_values=log_values, target=options.trials, folds=options.folds
    )
    try:
        check_same_settings(study, train_args, options.space.read_text(), options.folds)
    except SweepError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    if folds_hint:
        print(folds_hint)
    for line in drawn:
        print(line)
    exit_code, status = 0, None
    try:
        before = finished_count(study)
        if before:
            print(f"study {options.name}: {before} of {options.trials} trials finished before")
        run_trials(study, runner, lambda study, result: print(progress_line(study, result, spec)))
    except SweepInterrupted as interrupted:
        exit_code, status = interrupted.exit_code, f"interrupted: {interrupted}"
    except KeyboardInterrupt:  # Ctrl-C between two trials
        exit_code, status = 130, "interrupted: stopped by Ctrl-C"
    except SweepError as error:
        exit_code, status = 1, f"error: {error}"
    plots = write_plots(study, spec, folder)
    report = write_report(study, spec, folder, baselines, plots)
    chosen = chosen_trial(study, spec.select)
    if chosen is not None:
        write_atomic(
            folder / "best.yaml",
            best_config_text(
                [*train_args, *spec.as_args(chosen.params)],
                DEFAULT_CONFIG,
                [
                    f"The {spec.chosen_word} trial "
                    f"({chosen.number}) of sweep {options.name}: {spec.metric} "
                    f"{chosen.value:.4f}; {format_params(chosen.params)}",
                    f"python train.py --config {folder / 'best.yaml'}",
                ],
            ),
        )
    print(summary_lines(study, spec, baselines, folder, time.perf_counter() - start))
    print(f"report: {report}")
    if status:
        print(status, file=sys.stderr)
        print(f"resume: python sweep.py {shlex.join(given)}", file=sys.stderr)
    print(f"sweep: {folder}")
    if exit_code:
        raise SystemExit(exit_code)
    return folder


def progress_line(study: optuna.Study, result: TrialResult, spec: SweepSpec) -> str:
    """One line per trial: number, state, value, best so far (and the trial best.yaml would
    take, when another), elapsed time, and a note (why it failed; a start point)."""
    best, chosen = best_trial(study), chosen_trial(study, spec.select)
    value = "" if result.value is None else f" {result.value:.4f}"
    best_text = f"best {best.value:.4f} (trial {best.number})" if best else "best: none yet"
    if best is not None and chosen is not None and chosen.number != best.number:
        best_text += f", chosen: trial {chosen.number}"
    label = result.note or start_label(spec, result.number)
    note = f"  [{label}]" if label else ""
    finished = finished_count(study)
    return (
        f"trial {result.number:3d} {result.state:8s}{value:>8s}  {best_text}  "
        f"{result.seconds:5.1f} s  ({finished} finished){note}"
    )


def summary_lines(
    study: optuna.Study, spec: SweepSpec, baselines: dict, folder: Path, seconds: float
) -> str:
    states = [t.state for t in study.get_trials(deepcopy=False)]
    counts = ", ".join(f"{states.count(s)} {s.name.lower()}" for s in TrialState if states.count(s))
    lines = [f"study {study.study_name}: {counts} ({seconds:.1f} s in this process)"]
    best, chosen = best_trial(study), chosen_trial(study, spec.select)
    if best is not None and chosen is not None:
        test = chosen.user_attrs.get("test/acc")
        why = ""
        if chosen.number != best.number:
            why = (
                f" (the fewest parameters within one standard error of the best, trial "
                f"{best.number}'s {best.value:.4f})"
            )
        lines.append(
            f"{spec.chosen_word} trial {chosen.number}: "
            f"{spec.metric} {chosen.value:.4f}"
            + (f", test accuracy {test:.4f}" if test is not None else "")
            + f"; {format_params(chosen.params)}{why}"
        )
        lines += baseline_lines(None, baselines)  # the same line as train.py's
        gap = linear_gap(test, baselines)
        if gap is not None:
            advice = ": on this data a simpler model, or longer trials, may do better"
            if gap.within_chance:
                advice = f", {gap.chance_words()} (README: Tune it)"
            lines.append(
                f"note: the {spec.chosen_word} trial gets {gap} than the logistic regression "
                f"({test:.4f} < {baselines['logistic_regression']:.4f}){advice}; report.md "
                "lists every trial's test accuracy"
            )
        lines.append(f"train it: python train.py --config {folder / 'best.yaml'}")
    return "\n".join(lines)


if __name__ == "__main__":
    freeze_imports()  # a script: nothing of an earlier run is alive to keep
    main()
