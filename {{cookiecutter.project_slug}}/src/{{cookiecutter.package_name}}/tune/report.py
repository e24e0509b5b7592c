"""What a sweep tells and leaves in runs/sweeps/<name>/, from what its storage holds (every
process's trials): the trial best.yaml trains, report.md, Optuna's plots, the lines printed."""

from __future__ import annotations

import math
import os
import statistics
import warnings
from pathlib import Path
from typing import Any, cast

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from ..tasks.classification import binomial_standard_error, linear_gap
from .space import SweepSpec, from_param
from .study import count
from .trial import SIZE, TIE_BREAK, VAL_SAMPLES

PLOTS = ("optimization_history", "param_importances", "slice", "intermediate_values")


def write_atomic(path: Path, text: str) -> None:
    """Several processes may write the same file at the end: each writes it whole."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


def standard_error(trial: FrozenTrial) -> float:
    """The standard error of a complete trial's value: that of the mean of its folds; else,
    for an accuracy (only then are its validation samples kept), the binomial one; else 0."""
    folds = trial.user_attrs.get("fold_values") or []
    if len(folds) > 1:
        return statistics.stdev(folds) / math.sqrt(len(folds))
    samples, value = trial.user_attrs.get(VAL_SAMPLES), cast(float, trial.value)
    return binomial_standard_error(value, samples) if samples and 0 <= value <= 1 else 0.0


def ranked(study: optuna.Study, *states: TrialState) -> list[FrozenTrial]:
    """Best first; ties (common on a small validation split) go to the lower validation loss,
    as train.py's checkpoint choice would; trials without a value last."""
    sign = -1 if study.direction == StudyDirection.MAXIMIZE else 1
    return sorted(
        study.get_trials(deepcopy=False, states=states or None),
        key=lambda t: (
            t.value is None,
            sign * (t.value or 0.0),
            t.user_attrs.get(TIE_BREAK, math.inf),
            t.number,
        ),
    )


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    return next(iter(ranked(study, TrialState.COMPLETE)), None)


def chosen_trial(study: optuna.Study, select: str) -> FrozenTrial | None:
    """The trial best.yaml trains. ``best``: best_trial. ``simplest``: Breiman's one-standard-
    error rule, the fewest parameters among the trials within one standard error of the best
    value (then the better value): on a small validation split many trials tie within noise,
    and the smaller model is the safer bet. (Optuna itself selects by value only.)"""
    best = best_trial(study)
    if best is None or select == "best":
        return best
    sign = -1 if study.direction == StudyDirection.MAXIMIZE else 1
    limit = sign * cast(float, best.value) + standard_error(best) + 1e-12
    close = [t for t in ranked(study, TrialState.COMPLETE) if sign * cast(float, t.value) <= limit]
    return min(close, key=lambda t: t.user_attrs.get(SIZE, math.inf))  # stable: ranked first


def label(spec: SweepSpec, trial: FrozenTrial) -> str:
    """What a trial is, for people: a failure's note, a retry, a start point ("" if none)."""
    # RetryHeartbeatStaleTrialCallback.retried_trial_number, without its experimental warning
    retried = trial.system_attrs.get("failed_trial")
    if trial.user_attrs.get("note"):
        return str(trial.user_attrs["note"])
    if retried is not None:
        return f"retry of trial {retried} (its process stopped)"
    if trial.number < len(spec.start):
        return f"start point {trial.number}" + (
            "" if spec.start[trial.number] else ": train.py's values"
        )
    return ""


def text(value: Any) -> str:
    """A value for people: 4 significant digits (best.yaml keeps every digit)."""
    value = from_param(value)
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else repr(value)


def params_text(trial: FrozenTrial) -> str:
    return ", ".join(f"{key}={text(value)}" for key, value in trial.params.items())


def size(trial: FrozenTrial) -> str:
    return f"{trial.user_attrs[SIZE]:,}" if SIZE in trial.user_attrs else ""


def state_counts(study: optuna.Study) -> str:
    states = [t.state for t in study.get_trials(deepcopy=False)]
    return ", ".join(f"{n} {s.name.lower()}" for s in TrialState if (n := states.count(s)))


def choice_lines(study: optuna.Study, spec: SweepSpec, folder: Path) -> list[str]:
    """report.md's section on best.yaml's trial: its value, and why it was chosen."""
    best, chosen = best_trial(study), chosen_trial(study, spec.select)
    if best is None or chosen is None:
        return []
    error, best_error = standard_error(chosen), standard_error(best)
    title = "Best: trial {}" if spec.select == "best" else "Chosen: trial {} (select: simplest)"
    why = f"- the fewest parameters ({size(chosen)}) within one standard error of the best value, "
    why += f"trial {best.number}'s {best.value:.4f} ± {best_error:.4f} ({size(best)} parameters)"
    if not best_error:
        why = f"- the best value: {spec.metric} has no known standard error without --folds"
    return [
        f"## {title.format(chosen.number)}",
        "",
        f"- {spec.metric}: {chosen.value:.4f}" + (f" ± {error:.4f}" if error else ""),
        *([why] if spec.select == "simplest" else []),
        f"- {spec.test_words} (its best checkpoint): "
        f"{text(chosen.user_attrs.get(spec.test_metric))}",
        f"- values: {params_text(chosen)}",
        f"- train it: `python train.py --config {folder / 'best.yaml'}`",
    ]


