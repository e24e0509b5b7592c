"""What a sweep checks and derives before its first trial: a bad space, metric or option
costs one line and exit code 2, not a failed trial minutes later."""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import lightning as L
import optuna

from ..data.splits import max_folds
from ..training.cli import STARTUP_ERRORS, ProjectCLI, build_cli
from .space import SpaceError, SweepSpec, args_of

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Every trial's defaults, before the sweep's arguments: no progress bar (the sweep prints a
# line per trial) and no export (best.yaml trains the winner).
TRIAL_DEFAULTS = ["--trainer.enable_progress_bar=false", "--export.formats=[]"]
# Below this many validation samples one sample moves accuracy by over half a point: trials
# tie or swap places by chance, and the sweep suggests cross-validation.
SMALL_VALIDATION = 200
QUIET: dict[str, Any] = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)


class ParseOnlyCLI(ProjectCLI):
    """The project's CLI that parses and checks its arguments, and builds nothing."""

    def instantiate_classes(self) -> None:
        pass


@contextlib.contextmanager
def quiet_trials() -> Iterator[None]:
    """Lightning's and Optuna's per-trial chatter off (the sweep prints a line per trial);
    as it was afterwards (a sweep run from a test or a notebook)."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels, verbosity = [logger.level for logger in loggers], optuna.logging.get_verbosity()
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
        description="Optuna search over configs/sweep.yaml's space; any other option is a "
        "train.py option for every trial (python train.py --help lists them).",
        allow_abbrev=False,  # --trainer.max_epochs must never be taken for --trials
    )
    add = parser.add_argument
    add("--trials", type=int, required=True, help="the study's total of finished trials")
    add("--name", help="the study and its folder runs/sweeps/NAME (default: the space's name)")
    add("--storage", help="an Optuna RDB URL (default: sqlite:///runs/sweeps/NAME/study.db)")
    add("--space", type=Path, default=default_space, help="the search space (%(default)s)")
    add("--folds", type=int, default=1, help="k-fold cross-validation: a trial's K fits' mean")
    options, rest = parser.parse_known_args(args)
    if options.trials < 1:
        parser.error(f"--trials {options.trials}: must be 1 or more (the study's finished trials)")
    if options.folds < 1:
        parser.error(f"--folds {options.folds}: must be 1 (no cross-validation) or more")
    options.name = options.name or options.space.stem
    if not NAME.match(options.name):
        parser.error(f"--name {options.name!r}: use letters, digits, '.', '_' and '-' only")
    return options, rest


def check_runnable_in_process(cli: ProjectCLI) -> None:
    """Trials run one after another in this process: not from a checkpoint, nor on several
    processes."""
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


def check_folds(cli: ProjectCLI, folds: int) -> str | None:
    """Refuse more folds than the training split holds; a hint to use folds when the
    validation split is small and there are none."""
    train, val = len(cli.datamodule.train_idx), len(cli.datamodule.val_idx)
    if folds > 1 and cli.config.get("data.val_fold"):
        raise SpaceError("--data.val_fold: --folds sets each trial's fold itself; drop it")
    most = max_folds(train, val)
    if folds > most:
        raise SpaceError(
            f"--folds {folds}: {train} training and {val} validation samples make {most} "
            f"folds of the validation split's size: use --folds {most} or fewer, or lower "
            "--data.val_fraction"
        )
    if folds > 1 or val >= SMALL_VALIDATION or most < 2:
        return None
    return (
        f"note: the validation split has {val} samples, so trials that differ by a sample or "
        f"two look alike: --folds {min(most, 5)} compares them on {min(most, 5)} folds "
        "(cross-validation)"
    )


def check_metric(cli: ProjectCLI, metric: str) -> None:
    """The metric must be one the module logs in validation, where the pruner reads it:
    one validation batch, without logger or checkpoint, tells which are logged."""
    accelerator = cli.config.trainer.accelerator
    trainer = L.Trainer(accelerator=accelerator, devices=1, limit_val_batches=1, **QUIET)
    trainer.validate(cli.model, datamodule=cli.datamodule, verbose=False)
    if metric not in trainer.callback_metrics:
        logged = ", ".join(sorted(trainer.callback_metrics))
        raise SpaceError(f"metric {metric!r} is not logged in validation: use one of {logged}")


def refusal(args: list[str], default_config: Path) -> str | None:
    """Why train.py refuses ``args``, in one line; None if it takes them. (The parser prints
    its reason and exits; our own checks raise.)"""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            build_cli(args, default_config, ParseOnlyCLI)
    except SystemExit:
        lines = [line.strip() for line in stderr.getvalue().splitlines()]
        kept = [line for line in lines if line and not line.startswith("every option:")]
        return " ".join(kept).removeprefix("error: ") or "refused by the option parser"
    except STARTUP_ERRORS as error:
        return str(error)
    return None


def check_edges(spec: SweepSpec, args: list[str], default: Path, extra: dict[str, Any]) -> None:
    """Parse the space's edges as its trials will be (``extra``: a fold, the log folders):
    a value that train.py's options refuse stops the sweep here, named with its key."""
    for edge in spec.edges():
        if refusal([*args, *args_of({**edge, **extra})], default) is None:
            continue
        for key, value in edge.items():  # which value: each one alone
            if reason := refusal([*args, *args_of({key: value, **extra})], default):
                raise SpaceError(f"space key {key}: train.py refuses {value!r}: {reason}")
        raise SpaceError(f"train.py refuses the space's values {edge} together")


def trial_log_values(config: Any, folder: Path) -> Callable[[int, int], dict[str, str]]:
    """Where each trial's logs and checkpoints go: for TensorBoard and CSV
    runs/sweeps/NAME/trials/trial-007, for W&B one run per trial named NAME-trial-007 in
    runs/sweeps/NAME/wandb, for MLflow one run per trial named trial-007 in the experiment
    sweep-NAME. The other folds of a cross-validated trial go beside it: trial-007-fold1."""
    kind = str(getattr(config.get("trainer.logger"), "class_path", "")).rsplit(".", 1)[-1]

    def values(number: int, fold: int = 0) -> dict[str, str]:
        trial = f"trial-{number:03d}" + (f"-fold{fold}" if fold else "")
        names = {  # the logger's init_args
            "TensorBoardLogger": {"save_dir": str(folder), "name": "trials", "version": trial},
            "WandbLogger": {"save_dir": str(folder), "name": f"{folder.name}-{trial}"},
            "MLFlowLogger": {"experiment_name": f"sweep-{folder.name}", "run_name": trial},
        }
        names["CSVLogger"] = names["TensorBoardLogger"]
        logger = {f"trainer.logger.init_args.{k}": v for k, v in names.get(kind, {}).items()}
        return {"trainer.default_root_dir": str(folder / "trials" / trial), **logger}

    return values


def best_config_text(args: list[str], default_config: Path, header: list[str]) -> str:
    """The full config of a trial, as `python train.py --print_config` would write it for
    the sweep's arguments plus the trial's values: `--config` reproduces the trial."""
    cli = build_cli(args, default_config, ParseOnlyCLI)
    return "".join(f"# {line}\n" for line in header) + cli.parser.dump(cli.config, skip_none=False)
