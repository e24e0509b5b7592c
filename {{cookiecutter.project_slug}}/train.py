"""Train, test the best checkpoint, export it (verified), and write summary.json.

To run:
    python train.py                              # configs/default.yaml
    python train.py --trainer.max_epochs 5       # override any key
    python train.py --config my.yaml             # layer your own YAML on top
    python train.py --config configs/ddp-cpu.yaml  # a preset: see configs/ and the README
    python train.py --print_config               # the full resolved configuration
    python train.py --ckpt_path last             # resume the newest run's last.ckpt
    python train.py --export.formats [int8]      # export only int8 ([] for no export)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from {{ cookiecutter.package_name }}.cli import STARTUP_ERRORS, build_cli
from {{ cookiecutter.package_name }}.export import export_checkpoint
from {{ cookiecutter.package_name }}.plots import write_plots
from {{ cookiecutter.package_name }}.runtime import (
    configure_logging,
    configure_threads,
    describe_run,
    keep_wandb_offline_safe,
    leave_process_group,
    quiet_known_noise,
)
from {{ cookiecutter.package_name }}.summary import (
    build_summary,
    format_summary,
    predict_inputs,
    run_dir,
    write_summary,
)

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "default.yaml"


def main(args: list[str] | None = None) -> Path | None:
    """Run fit -> test -> export; return the path of summary.json (None on ranks but zero)."""
    start = time.perf_counter()
    quiet_known_noise()
    configure_logging()
    configure_threads()
    try:
        cli = build_cli(args, DEFAULT_CONFIG)
    except STARTUP_ERRORS as error:  # raised before any training
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    trainer = cli.trainer
    keep_wandb_offline_safe(trainer.loggers)
    describe_run(trainer, cli.model, cli.datamodule)
    trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.ckpt_path)
    best = getattr(trainer.checkpoint_callback, "best_model_path", "")
    # verbose=False: the summary below prints the test metrics once, in plain lines.
    tested = trainer.test(
        cli.model, datamodule=cli.datamodule, ckpt_path=best or None, verbose=False
    )
    confusion = cli.model.test_confusion.compute()  # on every rank: it syncs under DDP
    leave_process_group()  # that was the last collective call
    if not trainer.is_global_zero:
        return None
    formats = cli.config.export.formats  # None: every available format
    exported = None
    if best and formats != []:  # rank zero only: one writer per file
        exported = export_checkpoint(best, run_dir(trainer) / "export", formats, cli.datamodule)
    seed = cli.config.get("seed_everything")
    plots = write_plots(trainer, confusion, cli.datamodule.class_names)
    data = cli.datamodule
    inputs = predict_inputs(data.preprocessing, data.input_shape, data.example_file())
    wall_time = time.perf_counter() - start
    summary = build_summary(trainer, seed, tested[0], wall_time, exported, plots, inputs)
    path = write_summary(summary, run_dir(trainer))
    print(format_summary(summary))
    print(f"summary: {path}")
    return path


if __name__ == "__main__":
    main()
