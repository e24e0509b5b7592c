"""The command line: Lightning's own LightningCLI (YAML + overrides + --print_config)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from .artifacts import Format, check_formats
from .checkpoints import CheckpointError, resolve_ckpt_path
from .data import DigitsDataModule
from .data_files import DataError
from .module import LitClassifier


class ConciseParser(LightningArgumentParser):
    """A bad option or value: the error and where to look, not 50 lines of usage first."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        # Union errors list every subtype tried; the None alternative and type names are noise.
        noise = ("NoneType", "Subtypes:", "Errors:", "Given value type")
        message = "\n".join(
            line for line in message.strip().splitlines() if not any(word in line for word in noise)
        )
        sys.stderr.write(
            f"error: {message}\n"
            "  every option: python train.py --help; current values: --print_config\n"
        )
        self.exit(2)


class ProjectCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        # The model's input and output sizes follow the data, whatever data is plugged in.
        parser.link_arguments("data.num_features", "model.in_features", apply_on="instantiate")
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
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
            help="Formats exported from the best checkpoint at the end: null for all available "
            "(ONNX needs the onnx extra), [] for none.",
        )

    def instantiate_classes(self) -> None:
        """Build data, model and Trainer, and check every input first: a bad export format,
        data file or checkpoint stops here as one error line (exit 2), before training."""
        try:
            check_formats(self.config.export.formats or [])
        except ValueError as error:
            self.parser.error(str(error))
        try:
            super().instantiate_classes()
            root = Path(self.trainer.default_root_dir)
            self.ckpt_path = resolve_ckpt_path(self.config.get("ckpt_path"), root)
        except (DataError, CheckpointError) as error:
            self.parser.error(str(error))


def build_cli(args: list[str] | None, default_config: Path) -> ProjectCLI:
    """Parse ``args`` on top of ``default_config`` and instantiate model, data and Trainer."""
    return ProjectCLI(
        LitClassifier,
        DigitsDataModule,
        args=args,
        run=False,
        parser_class=ConciseParser,
        seed_everything_default=42,
        parser_kwargs={"default_config_files": [str(default_config)]},
        # Inputs live in configs/, runs under runs/: overwriting a run's copy is safe.
        save_config_kwargs={"overwrite": True},
    )
