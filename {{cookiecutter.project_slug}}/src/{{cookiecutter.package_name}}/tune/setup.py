"""Everything a sweep checks and derives before its first trial, so that a bad space, metric
or option costs one line and exit code 2, not a failed trial minutes later."""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from itertools import cycle
from pathlib import Path
from typing import Any, NoReturn

import lightning as L
import optuna

from .cli import ParseOnlyCLI, ProjectCLI
from .data import max_folds
from .search_space import SpaceError, SweepSpec

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# What every trial runs with unless the sweep's own arguments say otherwise: no progress
# bar (the sweep prints a line per trial) and no export (best.yaml trains the winner).
TRIAL_DEFAULTS = ["--trainer.enable_progress_bar=false", "--export.formats=[]"]


@contextlib.contextmanager
def quiet_trials() -> Iterator[None]:
    """Lightning's and Optuna's per-trial chatter (seed, model summary, Optuna's own trial
    lines) off while the sweep prints its line per trial; as it was afterwards (a sweep run
    in-process, from a test or a notebook, leaves the levels alone)."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    verbosity = optuna.logging.get_verbosity()
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        optuna.logging.set_verbosity(verbosity)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (python sweep.py --help)\n")


def parse_sweep_args(args: list[str], default_space: Path) -> tuple[argparse.Namespace, list[str]]:
    """The sweep's own options; every other argument goes to each trial as to train.py."""
    parser = OneLineParser(
        prog="sweep.py",
        description="Optuna search over configs/sweep.yaml's space; every other option is a "
        "train.py option, applied to every trial (python train.py --help lists them).",
        allow_abbrev=False,  # --trainer.max_epochs must never be taken for --trials
    )
    parser.add_argument(
        "--trials",
        type=int,
        required=True,
        help="the study's total of "
        "finished (complete or pruned) trials; a rerun runs only the missing ones",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="the study and its folder runs/sweeps/NAME (default: the space file's name)",
    )
    parser.add_argument(
        "--storage",
        default=None,
        help="an Optuna RDB URL shared by several "
        "processes or machines (default: sqlite:///runs/sweeps/NAME/study.db)",
    )
    parser.add_argument(
        "--space", type=Path, default=default_space, help="the search space (default: %(default)s)"
    )
    parser.add_argument(
        "--folds",
        type=int,
        default=1,
        help="k-fold cross-validation: each trial trains K times, validating on K disjoint "
        "folds, and its value is their mean (for small data; default: %(default)s, the "
        "validation split only)",
    )
    options, rest = parser.parse_known_args(args)
    if options.trials < 1:
        parser.error(
            f"--trials {options.trials}: must be 1 or more (the number of trials "
            "the study should have finished)"
        )
    if options.folds < 1:
        parser.error(f"--folds {options.folds}: must be 1 (no cross-validation) or more")
    options.name = options.name or options.space.stem
    if not NAME.match(options.name):
        parser.error(f"--name {options.name!r}: use letters, digits, '.', '_' and '-' only")
    return options, rest


def check_runnable_in_process(cli: ProjectCLI) -> None:
    """Trials run one after another in this process: a resumed checkpoint or a
    multi-process preset cannot be one of them."""
    if cli.config.get("ckpt_path"):
        raise SpaceError("--ckpt_path: a sweep starts every trial afresh; drop it")
    trainer = cli.trainer
    if trainer.world_size > 1:
        raise SpaceError(
            f"this config trains on {trainer.world_size} processes ({trainer.num_nodes} "
            f"node(s) x {trainer.num_devices} device(s)): a sweep runs its trials in this "
            "process, so give each trial one device (--trainer.devices 1) and start one "
            "sweep.py per GPU sharing --storage (README: Tune it)"
        )


# Below this many validation samples one sample moves accuracy by more than half a point:
# trials then tie or swap places by chance, and the sweep suggests cross-validation.
SMALL_VALIDATION = 200


