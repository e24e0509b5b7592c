"""The search space of a sweep: configs/sweep.yaml, read into Optuna's own distributions.
Each key of ``space:`` is a dotted config key (`--model.lr` is `model.lr`), each value the
arguments of an Optuna distribution; lists (layer widths) travel through Optuna as JSON text.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

KINDS = {"float": FloatDistribution, "int": IntDistribution, "categorical": CategoricalDistribution}
TOP_KEYS = ("metric", "direction", "pruner", "space", "start", "select")
# (Built by concatenation: in this template two braces in a row would start Jinja.)
EXAMPLE = "{" + "type: float, low: 1.0e-4, high: 0.1, log: true}"
PRUNER_EXAMPLE = "{" + "kind: median|none, startup_trials: 3, warmup_epochs: 5}"


class SpaceError(ValueError):
    """A search space or option that cannot be used: one line, the key, the fix."""


@dataclass(frozen=True)
class SweepSpec:
    """What configs/sweep.yaml says: what to optimise, how to prune, over which space."""

    metric: str = "val/acc"  # "" (the file's null): the task's own (for_task)
    direction: str = "maximize"  # "": the metric's own sense
    pruner: str = "median"
    startup_trials: int = 3
    warmup_epochs: int = 3
    space: dict[str, BaseDistribution] = field(default_factory=dict)
    start: tuple[dict[str, Any], ...] = ()  # the first trials' values, by trial number
    select: str = "best"  # or simplest (report.chosen_trial)

    @property
    def chosen_word(self) -> str:
        return "best" if self.select == "best" else "chosen"

    @property
    def test_metric(self) -> str:
        """What a trial's test reports for its metric (val/acc: test/acc)."""
        return "test/" + self.metric.split("/", 1)[-1]

    @property
    def test_words(self) -> str:
        return "test accuracy" if self.test_metric == "test/acc" else self.test_metric

    def for_task(self, headline: tuple[str, str]) -> SweepSpec:
        """The task's own metric and direction where the file leaves them out (null):
        val/acc, maximised, for classification; val/rmse, minimised, for a regression."""
        if not self.metric:
            return replace(
                self, metric=f"val/{headline[0]}", direction=self.direction or headline[1]
            )
        lower = self.metric.rsplit("/", 1)[-1] in ("loss", "mae", "rmse", "mse")
        return replace(self, direction=self.direction or ("minimize" if lower else "maximize"))

    @property
    def metric_is_accuracy(self) -> bool:
        """An accuracy has a binomial standard error (report.standard_error), a loss none."""
        name = self.metric.rsplit("/", 1)[-1].lower()
        return name in ("acc", "accuracy") or name.endswith(("_acc", "_accuracy"))

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """The trial's values, drawn through Optuna's suggest API."""
        params = {}
        for key, d in self.space.items():
            if isinstance(d, CategoricalDistribution):
                params[key] = trial.suggest_categorical(key, d.choices)
            elif isinstance(d, IntDistribution):
                params[key] = trial.suggest_int(key, d.low, d.high, step=d.step, log=d.log)
            elif isinstance(d, FloatDistribution):
                params[key] = trial.suggest_float(key, d.low, d.high, step=d.step, log=d.log)
        return values(params)

    def start_params(self, config: Callable[[str], Any]) -> tuple[list[dict], list[str]]:
        """The start trials' parameters as Optuna stores them, and a line for each value
        drawn instead: a key a start point leaves out takes train.py's ``config(key)`` when
        the space holds it, else the sampler draws it."""
        points: list[dict] = []
        drawn = []
        for number, given in enumerate(self.start):
            points.append({})
            for key, d in self.space.items():
                value = given[key] if key in given else config(key)
                if key in given or contains(d, value):
                    points[-1][key] = to_param(value)
                else:
                    outside = f"train.py's {value!r} is outside the space"
                    drawn.append(f"start point {number}: {key} is drawn, {outside}")
        return points, drawn

    def edges(self) -> list[dict[str, Any]]:
        """Value sets that reach every edge of the space (all lows, all highs, each choice
        once): if these parse, so does every value in between."""
        ends: dict[str, list[Any]] = {}
        for key, d in self.space.items():
            if isinstance(d, CategoricalDistribution):
                ends[key] = [from_param(choice) for choice in d.choices]
            elif isinstance(d, FloatDistribution | IntDistribution):
                ends[key] = [d.low, d.high]
        rounds = max(2, *(len(v) for v in ends.values()))
        return [{key: v[i % len(v)] for key, v in ends.items()} for i in range(rounds)]


def values(params: dict[str, Any]) -> dict[str, Any]:
    """A trial's values from what Optuna stored (lists back from their JSON text)."""
    return {key: from_param(value) for key, value in params.items()}


