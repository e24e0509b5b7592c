"""What a sweep leaves in runs/sweeps/<name>/: report.md, the plots, and the choice of the
trial best.yaml trains. Written from what the storage holds (every process's trials) after
every run of sweep.py, also after Ctrl-C."""

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

from ..tasks.classification import binomial_standard_error
from .space import SweepSpec, from_param
from .trial import SIZE, TIE_BREAK, VAL_SAMPLES

PLOTS = {
    "history": "plot_optimization_history",
    "importances": "plot_param_importances",
    "parameters": "plot_slice",
    "curves": "plot_intermediate_values",
}


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


def ranked(study: optuna.Study, states: tuple[TrialState, ...] | None = None) -> list[FrozenTrial]:
    """Best first; ties (common for the accuracy of a small validation split) go to the lower
    validation loss at the tested epoch, as train.py's checkpoint choice would; trials
    without a value (failed, running) last, by number."""
    sign = -1 if study.direction == StudyDirection.MAXIMIZE else 1
    return sorted(
        study.get_trials(deepcopy=False, states=states),
        key=lambda t: (
            t.value is None,
            sign * (t.value or 0.0),
            t.user_attrs.get(TIE_BREAK, math.inf),
            t.number,
        ),
    )


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    complete = ranked(study, (TrialState.COMPLETE,))
    return complete[0] if complete else None


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
    close = [t for t in ranked(study, (TrialState.COMPLETE,)) if sign * cast(float, t.value) <= limit]
    return min(close, key=lambda t: t.user_attrs.get(SIZE, math.inf))  # stable: ranked first


def label(spec: SweepSpec, trial: FrozenTrial) -> str:
    """What a trial is, for people: a failure's note, a start point, a retry ("" if none)."""
    # RetryHeartbeatStaleTrialCallback.retried_trial_number, without its experimental warning
    retried = trial.system_attrs.get("failed_trial")
    if trial.user_attrs.get("note"):
        return str(trial.user_attrs["note"])
    if retried is not None:
        return f"retry of trial {retried} (its process stopped)"
    if trial.number < len(spec.start):
        return f"start point {trial.number}" + ("" if spec.start[trial.number] else ": train.py's values")
    return ""


def format_value(value: Any) -> str:
    """A parameter for people: 4 significant digits (best.yaml keeps every digit)."""
    value = from_param(value)
    return f"{value:.4g}" if isinstance(value, float) else repr(value)


def format_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{key}={format_value(value)}" for key, value in params.items())


def number(value: Any) -> str:
    return "" if value is None else f"{value:.4g}"


def size(trial: FrozenTrial) -> str:
    return f"{trial.user_attrs[SIZE]:,}" if SIZE in trial.user_attrs else ""


def state_counts(study: optuna.Study) -> str:
    states = [t.state for t in study.get_trials(deepcopy=False)]
    return ", ".join(f"{n} {s.name.lower()}" for s in TrialState if (n := states.count(s)))


def choice_lines(study: optuna.Study, spec: SweepSpec, folder: Path) -> list[str]:
    """The report's section on best.yaml's trial: its value and why it was chosen."""
    best, chosen = best_trial(study), chosen_trial(study, spec.select)
    if best is None or chosen is None:
        return []
    error, best_error = standard_error(chosen), standard_error(best)
    simplest = spec.select == "simplest"
    lines = [
        f"## Chosen: trial {chosen.number} (select: simplest)"
        if simplest
        else f"## Best: trial {chosen.number}",
        "",
        f"- {spec.metric}: {chosen.value:.4f}" + (f" ± {error:.4f}" if error else ""),
    ]
    if simplest and not best_error:
        lines.append(
            f"- the best value: without --folds, {spec.metric} has no known standard error, "
            "so no band of trials as good"
        )
    elif simplest and chosen.number != best.number:
        lines.append(
            f"- the fewest parameters ({size(chosen)}) within one standard error of the best "
            f"value, trial {best.number}'s {best.value:.4f} ± {best_error:.4f} ({size(best)} "
            "parameters)"
        )
    elif simplest:
        lines.append(
            "- the best value; no trial within one standard error of it has fewer parameters "
            f"than its {size(chosen)}"
        )
    return [
        *lines,
        f"- test accuracy (its best checkpoint): {number(chosen.user_attrs.get('test/acc'))}",
        f"- values: {format_params(chosen.params)}",
        f"- train it: `python train.py --config {folder / 'best.yaml'}`",
    ]


def write_report(
    study: optuna.Study,
    spec: SweepSpec,
    folder: Path,
    baselines: dict[str, Any],
    plots: dict[str, str],
) -> Path:
    """report.md: the chosen trial beside the baselines, then every trial, best first."""
    folds = study.user_attrs.get("settings", {}).get("folds", 1)
    over = f"; the mean of {folds} cross-validation folds" if folds > 1 else ""
    goal = "Maximise" if spec.direction == "maximize" else "Minimise"
    linear = baselines.get("logistic_regression")
    skipped = f"skipped ({baselines.get('skipped', 'not computed')})"
    keys = list(spec.space)
    header = ["trial", "state", spec.metric, "test/acc", "parameters", *keys, "seconds", "note"]
    lines = [
        f"# Sweep {study.study_name}",
        "",
        f"{goal} {spec.metric} (each trial's best epoch{over}); pruner: {spec.pruner}. "
        f"Trials: {state_counts(study)}. Each trial's logs and checkpoints: {folder / 'trials'}.",
        "",
        *choice_lines(study, spec, folder),
        f"- baselines on the same test split: majority class "
        f"{number(baselines.get('majority_class'))}, logistic regression "
        + (number(linear) if linear is not None else skipped),
        "",
        "## Trials",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for trial in ranked(study):
        seconds = f"{trial.duration.total_seconds():.1f}" if trial.duration is not None else ""
        row = [
            str(trial.number),
            trial.state.name.lower(),
            number(trial.value),
            number(trial.user_attrs.get("test/acc")),
            size(trial),
            *(format_value(trial.params[k]) if k in trial.params else "" for k in keys),
            seconds,
            label(spec, trial).replace("|", "/"),
        ]
        lines.append("| " + " | ".join(row) + " |")
    if plots:
        lines += ["", "## Plots", ""] + [f"![{name}]({file})" for name, file in plots.items()]
    write_atomic(folder / "report.md", "\n".join(lines) + "\n")
    return folder / "report.md"


def write_plots(study: optuna.Study, spec: SweepSpec, folder: Path) -> dict[str, str]:
    """Optuna's own plots as PNG: the history, the parameters' importances, each parameter
    against the value, each trial's metric per epoch. One that needs more trials than there
    are (importances need two complete ones) is left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as optuna_plots

    written = {}
    for name, function in PLOTS.items():
        plot = getattr(optuna_plots, function)
        with warnings.catch_warnings():  # "experimental" plots; tight_layout and colour bars
            warnings.simplefilter("ignore")
            try:
                axes = plot(study) if name == "curves" else plot(study, target_name=spec.metric)
            except (ValueError, RuntimeError, ZeroDivisionError):
                continue  # too few trials for this plot yet
            figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
            figure.set_size_inches(max(6.4, figure.get_size_inches()[0]), 4.8)
            figure.tight_layout()
        temporary = folder / f".{name}.{os.getpid()}.png"
        figure.savefig(temporary, dpi=100)
        temporary.replace(folder / f"{name}.png")
        plt.close(figure)
        written[name] = f"{name}.png"
    return written