def write_report(
    study: optuna.Study, spec: SweepSpec, folder: Path, baselines: dict, plots: list[str]
) -> Path:
    """report.md: the chosen trial beside the baselines, every trial (best first), the plots."""
    folds = study.user_attrs.get("settings", {}).get("folds", 1)
    over = f"; the mean of {folds} cross-validation folds" if folds > 1 else ""
    goal = "Maximise" if spec.direction == "maximize" else "Minimise"
    skipped = f"skipped ({baselines.get('skipped', 'not computed')})"
    linear, keys = text(baselines.get("logistic_regression")) or skipped, list(spec.space)

    header = ["trial", "state", spec.metric, spec.test_metric, "parameters", *keys, "seconds"]
    header.append("note")
    lines = [
        f"# Sweep {study.study_name}",
        "",
        f"{goal} {spec.metric} (each trial's best epoch{over}); pruner: {spec.pruner}. "
        f"Trials: {state_counts(study)}. Each trial's logs and checkpoints: {folder / 'trials'}.",
        "",
        *choice_lines(study, spec, folder),
        f"- {baseline_text(baselines, linear)}",
        "",
        "## Trials",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for t in ranked(study):
        tested = text(t.user_attrs.get(spec.test_metric))
        row = [t.number, t.state.name.lower(), text(t.value), tested]
        row += [size(t), *(text(t.params[k]) if k in t.params else "" for k in keys)]
        row += [f"{t.duration.total_seconds():.1f}" if t.duration else "", label(spec, t)]
        lines.append("| " + " | ".join(str(cell).replace("|", "/") for cell in row) + " |")
    lines += ["", "## Plots", "", *(f"![{name}]({name}.png)" for name in plots)] if plots else []
    write_atomic(folder / "report.md", "\n".join(lines) + "\n")
    return folder / "report.md"


def write_plots(study: optuna.Study, spec: SweepSpec, folder: Path) -> list[str]:
    """Optuna's own plots as PNG; one that needs more trials than there are is left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as optuna_plots

    written = []
    for name in PLOTS:
        plot = getattr(optuna_plots, f"plot_{name}")
        with warnings.catch_warnings():  # "experimental" plots; tight_layout and colour bars
            warnings.simplefilter("ignore")
            try:
                curves = name == "intermediate_values"  # (each trial's metric per epoch)
                axes = plot(study) if curves else plot(study, target_name=spec.metric)
            except (ValueError, RuntimeError, ZeroDivisionError):
                continue  # too few trials for this plot yet
            figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
            figure.tight_layout()
        temporary = folder / f".{name}.{os.getpid()}.png"
        figure.savefig(temporary, dpi=100)
        temporary.replace(folder / f"{name}.png")
        plt.close(figure)
        written.append(name)
    return written


def progress_line(study: optuna.Study, spec: SweepSpec, trial: FrozenTrial, seconds: float) -> str:
    """One line per trial: its value, the best so far (and the chosen one), what it is."""
    best, chosen = best_trial(study), chosen_trial(study, spec.select)
    value = "" if trial.value is None else f" {trial.value:.4f}"
    best_text = f"best {best.value:.4f} (trial {best.number})" if best else "best: none yet"
    if best is not None and chosen is not None and chosen.number != best.number:
        best_text += f", chosen: trial {chosen.number}"
    note = f"  [{label(spec, trial)}]" if label(spec, trial) else ""
    return (
        f"trial {trial.number:3d} {trial.state.name.lower():8s}{value:>8s}  {best_text}  "
        f"{seconds:5.1f} s  ({count(study)} finished){note}"
    )


def summary_lines(
    study: optuna.Study, spec: SweepSpec, baselines: dict, baseline_line: str, folder: Path
) -> list[str]:
    """best.yaml's trial beside train.py's ``baseline_line``; a note when it tests below the
    logistic regression."""
    best, chosen = best_trial(study), chosen_trial(study, spec.select)
    if best is None or chosen is None:
        return []
    test = chosen.user_attrs.get(spec.test_metric)
    tested = f", {spec.test_words} {test:.4f}" if test is not None else ""
    why = f" (the fewest parameters within one standard error of the best, trial {best.number}'s"
    why = f"{why} {best.value:.4f})" if chosen.number != best.number else ""
    lines = [
        f"{spec.chosen_word} trial {chosen.number}: {spec.metric} {chosen.value:.4f}{tested}; "
        f"{params_text(chosen)}{why}",
        baseline_line,
    ]
    gap = linear_gap(test, baselines) if spec.test_metric == "test/acc" else None
    if gap is not None:
        advice = ": on this data a simpler model, or longer trials, may do better"
        advice = f", {gap.verdict()} (README: Tune it)" if gap.within_chance else advice
        lines.append(
            f"note: the {spec.chosen_word} trial gets {gap} than the logistic regression "
            f"({test:.4f} < {baselines['logistic_regression']:.4f}){advice}; report.md "
            "lists every trial's test accuracy"
        )
    return [*lines, f"train it: python train.py --config {folder / 'best.yaml'}"]


def baseline_text(baselines: dict, linear: str) -> str:
    """The baselines on the trials' test split: the classification's, or the regression's."""
    if "ridge_rmse" in baselines:
        return (
            f"baselines on the same test split: training mean RMSE "
            f"{text(baselines['training_mean_rmse'])}, ridge regression RMSE "
            f"{text(baselines['ridge_rmse'])}"
        )
    return (
        f"baselines on the same test split: majority class "
        f"{text(baselines.get('majority_class'))}, logistic regression {linear}"
    )
