"""The command line: Lightning's LightningCLI (YAML + overrides + --print_config), with the
network's shape and classes linked from the data and every check made before training."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import lightning as L
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from ..data.datamodule import DataModule
from ..data.sources import DataError
from ..export.formats import ExportFormatError, Format, check_formats
from ..module import LitModel
from ..networks import NetworkError, check_network, check_network_output
from .checkpoints import (
    CheckpointError,
    check_resumable,
    check_same_model,
    continue_in_checkpoint_dir,
    resolve_ckpt_path,
    run_dir,
)
from .hardware import HardwareError, check_hardware
from .loggers import AfterBuild, continue_logger_run, prepare_logger_config


class OptionError(ValueError):
    """A Trainer option out of its range (our own classes' ranges are in their signatures)."""


# Bad input found while the CLI builds the run: one line and exit code 2, no traceback.
STARTUP_ERRORS = (
    CheckpointError,
    DataError,
    ExportFormatError,
    HardwareError,
    NetworkError,
    OptionError,
)
# Trainer options that Lightning takes below 1 and then fails on (or trains nothing).
AT_LEAST_ONE = ("max_epochs", "accumulate_grad_batches", "log_every_n_steps")
# What the network and the module learn from the data (the user never types them).
LINKED_FROM_DATA = {
    "input_shape": ("model.input_shape", "model.net.init_args.input_shape"),
    "num_outputs": ("model.num_outputs", "model.net.init_args.num_outputs"),
    "output_names": ("model.output_names",),
    "task": ("model.task_kind",),
    "target_transform": ("model.target_transform",),
}


class ConciseParser(LightningArgumentParser):
    """A bad option or value: the error and where to look, not 50 lines of usage first."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        # Union errors list every subtype tried; the None alternative and type names are noise.
        noise = (
            "NoneType",
            "Subtypes:",
            "Errors:",
            "Given value type",
            "Union subtypes",
            "Expected a path but",
        )
        lines = [line for line in message.strip().splitlines() if line.strip()]
        message = "\n".join(line for line in lines if not any(word in line for word in noise))
        sys.stderr.write(
            f"error: {message}\n"
            "  every option: python train.py --help; current values: --print_config\n"
        )
        self.exit(2)


class RunConfig(SaveConfigCallback):
    """Lightning's SaveConfigCallback, writing config.yaml into the run's own folder beside
    checkpoints/ and summary.json, whatever the logger (Lightning writes it into
    trainer.log_dir: shared by every W&B run, and missing for an MLflow database store)."""

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Nothing yet: this runs in setup, before the checkpoint callback names the folder."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            path = run_dir(trainer) / self.config_filename
            path.parent.mkdir(parents=True, exist_ok=True)
            self.parser.save(self.config, str(path), skip_none=False, overwrite=True)


class ProjectCLI(LightningCLI):
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        for source, targets in LINKED_FROM_DATA.items():
            for target in targets:
                parser.link_arguments(f"data.{source}", target, apply_on="instantiate")
        # A live progress bar in a terminal; none in CI logs and files, where it is noise.
        parser.set_defaults({"trainer.enable_progress_bar": sys.stdout.isatty()})
        parser.add_argument(
            "--ckpt_path",
            type=str | None,
            default=None,
            help="Resume training: a checkpoint path, or 'last' for the newest last.ckpt in runs/.",
        )
        parser.add_argument(
            "--export.formats",
            type=list[Format] | None,
            default=None,
            help="Formats exported from the best checkpoint at the end: null for "
            "[torchscript, int8, torch.export], [] for none; onnx needs the onnx extra.",
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then check what needs only the config, before seeding, the Trainer, the
        logger or a run folder exist. (A bad data file is found next, when the data module
        is built, still before training.)"""
        self.args = list(sys.argv[1:] if args is None else args)
        super().parse_arguments(parser, args)
        trainer = self.config.trainer
        for key in AT_LEAST_ONE:
            value = trainer.get(key)
            if isinstance(value, int) and value < 1 and (key, value) != ("max_epochs", -1):
                no_limit = " (-1: no limit)" if key == "max_epochs" else ""
                raise OptionError(f"--trainer.{key} {value}: must be 1 or more{no_limit}.")
        check_hardware(
            trainer.accelerator, trainer.devices, trainer.precision, self.accelerator_source()
        )
        check_formats(self.config.export.formats or [])
        check_network(self.config.model.net)
        ckpt_path = resolve_ckpt_path(self.config.ckpt_path, Path(trainer.default_root_dir))
        self.config.ckpt_path = ckpt_path
        self.continue_logger_run: AfterBuild | None = None
        if ckpt_path is not None:
            step = check_resumable(ckpt_path, trainer.max_epochs)
            continue_in_checkpoint_dir(trainer.callbacks or [], Path(ckpt_path))
            self.continue_logger_run = continue_logger_run(trainer.logger, Path(ckpt_path), step)

    def instantiate_classes(self) -> None:
        """Build model, data and Trainer, then try the network once on the data's shape."""
        prepare_logger_config(self.config.trainer.logger)
        super().instantiate_classes()
        trainer: Any = self.trainer  # its callbacks attribute is set at run time, untyped
        if not trainer.loggers:  # --trainer.logger false: nothing to log learning rates to
            trainer.callbacks = [
                c for c in trainer.callbacks if not isinstance(c, LearningRateMonitor)
            ]
        data = self.datamodule
        check_network_output(self.model.model.net, data.input_shape, data.num_outputs)
        if self.config.ckpt_path is not None:
            check_same_model(self.config.ckpt_path, self.model)
        if self.continue_logger_run is not None:
            self.continue_logger_run(trainer.loggers)

    def accelerator_source(self) -> list[str]:
        """Where the accelerator came from: a command-line flag or the --config files."""
        for index in reversed(range(len(self.args))):
            arg = self.args[index]
            if arg.startswith("--trainer.accelerator="):
                return [arg]
            if arg == "--trainer.accelerator" and index + 1 < len(self.args):
                return [f"{arg} {self.args[index + 1]}"]
        return [str(path) for path in self.config.get("config") or []] or ["configs/default.yaml"]


def build_cli(
    args: list[str] | None, default_config: Path, cli_class: type[ProjectCLI] = ProjectCLI
) -> ProjectCLI:
    """Parse ``args`` on top of ``default_config``; build model, data and Trainer. Raises one
    of STARTUP_ERRORS, before any training, for a run that cannot work here."""
    return cli_class(
        LitModel,
        DataModule,
        args=args,
        run=False,
        parser_class=ConciseParser,
        save_config_callback=RunConfig,
        seed_everything_default=42,
        parser_kwargs={"default_config_files": [str(default_config)]},
        # Inputs live in configs/, runs under runs/: overwriting a run's copy is safe.
        save_config_kwargs={"overwrite": True, "save_to_log_dir": False},
    )
