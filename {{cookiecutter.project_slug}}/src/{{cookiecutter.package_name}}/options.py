"""Option values checked once, right after parsing, before anything is built or written.

The types are checked by jsonargparse; this checks the ranges that the types cannot say,
each with the fix, so that a bad value is one line and exit code 2, not a traceback from
numpy, scikit-learn or torch minutes later (batch_size 0, say, reached torch's DataLoader).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class OptionError(ValueError):
    """An option value outside its range."""


def _positive(value: Any) -> bool:
    return value > 0


# key: (accepts the value, what it must be). None always passes (a default chosen later).
RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "data.batch_size": (_positive, "a positive number of samples, e.g. 64"),
    "data.num_workers": (lambda v: v >= 0, "0 or more worker processes (null: chosen for you)"),
    "data.shift_prob": (lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
    "data.val_fraction": (lambda v: 0 < v < 1, "a fraction in (0, 1), e.g. 0.15"),
    "data.test_fraction": (lambda v: 0 < v < 1, "a fraction in (0, 1), e.g. 0.15"),
    "model.lr": (_positive, "a positive learning rate, e.g. 0.003"),
    "model.weight_decay": (lambda v: v >= 0, "0 or more, e.g. 0.01"),
    "model.warmup_fraction": (lambda v: 0 <= v < 1, "a fraction in [0, 1), e.g. 0.05"),
    "model.label_smoothing": (lambda v: 0 <= v < 1, "a fraction in [0, 1), e.g. 0.1"),
    "trainer.max_epochs": (lambda v: v >= 1 or v == -1, "1 or more epochs (-1: no limit)"),
    "trainer.accumulate_grad_batches": (_positive, "1 or more batches per optimizer step"),
    "trainer.log_every_n_steps": (_positive, "1 or more steps"),
    "trainer.check_val_every_n_epoch": (_positive, "1 or more epochs"),
}


# The arguments of the networks this project ships (model.py), under
# model.net.init_args; a network of your own checks its own in its __init__.
SHIPPED_NETWORKS = tuple(
    f"{__name__.rpartition('.')[0]}.model.{name}" for name in ("MLPClassifier", "ConvClassifier")
)
NETWORK_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "hidden_sizes": (
        lambda v: all(width > 0 for width in v),
        "positive layer widths, e.g. [256, 256] ([] for none)",
    ),
    "channels": (lambda v: all(c > 0 for c in v), "positive channel counts, e.g. [32, 64]"),
    "dropout": (lambda v: 0 <= v < 1, "a probability in [0, 1), e.g. 0.3"),
    "pool_size": (_positive, "a positive size, e.g. 4"),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_options(config: Any) -> None:
    """Raise OptionError for the first option out of range; ``config`` is the parsed
    Namespace (dotted keys)."""
    for key, (accepts, expected) in RANGES.items():
        value = config.get(key)
        if _is_number(value) and not accepts(value):
            raise OptionError(f"--{key} {value}: must be {expected}.")
    net = config.get("model.net")
    if getattr(net, "class_path", None) in SHIPPED_NETWORKS and net.get("init_args"):
        for name, (accepts, expected) in NETWORK_RANGES.items():
            value = net.init_args.get(name)
            numbers = value if isinstance(value, list | tuple) else [value]
            if value is not None and all(map(_is_number, numbers)) and not accepts(value):
                shown = list(value) if isinstance(value, list | tuple) else value
                raise OptionError(f"--model.net.init_args.{name} {shown}: must be {expected}.")
    val, test = config.get("data.val_fraction"), config.get("data.test_fraction")
    if val is not None and test is not None and val + test >= 1:
        raise OptionError(
            f"--data.val_fraction {val} and --data.test_fraction {test} leave no training "
            "split: their sum must be below 1, e.g. 0.15 and 0.15."
        )
