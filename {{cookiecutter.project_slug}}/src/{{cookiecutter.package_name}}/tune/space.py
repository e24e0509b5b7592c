"""The search space of a sweep: configs/sweep.yaml, read, checked and sampled.

Each key of ``space:`` is a dotted config key, the same as on the command line
(`--model.lr` is `model.lr`), and each value names a distribution:

    model.lr: {type: float, low: 1.0e-4, high: 1.0e-1, log: true}
    model.net.init_args.dropout: {type: float, low: 0.0, high: 0.5, step: 0.1}
    trainer.accumulate_grad_batches: {type: int, low: 1, high: 4}
    model.net.init_args.hidden_sizes: {type: categorical, choices: [[128], [256, 256]]}

A trial's values become `--key=value` arguments on top of what the sweep was given, so a
trial is exactly the `python train.py` run that those arguments make.

``start:`` lists the first trials' values (Optuna's sampler chooses from the next trial on),
and ``select:`` which complete trial best.yaml takes (see sweep_report.chosen_trial).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import optuna
import yaml

DIRECTIONS = ("maximize", "minimize")
PRUNERS = ("median", "none")
SELECTIONS = ("simplest", "best")
DISTRIBUTION_KEYS = {
    "float": ({"low", "high"}, {"log", "step"}),
    "int": ({"low", "high"}, {"log", "step"}),
    "categorical": ({"choices"}, set()),
}

# (Built by concatenation: this file is a cookiecutter template, where two braces in a row
# would start a Jinja expression.)
PRUNER_EXAMPLE = "{" + "kind: median|none, startup_trials: 3, warmup_epochs: 5}"
DISTRIBUTION_EXAMPLE = (
    "{" + "type: float|int|categorical, ...}, e.g. {type: float, low: 1.0e-4, high: 0.1, log: true}"
)


class SpaceError(ValueError):
    """A search-space file that cannot be used: named key, what is wrong, the fix."""


@dataclass(frozen=True)
class Distribution:
    """One key's distribution. Categorical choices that are not scalars (a list of layer
    widths) are offered to Optuna as their JSON text, which it can store and compare."""

    key: str
    kind: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: optuna.Trial) -> Any:
        if self.kind == "categorical":
            choices = [to_param(c) for c in self.choices]
            return from_param(trial.suggest_categorical(self.key, choices))
        assert self.low is not None and self.high is not None, "load_spec checks both"
        if self.kind == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log, step=self.step)
        return trial.suggest_int(
            self.key, int(self.low), int(self.high), log=self.log, step=int(self.step or 1)
        )

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is one this distribution can draw (a start point must be)."""
        if self.kind == "categorical":
            return self._choice_index(value) is not None
        number = int if self.kind == "int" else (int, float)
        if isinstance(value, bool) or not isinstance(value, number):
            return False
        assert self.low is not None and self.high is not None, "load_spec checks both"
        if not self.low <= value <= self.high:
            return False
        if self.step is None:
            return True
        steps = (value - self.low) / self.step
        return math.isclose(steps, round(steps), abs_tol=1e-8)

    def as_param(self, value: Any) -> Any:
        """``value`` (one it contains) as Optuna stores it for this distribution."""
        if self.kind == "categorical":
            index = self._choice_index(value)
            assert index is not None, "only for a value the distribution contains"
            return to_param(self.choices[index])
        return float(value) if self.kind == "float" else int(value)

    def _choice_index(self, value: Any) -> int | None:
        """The choice equal to ``value`` and of its type (64.0 is not the choice 64, nor
        False the choice 0: the trial would run one and Optuna store the other)."""
        value = _plain(value)
        for index, choice in enumerate(self.choices):
            try:
                if type(choice) is type(value) and to_param(choice) == to_param(value):
                    return index
            except TypeError:  # not JSON (a path, a namespace): no choice is
                return None
        return None

    def extremes(self) -> list[Any]:
        """The values at the edges of the distribution: if these parse and pass the range
        checks, so does every value in between."""
        return [self.low, self.high] if self.kind != "categorical" else list(self.choices)


