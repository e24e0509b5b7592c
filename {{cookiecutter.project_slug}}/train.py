"""Train, test the best checkpoint, and write summary.json into the run directory.

To run:
    python train.py                              # configs/default.yaml
    python train.py --trainer.max_epochs 5       # override any key
    python train.py --config my.yaml             # layer your own YAML on top
    python train.py --print_config               # the full resolved configuration
    python train.py --ckpt_path last             # resume the newest run's last.ckpt
    python train.py --config configs/ddp-cpu.yaml  # a preset: see configs/ and the README
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from {{ cookiecutter.package_name }}.checkpoints import CheckpointError
from {{ cookiecutter.package_name }}.cli import build_cli
from {{ cookiecutter.package_name }}.hardware import HardwareError
from {{ cookiecutter.package_name }}.runtime import (
    configure_logging,
    configure_threads,
    leave_process_group,
    quiet_known_noise,
)
from {{ cookiecutter.package_name }}.summary import build_summary, format_summary, write_summary

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "default.yaml"


def main(args: list[str] | None = None) -> Path | None:
    """Run fit -> test; return the path of summary.json (None on ranks other than zero)."""
    start = time.perf_counter()
    quiet_known_noise()
    configure_logging()
    configure_threads()
    try:
        cli = build_cli(args, DEFAULT_CONFIG)
    except (HardwareError, CheckpointError) as error:  # raised before anything is built
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    trainer = cli.trainer
    trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.ckpt_path)
    best = getattr(trainer.checkpoint_callback, "best_model_path", "")
    tested = trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path=best or None)
    seed = cli.config.get("seed_everything")
    # On every rank: trainer.log_dir is a collective call under DDP. Only rank zero writes.
    summary = build_summary(trainer, seed, tested[0], time.perf_counter() - start)
    leave_process_group()  # the last collective call is done
    if not trainer.is_global_zero:
        return None
    path = write_summary(summary, Path(summary["paths"]["run_dir"]))
    print(format_summary(summary))
    print(f"summary: {path}")
    return path


if __name__ == "__main__":
    main()
