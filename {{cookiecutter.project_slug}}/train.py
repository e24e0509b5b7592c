"""Train, test the best checkpoint, and write summary.json into the run directory.

To run:
    python train.py                              # configs/default.yaml
    python train.py --trainer.max_epochs 5       # override any key
    python train.py --config my.yaml             # layer your own YAML on top
    python train.py --print_config               # the full resolved configuration
"""

from __future__ import annotations

import time
from pathlib import Path

from lightning.pytorch.cli import LightningCLI

from {{ cookiecutter.package_name }}.data import DigitsDataModule
from {{ cookiecutter.package_name }}.module import LitClassifier
from {{ cookiecutter.package_name }}.runtime import (
    configure_logging,
    configure_threads,
    quiet_known_noise,
)
from {{ cookiecutter.package_name }}.summary import build_summary, format_summary, write_summary

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "default.yaml"


class CLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        # The model's input and output sizes follow the data, whatever data is plugged in.
        parser.link_arguments("data.num_features", "model.in_features", apply_on="instantiate")
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")


def main(args: list[str] | None = None) -> Path | None:
    """Run fit -> test; return the path of summary.json (None on ranks other than zero)."""
    start = time.perf_counter()
    quiet_known_noise()
    configure_logging()
    configure_threads()
    cli = CLI(
        LitClassifier,
        DigitsDataModule,
        args=args,
        run=False,
        seed_everything_default=42,
        parser_kwargs={"default_config_files": [str(DEFAULT_CONFIG)]},
        # Inputs live in configs/, runs under runs/: overwriting a run's copy is safe.
        save_config_kwargs={"overwrite": True},
    )
    trainer = cli.trainer
    trainer.fit(cli.model, datamodule=cli.datamodule)
    best = getattr(trainer.checkpoint_callback, "best_model_path", "")
    tested = trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path=best or None)
    if not trainer.is_global_zero:
        return None
    seed = cli.config.get("seed_everything")
    summary = build_summary(trainer, seed, tested[0], time.perf_counter() - start)
    path = write_summary(summary, Path(summary["paths"]["run_dir"]))
    print(format_summary(summary))
    print(f"summary: {path}")
    return path


if __name__ == "__main__":
    main()