def args_of(values: dict[str, Any]) -> list[str]:
    """Values as command-line arguments: strings as they are (jsonargparse would keep the
    quotes of a JSON string for a str option), anything else as JSON (lists, numbers)."""
    return [f"--{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in values.items()]


def to_param(value: Any) -> Any:
    """A value as Optuna stores it: scalars as plain ones (a parsed PositiveInt as an int),
    lists and mappings (a parsed tuple of layer widths too) as JSON text."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return None if value is None else json.dumps(list(value) if type(value) is tuple else value)


def from_param(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


def contains(d: BaseDistribution, value: Any) -> bool:
    """Whether ``d`` can draw ``value`` (Optuna checks), of its type: 64.0 is not the choice
    64, nor False the number 0 (the trial would run one and Optuna store the other)."""
    try:
        param = to_param(value)
        optuna.trial.create_trial(params={"x": param}, distributions={"x": d}, value=0.0)
    except (TypeError, ValueError):  # outside, or not JSON (a path, a namespace)
        return False
    if isinstance(d, CategoricalDistribution):
        return any(type(choice) is type(param) for choice in d.choices if choice == param)
    return type(param) in ((int,) if isinstance(d, IntDistribution) else (int, float))


def load_spec(path: Path) -> SweepSpec:
    """Read and check a sweep file (its keys against the config: check_keys)."""
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SpaceError(f"--space {path}: no such file (default: configs/sweep.yaml)") from None
    except yaml.YAMLError as error:
        raise SpaceError(f"--space {path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("space"), dict) or not raw["space"]:
        example = "space: {model.lr: " + EXAMPLE + "}"
        raise SpaceError(f"--space {path}: expected a non-empty 'space:' of config keys, {example}")
    unknown = sorted(set(raw) - set(TOP_KEYS))
    if unknown:
        raise SpaceError(f"{path}: unknown top-level key(s) {unknown}: expected {TOP_KEYS}")
    metric, pruner = raw.get("metric"), raw.get("pruner") or {}
    if metric is not None and (not isinstance(metric, str) or not metric):
        raise SpaceError(f"{path}: metric {metric!r}: must be a logged metric, e.g. val/acc")
    kind = pruner.get("kind", "median") if isinstance(pruner, dict) else None
    if kind not in ("median", "none") or set(pruner) - {"kind", "startup_trials", "warmup_epochs"}:
        raise SpaceError(f"{path}: pruner {pruner!r}: expected {PRUNER_EXAMPLE}")
    counts = {name: pruner.get(name, 3) for name in ("startup_trials", "warmup_epochs")}
    for name, value in counts.items():
        if type(value) is not int or value < 0:
            raise SpaceError(f"{path}: pruner.{name} {value!r}: must be 0 or more")
    space = {str(k): distribution(f"{path}: space key {k}", v) for k, v in raw["space"].items()}
    direction = raw.get("direction") or ""
    if direction not in ("", "maximize", "minimize"):
        raise SpaceError(f"{path}: direction {direction!r}: must be maximize or minimize (or null)")
    return SweepSpec(
        metric=metric or "",
        direction=direction,
        pruner=str(kind),
        **counts,
        space=space,
        start=start_points(path, raw.get("start"), space),
        select=one_of(path, raw, "select", ("best", "simplest")),
    )


def one_of(path: Path, raw: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = raw.get(key, allowed[0])
    if value not in allowed:
        raise SpaceError(f"{path}: {key} {value!r}: must be {' or '.join(allowed)}")
    return value


def distribution(where: str, raw: Any) -> BaseDistribution:
    """Optuna's distribution for one space entry, its constructor's checks in one line. Only
    what it would take silently is refused here (1.5 for an int, an infinite bound, a bool)."""
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind not in KINDS:
        raise SpaceError(f"{where}: {raw!r} is not a distribution: expected e.g. {EXAMPLE}")
    args = {name: value for name, value in raw.items() if name != "type"}
    if kind == "categorical" and not isinstance(args.get("choices"), list):
        raise SpaceError(f"{where}: choices must be a non-empty list, e.g. [32, 64, 128]")
    if kind == "categorical":
        args["choices"] = [to_param(choice) for choice in args["choices"]]
    for name in ("low", "high", "step") if kind != "categorical" else ():
        value, number = args.get(name, 1), (int,) if kind == "int" else (int, float)
        if type(value) not in number or not math.isfinite(value):
            raise SpaceError(f"{where}: {name} must be a finite {kind} number; got {value!r}")
    try:
        return KINDS[kind](**args)
    except (TypeError, ValueError) as error:  # Optuna's own check, or a missing bound
        raise SpaceError(f"{where}: {error}".replace(".__init__()", "")) from None


def start_points(path: Path, raw: Any, space: dict[str, BaseDistribution]) -> tuple[dict, ...]:
    """``start:``: a list of mappings of space keys to values their distributions hold."""
    if raw is not None and (not isinstance(raw, list) or not all(type(p) is dict for p in raw)):
        example = "e.g. start: [{}, " + "{model.lr: 0.01}]"
        raise SpaceError(f"{path}: start must be a list of mappings of space keys, {example}")
    for number, point in enumerate(raw or []):
        for key, value in point.items():
            where = f"{path}: start point {number}: {key}"
            if key not in space:
                close = difflib.get_close_matches(str(key), list(space), n=1, cutoff=0.5)
                hint = f"did you mean {close[0]}?" if close else "add it to space: first"
                raise SpaceError(f"{where} is no space key: {hint}")
            if isinstance(value, str) and not isinstance(space[key], CategoricalDistribution):
                raise SpaceError(f"{where}: {value!r} is text, not a number (write 1.0e-2)")
            if not contains(space[key], value):
                raise SpaceError(f"{where}: {value!r} is outside its distribution {space[key]}")
    return tuple(raw or ())


def check_keys(spec: SweepSpec, valid_keys: Iterable[str]) -> None:
    """Every space key must be a key of the parsed config: name the closest one if not."""
    valid = [key for key in valid_keys if not key.startswith("__")]
    for key in (key for key in spec.space if key not in valid):
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]}?" if close else "see python train.py --print_config"
        raise SpaceError(f"space key {key} is no config key: {hint}")
