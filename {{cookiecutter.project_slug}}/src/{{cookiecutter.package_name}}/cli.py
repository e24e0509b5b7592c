"""The command line: Lightning's own LightningCLI (YAML + overrides + --print_config)."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.cli import LightningCLI

from .artifacts import Format
from .data import DigitsDataModule
from .module import LitClassifier


class ProjectCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        # The model's input and output sizes follow the data, whatever data is plugged in.
        parser.link_arguments("data.num_features", "model.in_features", apply_on="instantiate")
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
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


def build_cli(args: list[str] | None, default_config: Path) -> ProjectCLI:
    """Parse ``args`` on top of ``default_config`` and instantiate model, data and Trainer."""
    return ProjectCLI(
        LitClassifier,
        DigitsDataModule,
        args=args,
        run=False,
        seed_everything_default=42,
        parser_kwargs={"default_config_files": [str(default_config)]},
        # Inputs live in configs/, runs under runs/: overwriting a run's copy is safe.
        save_config_kwargs={"overwrite": True},
    )
