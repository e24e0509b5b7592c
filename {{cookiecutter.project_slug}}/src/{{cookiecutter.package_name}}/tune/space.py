"""The search space of a sweep: configs/sweep.yaml, read into Optuna's own distributions.

Each key of ``space:`` is a dotted config key, as on the command line (`--model.lr` is
`model.lr`), and each value a distribution, which Optuna's constructor checks:

    model.lr: {type: float, low: 1.0e-4, high: 1.0e-1, log: true}
    trainer.accumulate_grad_batches: {type: int, low: 1, high: 4, step: 1}
    model.net.init_args.hidden_sizes: {type: categorical, choices: [[128], [256, 256]]}

A trial's values become `--key=value` arguments on top of the sweep's own: a trial is the
`python train.py` run those arguments make. ``start:`` lists the first trials' values and
``select:`` which complete trial best.yaml takes (report.chosen_trial).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
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

KINDS: dict[str, type[BaseDistribution]] = {
    "float": FloatDistribution,
    "int": IntDistribution,
    "categorical": CategoricalDistribution,
}
TOP_KEYS = ("metric", "direction", "pruner", "space", "start", "select")
PRUNER_KEYS = ("kind", "startup_trials", "warmup_epochs")
# (Built by concatenation: in this template two braces in a row would start Jinja.)
EXAMPLE = "{" + "type: float, low: 1.0e-4, high: 0.1, log: true}"
PRUNER_EXAMPLE = "{" + "kind: median|none, startup_trials: 3, warmup_epochs: 5}"


class SpaceError(ValueError):
    """A search-space file or value that cannot be used: one line, the key, the fix."""


@dataclass(frozen=True)
class SweepSpec:
    """What configs/sweep.yaml says: what to optimise, how to prune, over which space."""

    metric: str = "val/acc"
    direction: str = "maximize"
    pruner: str = "median"
    startup_trials: int = 3
    warmup_epochs: int = 3
    space: dict[str, BaseDistribution] = field(default_factory=dict)
    start: tuple[dict[str, Any], ...] = ()  # the first trials' values, by trial number
    select: str = "best"

    @property
    def chosen_word(self) -> str:
        """What the outputs call best.yaml's trial: "chosen" when select is simplest."""
        return "best" if self.select == "best" else "chosen"

    @property
    def metric_is_accuracy(self) -> bool:
        """An accuracy has a binomial standard error over the validation samples; a loss or
        an F1 score has none without folds (report.standard_error)."""
        name = self.metric.rsplit("/", 1)[-1].lower()
        return name in ("acc", "accuracy") or name.endswith(("_acc", "_accuracy"))

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """The trial's values, drawn through Optuna's public suggest API."""
        params = {}
        for key, d in self.space.items():
            if isinstance(d, CategoricalDistribution):
                params[key] = trial.suggest_categorical(key, d.choices)
            elif isinstance(d, IntDistribution):
                params[key] = trial.suggest_int(key, d.low, d.high, step=d.step, log=d.log)
            elif isinstance(d, FloatDistribution):
                params[key] = trial.suggest_float(key, d.low, d.high, step=d.step, log=d.log)
        return self.values(params)

    def values(self, params: dict[str, Any]) -> dict[str, Any]:
        """A trial's values from what Optuna stored (lists back from their JSON text)."""
        return {key: from_param(value) for key, value in params.items()}

    def as_args(self, params: dict[str, Any]) -> list[str]:
        return args_of(self.values(params))

    def start_params(
        self, config_value: Callable[[str], Any]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The start trials' parameters as Optuna stores them, and a line for each value
        drawn instead. A key a start point leaves out takes train.py's ``config_value(key)``
        when the space holds it, else the sampler draws it."""
        points, drawn = [], []
        for number, given in enumerate(self.start):
            point = {}
            for key, d in self.space.items():
                value = given[key] if key in given else config_value(key)
                if key in given or contains(d, value):
                    point[key] = as_param(d, value)
                else:
                    drawn.append(
                        f"start point {number}: {key} is drawn, train.py's {value!r} is "
                        "outside the space"
                    )
            points.append(point)
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
        rounds = max(2, *(len(values) for values in ends.values()))
        return [{key: v[i % len(v)] for key, v in ends.items()} for i in range(rounds)]


def args_of(values: dict[str, Any]) -> list[str]:
    """Values as command-line arguments: strings as they are (jsonargparse would keep the
    quotes of a JSON string for a str option), anything else as JSON (lists, numbers)."""
    return [
        f"--{key}={value if isinstance(value, str) else json.dumps(value)}"
        for key, value in values.items()
    ]


def to_param(value: Any) -> Any:
    """A choice as Optuna stores it: scalars as plain ones (a parsed PositiveInt as an int),
    lists and mappings (a parsed tuple of layer widths too) as JSON text."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value if value is None else json.dumps(list(value) if isinstance(value, tuple) else value)


def from_param(value: Any) -> Any:
    """The choice back from what Optuna stored."""
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


def contains(d: BaseDistribution, value: Any) -> bool:
    """Whether ``d`` can draw ``value``, of the same type: 64.0 is not the choice 64, nor
    False the choice 0 (the trial would run one and Optuna store the other)."""
    if isinstance(d, CategoricalDistribution):
        try:
            param = to_param(value)
        except TypeError:  # not JSON (a path, a namespace): no choice is
            return False
        return any(type(c) is type(param) and c == param for c in d.choices)
    assert isinstance(d, FloatDistribution | IntDistribution), "the three kinds of KINDS"
    kinds = (int,) if isinstance(d, IntDistribution) else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not d.low <= value <= d.high:
        return False
    steps = (value - d.low) / d.step if d.step else 0.0
    return math.isclose(steps, round(steps), abs_tol=1e-8)


def as_param(d: BaseDistribution, value: Any) -> Any:
    if isinstance(d, CategoricalDistribution):
        return to_param(value)
    return int(value) if isinstance(d, IntDistribution) else float(value)


def load_spec(path: Path) -> SweepSpec:
    """Read and check a sweep file (its keys against the config: check_keys)."""
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SpaceError(f"--space {path}: no such file (default: configs/sweep.yaml)") from None
    except yaml.YAMLError as error:
        raise SpaceError(f"--space {path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("space"), dict) or not raw["space"]:
        raise SpaceError(
            f"--space {path}: expected a mapping with a non-empty 'space:' of dotted config "
            "keys, e.g. space: {model.lr: " + EXAMPLE + "}"
        )
    unknown = set(raw) - set(TOP_KEYS)
    if unknown:
        raise SpaceError(f"{path}: unknown top-level key(s) {sorted(unknown)}: expected {TOP_KEYS}")
    metric = raw.get("metric", "val/acc")
    if not isinstance(metric, str) or not metric:
        raise SpaceError(f"{path}: metric {metric!r}: must be a logged metric name, e.g. val/acc")
    pruner = raw.get("pruner") or {}
    kind = pruner.get("kind", "median") if isinstance(pruner, dict) else None
    if kind not in ("median", "none") or set(pruner) - set(PRUNER_KEYS):
        raise SpaceError(f"{path}: pruner {pruner!r}: expected " + PRUNER_EXAMPLE)
    counts = {name: pruner.get(name, 3) for name in PRUNER_KEYS[1:]}
    for name, value in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise SpaceError(f"{path}: pruner.{name} {value!r}: must be 0 or more")
    space = {str(key): distribution(f"{path}: space key {key}", d) for key, d in raw["space"].items()}
    return SweepSpec(
        metric=metric,
        direction=one_of(path, raw, "direction", ("maximize", "minimize")),
        pruner=kind,
        **counts,
        space=space,
        start=start_points(path, raw.get("start"), space),
        select=one_of(path, raw, "select", ("best", "simplest")),
    )


def one_of(path: Path, raw: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    """``raw[key]``, one of ``allowed`` (the first when left out)."""
    value = raw.get(key, allowed[0])
    if value not in allowed:
        raise SpaceError(f"{path}: {key} {value!r}: must be {' or '.join(allowed)}")
    return value


def distribution(where: str, raw: Any) -> BaseDistribution:
    """Optuna's distribution for one space entry. Its constructor checks the bounds, the
    step and the log scale; only what it would take silently is refused here (1.5 for an
    int, an infinite bound, a bool), and choices that are lists become JSON text."""
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind not in KINDS:
        raise SpaceError(f"{where}: {raw!r} is not a distribution: expected {EXAMPLE} (or int, categorical)")
    args = {name: value for name, value in raw.items() if name != "type"}
    if kind == "categorical":
        if not isinstance(args.get("choices"), list):
            raise SpaceError(f"{where}: choices must be a non-empty list, e.g. [32, 64, 128]")
        args["choices"] = [to_param(choice) for choice in args["choices"]]
    for name in ("low", "high", "step") if kind != "categorical" else ():
        value = args.get(name)
        number = isinstance(value, (int,) if kind == "int" else (int, float))
        if value is not None and (isinstance(value, bool) or not number or not math.isfinite(value)):
            raise SpaceError(f"{where}: {name} must be a finite {kind} number; got {value!r}")
    try:
        return KINDS[kind](**args)
    except (TypeError, ValueError) as error:  # Optuna's own check, or a missing bound
        raise SpaceError(f"{where}: {error}".replace(".__init__()", "")) from None


def start_points(
    path: Path, raw: Any, space: dict[str, BaseDistribution]
) -> tuple[dict[str, Any], ...]:
    """``start:``: a list of mappings of space keys to values their distributions hold."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(point, dict) for point in raw):
        example = "e.g. start: [{}, " + "{model.lr: 0.01}]"
        raise SpaceError(f"{path}: start must be a list of mappings of space keys, {example}")
    for number, point in enumerate(raw):
        where = f"{path}: start point {number}"
        for key, value in point.items():
            if key not in space:
                close = difflib.get_close_matches(str(key), list(space), n=1, cutoff=0.5)
                hint = f"did you mean {close[0]}?" if close else "add it to space: first"
                raise SpaceError(f"{where}: {key} is no space key: {hint}")
            d = space[key]
            if isinstance(value, str) and not isinstance(d, CategoricalDistribution):
                raise SpaceError(
                    f"{where}: {key}: {value!r} is text, not a number (YAML reads 1e-2 as "
                    "text: write 1.0e-2)"
                )
            if not contains(d, value):
                raise SpaceError(f"{where}: {key}: {value!r} is outside its distribution {d}")
    return tuple(raw)


def check_keys(spec: SweepSpec, valid_keys: Iterable[str]) -> None:
    """Every space key must be a key of the parsed config: name the closest one if not."""
    valid = [key for key in valid_keys if not key.startswith("__")]
    for key in spec.space:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]}?" if close else "see python train.py --print_config"
            raise SpaceError(f"space key {key} is no config key: {hint}")
