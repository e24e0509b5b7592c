"""What a sweep leaves in runs/sweeps/<name>/: report.md, best.yaml and the plots.

Written after every run of sweep.py, also after Ctrl-C or by a process that found the study
already full, from what the study's storage holds (so it covers every process's trials).
"""

from __future__ import annotations

import math
import os
import statistics
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import optuna
from optuna.trial import FrozenTrial, TrialState

from .baselines import binomial_standard_error
from .search_space import SweepSpec, from_param
from .tuning import SIZE, TIE_BREAK, VAL_SAMPLES

PLOTS = {
    "history": "plot_optimization_history",
    "importances": "plot_param_importances",
    "parameters": "plot_slice",
    "curves": "plot_intermediate_values",
}


def write_atomic(path: Path, text: str) -> None:
    """Several processes may write the same report at the end: each writes whole files."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


def standard_error(trial: FrozenTrial) -> float:
    """The standard error of a complete trial's value. Cross-validated: that of the mean of
    its folds. Otherwise, for an accuracy (the trial records its validation samples only
    for one), the binomial one, with Agresti and Coull's two successes and two failures
    added so that a perfect score still has one. Else 0 (unknown)."""
    folds = trial.user_attrs.get("fold_values") or []
    if len(folds) > 1:
        return statistics.stdev(folds) / math.sqrt(len(folds))
    samples, value = trial.user_attrs.get(VAL_SAMPLES), cast(float, trial.value)
    if not samples or not 0.0 <= value <= 1.0:
        return 0.0
    return binomial_standard_error(value, samples)


def chosen_trial(study: optuna.Study, select: str) -> FrozenTrial | None:
    """The trial best.yaml trains. ``best``: the best value (best_trial). ``simplest``:
    Breiman's one-standard-error rule, the trial with the fewest parameters among those
    within one standard error of the best value (then the better value). On a small
    validation split many trials tie within noise, and the smaller model is the safer bet
    on new data. Our own code: Optuna selects by value only."""
    best = best_trial(study)
    if best is None or select == "best":
        return best
    sign = -1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1
    limit = sign * cast(float, best.value) + standard_error(best)
    close = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if sign * cast(float, t.value) <= limit + 1e-12
    ]
    return min(
        close,
        key=lambda t: (
            t.user_attrs.get(SIZE, math.inf),
            sign * cast(float, t.value),
            t.user_attrs.get(TIE_BREAK, math.inf),
            t.number,
        ),
    )


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The best complete trial (None before any). Ties, common when the metric is the
    accuracy of a small validation split (several trials at 1.0), go to the trial with the
    lower validation loss at its best epoch, as train.py's checkpoint choice would."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    sign = -1 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1
    return min(
        complete,
        # A complete trial has its value.
        key=lambda t: (
            sign * cast(float, t.value),
            t.user_attrs.get(TIE_BREAK, math.inf),
            t.number,
        ),
    )


def start_label(spec: SweepSpec, number: int) -> str:
    """What a start trial is, for people ("" for a trial the sampler chose)."""
    if number >= len(spec.start):
        return ""
    return f"start point {number}" + (": train.py's values" if not spec.start[number] else "")


def sorted_trials(study: optuna.Study, spec: SweepSpec) -> list[FrozenTrial]:
    """Best first; trials without a value (failed, running) last, by number."""
    sign = -1 if spec.direction == "maximize" else 1
    return sorted(
        study.get_trials(deepcopy=False),
        key=lambda t: (
            t.value is None,
            sign * (t.value or 0.0),
            t.user_attrs.get(TIE_BREAK, math.inf),
            t.number,
        ),
    )


def format_value(value: Any) -> str:
    """A parameter for people: 4 significant digits (best.yaml keeps every digit)."""
    value = from_param(value)
    return f"{value:.4g}" if isinstance(value, float) else repr(value)


def format_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{key}={format_value(value)}" for key, value in params.items())


def _number(value: Any) -> str:
    return "" if value is None else f"{value:.4g}"


def _count(trial: FrozenTrial) -> str:
    size = trial.user_attrs.get(SIZE)
    return "" if size is None else f"{size:,}"


def write_report(
    study: optuna.Study,
    spec: SweepSpec,
    folder: Path,
    baselines: dict[str, Any],
    plots: dict[str, str],
) -> Path:
    """report.md: the chosen trial beside the baselines, then every trial, best first."""
    trials = study.get_trials(deepcopy=False)
    counts = {state.name.lower(): 0 for state in TrialState}
    for trial in trials:
        counts[trial.state.name.lower()] += 1
    goal = "Maximise" if spec.direction == "maximize" else "Minimise"
    folds = study.user_attrs.get("settings", {}).get("folds", 1)
    over = f"; the mean of {folds} cross-validation folds" if folds > 1 else ""
    lines = [
        f"# Sweep {study.study_name}",
        "",
        f"{goal} {spec.metric} (each trial's best epoch{over}); pruner: {spec.pruner}. Trials: "
        + ", ".join(f"{n} {state}" for state, n in counts.items() if n)
        + f". Each trial's logs and checkpoints: {folder / 'trials'}.",
        "",
    ]
    best, chosen = best_trial(study), chosen_trial(study, spec.select)
    if best is not None and chosen is not None:
        error = standard_error(chosen)
        lines += [
            f"## Best: trial {chosen.number}"
            if spec.select == "best"
            else f"## Chosen: trial {chosen.number} (select: simplest)",
            "",
            f"- {spec.metric}: {chosen.value:.4f}" + (f" ± {error:.4f}" if error else ""),
        ]
        if spec.select == "simplest" and not standard_error(best):
            lines.append(
                f"- the best value: without --folds, {spec.metric} has no known standard "
                "error, so no band of trials as good"
            )
        elif spec.select == "simplest" and chosen.number != best.number:
            lines.append(
                f"- the fewest parameters ({_count(chosen)}) within one standard error of the "
                f"best value, trial {best.number}'s {best.value:.4f} ± {standard_error(best):.4f}"
                f" ({_count(best)} parameters)"
            )
        elif spec.select == "simplest":
            lines.append(
                f"- the best value; no trial within one standard error of it has fewer "
                f"parameters than its {_count(chosen)}"
            )
        lines += [
            f"- test accuracy (its best checkpoint): {_number(chosen.user_attrs.get('test/acc'))}",
            f"- values: {format_params(chosen.params)}",
            "- train it: `python train.py --config " + str(folder / "best.yaml") + "`",
        ]
    lines += [
        f"- baselines on the same test split: majority class "
        f"{_number(baselines.get('majority_class'))}, logistic regression "
        + (
            _number(baselines.get("logistic_regression"))
            if baselines.get("logistic_regression") is not None
            else f"skipped ({baselines.get('skipped', 'not computed')})"
        ),
        "",
        "## Trials",
        "",
    ]
    keys = [d.key for d in spec.space]
    header = ["trial", "state", spec.metric, "test/acc", "parameters", *keys, "seconds", "note"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for trial in sorted_trials(study, spec):
        seconds = f"{trial.duration.total_seconds():.1f}" if trial.duration is not None else ""
        row = [
            str(trial.number),
            trial.state.name.lower(),
            _number(trial.value),
            _number(trial.user_attrs.get("test/acc")),
            _count(trial),
            *(format_value(trial.params[k]) if k in trial.params else "" for k in keys),
            seconds,
            str(trial.user_attrs.get("note", "") or start_label(spec, trial.number)).replace(
                "|", "/"
            ),
        ]
        lines.append("| " + " | ".join(row) + " |")
    if plots:
        lines += ["", "## Plots", ""] + [f"![{name}]({file})" for name, file in plots.items()]
    path = folder / "report.md"
    write_atomic(path, "\n".join(lines) + "\n")
    return path


def write_plots(study: optuna.Study, spec: SweepSpec, folder: Path) -> dict[str, str]:
    """Optuna's own plots as PNG (matplotlib): the history, the parameters' importances,
    each parameter against the value, and each trial's metric per epoch. A plot that needs
    more trials than there are (importances need two complete ones) is left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as optuna_plots

    written = {}
    for name, function in PLOTS.items():
        plot: Callable[..., Any] = getattr(optuna_plots, function)
        with warnings.catch_warnings():
            # Optuna's plots are "experimental"; tight_layout warns about colour bars.
            warnings.simplefilter("ignore")
            try:
                axes = plot(study, target_name=spec.metric) if name != "curves" else plot(study)
            except (ValueError, RuntimeError, ZeroDivisionError):
                continue  # too few trials for this plot yet
            first = axes.flat[0] if hasattr(axes, "flat") else axes
            figure = first.figure
            figure.set_size_inches(max(6.4, figure.get_size_inches()[0]), 4.8)
            figure.tight_layout()
        file = f"{name}.png"
        temporary = folder / f".{file}.{os.getpid()}.png"
        figure.savefig(temporary, dpi=100)
        temporary.replace(folder / file)
        plt.close(figure)
        written[name] = file
    return written
