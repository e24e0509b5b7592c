"""The command line: Lightning's own LightningCLI (YAML + overrides + --print_config)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningCLI

from .checkpoints import continue_in_checkpoint_dir, resolve_ckpt_path
from .data import DigitsDataModule
from .hardware import check_hardware
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

    def parse_arguments(self, parser, args: Any) -> None:
        """Parse, then check what needs only the parsed config: before seeding, the Trainer,
        the logger or any run directory, so a bad preset or checkpoint path costs nothing."""
        self.args = list(sys.argv[1:] if args is None else args)
        super().parse_arguments(parser, args)
        trainer = self.config.trainer
        check_hardware(
            trainer.accelerator, trainer.devices, trainer.precision, self._accelerator_source()
        )
        ckpt_path = resolve_ckpt_path(self.config.ckpt_path, Path(trainer.default_root_dir))
        self.config.ckpt_path = ckpt_path
        if ckpt_path is not None:
            continue_in_checkpoint_dir(trainer.callbacks or [], Path(ckpt_path))

    def _accelerator_source(self) -> list[str]:
        """Where the accelerator came from: a command-line flag or the --config files."""
        for index in reversed(range(len(self.args))):
            arg = self.args[index]
            if arg.startswith("--trainer.accelerator="):
                return [arg]
            if arg == "--trainer.accelerator" and index + 1 < len(self.args):
                return [f"{arg} {self.args[index + 1]}"]
        return [str(path) for path in self.config.get("config") or []] or ["configs/default.yaml"]


def build_cli(args: list[str] | None, default_config: Path) -> ProjectCLI:
    """Parse ``args`` on top of ``default_config`` and instantiate model, data and Trainer.

    Raises HardwareError or CheckpointError (before anything is built) for a config this
    machine cannot run or a checkpoint that cannot be resumed.
    """
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