@dataclass(frozen=True)
class SweepSpec:
    """What configs/sweep.yaml says: what to optimise, how to prune, over which space."""

    metric: str = "val/acc"
    direction: Literal["maximize", "minimize"] = "maximize"
    pruner: str = "median"
    startup_trials: int = 3
    warmup_epochs: int = 3
    space: tuple[Distribution, ...] = field(default_factory=tuple)
    # The first trials' values, one mapping per trial: space keys to values.
    start: tuple[dict[str, Any], ...] = ()
    select: str = "best"

    @property
    def chosen_word(self) -> str:
        """What the outputs call the trial best.yaml takes: "best", or "chosen" when it is
        the simplest trial as good as the best."""
        return "best" if self.select == "best" else "chosen"

    @property
    def metric_is_accuracy(self) -> bool:
        """An accuracy is a proportion of the validation samples: it has a binomial standard
        error (sweep_report.standard_error); a loss, or an F1 score, has none without folds."""
        name = self.metric.rsplit("/", 1)[-1].lower()
        return name in ("acc", "accuracy") or name.endswith(("_acc", "_accuracy"))

    def start_params(
        self, config_value: Callable[[str], Any]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The start trials' parameters as Optuna stores them, and a line for each value the
        sampler draws instead. A key a start point leaves out takes ``config_value(key)``,
        the value train.py would use, when the space holds it; otherwise it is drawn."""
        points, drawn = [], []
        for number, given in enumerate(self.start):
            point = {}
            for distribution in self.space:
                key = distribution.key
                value = given[key] if key in given else config_value(key)
                if key in given or distribution.contains(value):
                    point[key] = distribution.as_param(value)
                else:
                    drawn.append(
                        f"start point {number}: {key} is drawn, train.py's {value!r} is "
                        "outside the space"
                    )
            points.append(point)
        return points, drawn

    def values(self, params: dict[str, Any]) -> dict[str, Any]:
        """A trial's values, from what Optuna stored (lists back from their JSON text)."""
        return {key: from_param(value) for key, value in params.items()}

    def as_args(self, params: dict[str, Any]) -> list[str]:
        """A trial's values as command-line arguments."""
        return args_of(self.values(params))


def args_of(values: dict[str, Any]) -> list[str]:
    """Values as command-line arguments: strings as they are (jsonargparse keeps the quotes
    of a JSON string for a str option), anything else as JSON text (lists, numbers, None)."""
    return [
        f"--{key}={value if isinstance(value, str) else json.dumps(value)}"
        for key, value in values.items()
    ]


def _plain(value: Any) -> Any:
    """A parsed config value as YAML would give it (a tuple of layer widths as a list)."""
    return list(value) if isinstance(value, tuple) else value


def to_param(value: Any) -> Any:
    """A categorical choice as Optuna stores it (a scalar)."""
    return (
        value if value is None or isinstance(value, bool | int | float | str) else json.dumps(value)
    )


def from_param(value: Any) -> Any:
    """The choice back from what Optuna stored (JSON text of a list or a mapping)."""
    if isinstance(value, str) and value[:1] in "[{":
        return json.loads(value)
    return value


def load_spec(path: Path) -> SweepSpec:
    """Read and check a sweep file's own structure (not yet against the config keys)."""
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SpaceError(f"--space {path}: no such file (default: configs/sweep.yaml)") from None
    except yaml.YAMLError as error:
        raise SpaceError(f"--space {path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("space"), dict) or not raw["space"]:
        raise SpaceError(
            f"--space {path}: expected a mapping with a non-empty 'space:' of dotted config "
            "keys, e.g. space: {model.lr: {type: float, low: 1.0e-4, high: 1.0e-1, log: true}}"
        )
    unknown = set(raw) - {"metric", "direction", "pruner", "space", "start", "select"}
    if unknown:
        raise SpaceError(
            f"{path}: unknown top-level key(s) {sorted(unknown)}: "
            "expected metric, direction, pruner, space, start and select"
        )
    select = raw.get("select", "best")
    if select not in SELECTIONS:
        raise SpaceError(f"{path}: select {select!r}: must be simplest or best")
    direction = raw.get("direction", "maximize")
    if direction not in DIRECTIONS:
        raise SpaceError(f"{path}: direction {direction!r}: must be maximize or minimize")
    pruner = raw.get("pruner") or {}
    kind = pruner.get("kind", "median") if isinstance(pruner, dict) else None
    if kind not in PRUNERS:
        raise SpaceError(f"{path}: pruner {pruner!r}: expected " + PRUNER_EXAMPLE)
    startup, warmup = pruner.get("startup_trials", 3), pruner.get("warmup_epochs", 3)
    for name, value in (("startup_trials", startup), ("warmup_epochs", warmup)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise SpaceError(f"{path}: pruner.{name} {value!r}: must be 0 or more")
    metric = raw.get("metric", "val/acc")
    if not isinstance(metric, str) or not metric:
        raise SpaceError(f"{path}: metric {metric!r}: must be a logged metric name, e.g. val/acc")
    space = tuple(_distribution(path, key, value) for key, value in raw["space"].items())
    start = _start_points(path, raw.get("start"), {d.key: d for d in space})
    maximize = direction == "maximize"
    return SweepSpec(
        metric,
        "maximize" if maximize else "minimize",
        kind,
        startup,
        warmup,
        space,
        start,
        select,
    )


def _start_points(
    path: Path, raw: Any, space: dict[str, Distribution]
) -> tuple[dict[str, Any], ...]:
    """``start:``, a list of mappings of space keys to values the space can draw."""
    if raw is None:
        return ()
    example = "e.g. start: [{}, " + "{model.lr: 0.01}]"
    if not isinstance(raw, list) or not all(isinstance(point, dict) for point in raw):
        raise SpaceError(f"{path}: start must be a list of mappings of space keys, {example}")
    for number, point in enumerate(raw):
        for key, value in point.items():
            if key not in space:
                close = difflib.get_close_matches(str(key), list(space), n=1, cutoff=0.5)
                hint = f"did you mean {close[0]}?" if close else "add it to space: first"
                raise SpaceError(f"{path}: start point {number}: {key} is no space key: {hint}")
            if isinstance(value, str) and space[key].kind != "categorical":
                raise SpaceError(
                    f"{path}: start point {number}: {key}: {value!r} is text, not a number "
                    "(YAML reads 1e-2 as text: write 1.0e-2)"
                )
            if not space[key].contains(value):
                raise SpaceError(
                    f"{path}: start point {number}: {key}: {value!r} is outside its "
                    f"distribution {_describe(space[key])}"
                )
    return tuple(raw)


def _describe(distribution: Distribution) -> str:
    if distribution.kind == "categorical":
        return f"(choices {list(distribution.choices)})"
    step = f", step {distribution.step}" if distribution.step is not None else ""
    log = ", log" if distribution.log else ""
    return f"({distribution.kind} from {distribution.low} to {distribution.high}{step}{log})"


def _distribution(path: Path, key: Any, value: Any) -> Distribution:
    where = f"{path}: space key {key}"
    if not isinstance(value, dict) or value.get("type") not in DISTRIBUTION_KEYS:
        raise SpaceError(
            f"{where}: {value!r} is not a distribution: expected " + DISTRIBUTION_EXAMPLE
        )
    kind = value["type"]
    required, optional = DISTRIBUTION_KEYS[kind]
    given = set(value) - {"type"}
    if not required <= given or given - required - optional:
        allowed = ", ".join([*sorted(required), *(f"[{k}]" for k in sorted(optional))])
        raise SpaceError(f"{where}: a {kind} distribution takes {allowed}; got {sorted(given)}")
    if kind == "categorical":
        choices = value["choices"]
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"{where}: choices must be a non-empty list, e.g. [32, 64, 128]")
        return Distribution(str(key), kind, choices=tuple(choices))
    low, high, step, log = value["low"], value["high"], value.get("step"), value.get("log", False)
    number = (int,) if kind == "int" else (int, float)
    bounds = [low, high] + ([step] if step is not None else [])
    if any(isinstance(b, bool) or not isinstance(b, number) for b in bounds):
        raise SpaceError(f"{where}: low, high and step must be {kind} numbers; got {value!r}")
    if any(not math.isfinite(b) for b in bounds):
        raise SpaceError(f"{where}: low, high and step must be finite; got {value!r}")
    if not low <= high:
        raise SpaceError(f"{where}: low {low} is above high {high}")
    if not isinstance(log, bool) or (log and low <= 0):
        raise SpaceError(f"{where}: log: true needs low > 0 (got low {low}, log {log!r})")
    if step is not None and (step <= 0 or log):
        raise SpaceError(f"{where}: step must be positive, and cannot be combined with log")
    return Distribution(str(key), kind, low=low, high=high, log=log, step=step)


def check_keys(spec: SweepSpec, valid_keys: Iterable[str]) -> None:
    """Every space key must be a key of the parsed config: name the closest one if not."""
    valid = [key for key in valid_keys if not key.startswith("__")]
    for distribution in spec.space:
        if distribution.key not in valid:
            close = difflib.get_close_matches(distribution.key, valid, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]}?" if close else "see python train.py --print_config"
            raise SpaceError(f"space key {distribution.key} is no config key: {hint}")