def check_folds(cli: ProjectCLI, folds: int) -> str | None:
    """Refuse more folds than the training split holds; return a hint to use folds when the
    validation split is small and there are none (None otherwise)."""
    data = cli.datamodule
    train, val = len(data.train_idx), len(data.val_idx)
    if folds > 1 and cli.config.get("data.val_fold"):
        raise SpaceError("--data.val_fold: --folds sets each trial's fold itself; drop it")
    available = max_folds(train, val)
    if folds > available:
        raise SpaceError(
            f"--folds {folds}: {train} training and {val} validation samples make "
            f"{available} folds of the validation split's size: use --folds {available} or "
            "fewer, or lower --data.val_fraction"
        )
    if folds == 1 and val < SMALL_VALIDATION and available > 1:
        return (
            f"note: the validation split has {val} samples, so trials that differ by a "
            f"sample or two look alike: --folds {min(available, 5)} compares them on "
            f"{min(available, 5)} folds (cross-validation)"
        )
    return None


def space_edges(spec: SweepSpec) -> list[dict[str, Any]]:
    """Value sets that reach every edge of the space: all lows, all highs, and every
    categorical choice at least once."""
    categorical = [d for d in spec.space if d.kind == "categorical"]
    rounds = max(2, *(len(d.choices) for d in categorical)) if categorical else 2
    choices = {d.key: cycle(d.choices) for d in categorical}
    return [
        {
            d.key: next(choices[d.key]) if d.kind == "categorical" else d.extremes()[index % 2]
            for d in spec.space
        }
        for index in range(rounds)
    ]


def check_metric(cli: ProjectCLI, metric: str) -> None:
    """The metric must be one the module logs in validation, where the pruner reads it:
    one validation batch, without logger or checkpoint, tells which are logged."""
    trainer = L.Trainer(
        accelerator=cli.config.trainer.accelerator,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
    )
    trainer.validate(cli.model, datamodule=cli.datamodule, verbose=False)
    logged = sorted(trainer.callback_metrics)
    if metric not in logged:
        raise SpaceError(
            f"metric {metric!r} is not logged in validation: use one of {', '.join(logged)}"
        )


def trial_log_values(config: Any, folder: Path) -> Callable[[int, int], dict[str, str]]:
    """Where each trial's logs and checkpoints go (config keys and values): for TensorBoard
    and CSV runs/sweeps/NAME/trials/trial-007 (`tensorboard --logdir runs/sweeps/NAME/trials`
    compares them), for W&B runs/sweeps/NAME/wandb, one run per trial named NAME-trial-007,
    for MLflow one run per trial named trial-007 in the experiment sweep-NAME (same store).
    The other folds of a cross-validated trial go beside it: trial-007-fold1, ..."""
    logger = config.get("trainer.logger")
    kind = str(getattr(logger, "class_path", "")).rsplit(".", 1)[-1]

    def values(number: int, fold: int = 0) -> dict[str, str]:
        trial = f"trial-{number:03d}" + (f"-fold{fold}" if fold else "")
        common = {"trainer.default_root_dir": str(folder / "trials" / trial)}
        logger_key = "trainer.logger.init_args"
        if kind in ("TensorBoardLogger", "CSVLogger"):
            return {
                **common,
                f"{logger_key}.save_dir": str(folder),
                f"{logger_key}.name": "trials",
                f"{logger_key}.version": trial,
            }
        if kind == "WandbLogger":
            return {
                **common,
                f"{logger_key}.save_dir": str(folder),
                f"{logger_key}.name": f"{folder.name}-{trial}",
            }
        if kind == "MLFlowLogger":
            return {
                **common,
                f"{logger_key}.experiment_name": f"sweep-{folder.name}",
                f"{logger_key}.run_name": trial,
            }
        return common  # no logger, or several: checkpoints under default_root_dir

    return values


def best_config_text(args: list[str], default_config: Path, header: list[str]) -> str:
    """The full config of a trial, as `python train.py --print_config` would write it for
    the sweep's arguments plus the trial's values: `--config` reproduces the trial."""
    cli = _parse(args, default_config)
    text = cli.parser.dump(cli.config, skip_none=False)
    return "".join(f"# {line}\n" for line in header) + text


def _parse(args: list[str], default_config: Path) -> ProjectCLI:
    from .cli import build_cli

    return build_cli(args, default_config, ParseOnlyCLI)
