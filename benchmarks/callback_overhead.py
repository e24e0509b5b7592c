"""What each callback of the generated project costs, as a share of epoch time.

Bakes the template with its defaults and trains exactly as `python train.py` builds it from
configs/default.yaml (logger, the best and last checkpoints, signal stop, metric history, LR
monitor, RNG state, gradient and memory monitors, model summary), default model and data,
one torch thread.

Two figures:
- the time spent inside each callback's own hooks (Lightning's SimpleProfiler, net of an
  empty callback's: Lightning calls every hook of every callback) as a share of the epoch
  time (training, validation and the epoch-end work, checkpoint writes included): robust
  to machine noise, the headline figure;
- end to end, median epoch time with all callbacks, with each one removed, with none, and
  with as many empty callbacks again (what Lightning's calls of hooks that do nothing
  cost), variants interleaved and repeated (first epoch skipped as warm-up): the honest
  cross-check, but on a shared machine its noise (several %) is as large as what it
  measures.

To run:
    .venv/bin/python benchmarks/callback_overhead.py               # ~8 minutes on 2 cores
    .venv/bin/python benchmarks/callback_overhead.py --smoke       # seconds: does it still run?
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from baked import bake, epoch_timer, import_modules, machine


def label(callback, callbacks: list) -> str:
    """Its class name; for a class configured twice (the checkpoints), with its file name."""
    name = type(callback).__name__
    if sum(type(other) is type(callback) for other in callbacks) == 1:
        return name
    return f"{name} ({getattr(callback, 'filename', '') or '?'})".replace("{epoch:02d}", "NN")


def configured(trainer) -> dict:
    """The callbacks of configs/default.yaml by label (not LightningCLI's config saver)."""
    from lightning.pytorch.cli import SaveConfigCallback

    ours = [c for c in trainer.callbacks if not isinstance(c, SaveConfigCallback)]
    return {label(c, ours): c for c in ours}


def train(modules: dict, project: Path, epochs: int, root: Path, drop=(), extra=(), profile=False):
    """Fit as train.py does; ``drop``: labels of callbacks removed. Returns the trainer, the
    configured callbacks by label, and the per-epoch wall times (first epoch skipped)."""
    arguments = [
        f"--trainer.max_epochs={epochs}",
        f"--trainer.default_root_dir={root}",
        f"--trainer.logger.init_args.save_dir={root}",
        "--trainer.enable_progress_bar=false",
    ]
    if profile:  # Lightning's SimpleProfiler, its report to a file rather than the console
        arguments += [
            "--trainer.profiler=SimpleProfiler",
            f"--trainer.profiler.dirpath={root}",
            "--trainer.profiler.filename=profile",
        ]
    cli = modules["training.cli"].build_cli(arguments, project / "configs" / "default.yaml")
    trainer = cli.trainer
    callbacks = configured(trainer)
    dropped = [callbacks[name] for name in drop]
    trainer.callbacks[:] = [c for c in trainer.callbacks if all(c is not d for d in dropped)]
    timer = epoch_timer()
    trainer.callbacks += [*extra, timer]
    trainer.fit(cli.model, datamodule=cli.datamodule)
    return trainer, callbacks, timer.times[1:]


def empty_callbacks(count: int) -> list:
    """Callbacks that implement no hook: Lightning calls each of them anyway."""
    import lightning as L

    return [type(f"EmptyCallback{i}", (L.Callback,), {})() for i in range(count)]


def hook_shares(modules: dict, project: Path, epochs: int, root: Path) -> dict[str, float]:
    """Each configured callback's seconds inside its hooks over the epoch seconds, from one
    run (LightningCLI's config saver and the benchmark's own callbacks left out)."""
    empty = empty_callbacks(1)
    trainer, callbacks, epoch_seconds = train(
        modules, project, epochs, root, extra=empty, profile=True
    )
    durations = trainer.profiler.recorded_durations

    def seconds(callback) -> float:
        """Per-epoch hooks only: set-up hooks run once, and each hook's first call warms up.
        (Actions are named by state_key: a ModelCheckpoint's has its settings.)"""
        once = (".setup", ".on_fit_start", ".on_train_start", ".on_sanity_check")
        return sum(
            sum(values[1:])
            for action, values in durations.items()
            if action.startswith(f"[Callback]{callback.state_key}.")
            and not any(hook in action for hook in once)
        )

    floor = seconds(empty[0])  # what Lightning's call of every hook costs anyway
    total = sum(epoch_seconds)
    return {name: max(0.0, seconds(c) - floor) / total for name, c in callbacks.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=60, help="the default run's 60")
    parser.add_argument("--smoke", action="store_true", help="1 repeat of 3 epochs")
    args = parser.parse_args()
    repeats, epochs = (1, 3) if args.smoke else (args.repeats, args.epochs)

    with tempfile.TemporaryDirectory() as workdir:
        project = bake(Path(workdir))
        modules = import_modules(project, "training.cli", "runtime")
        modules["runtime"].quiet_known_noise()
        torch.set_num_threads(1)  # the least noisy on a shared machine
        sys.argv = ["train.py"]  # LightningCLI reads it
        shares = hook_shares(modules, project, epochs, Path(workdir) / "profiled")
        names = list(shares)

        empties = f"all + {len(names)} empty callbacks"
        variants = {"all": (), **{f"without {name}": (name,) for name in names}}
        variants["none"] = tuple(names)
        variants[empties] = ()
        times: dict[str, list[float]] = {name: [] for name in variants}
        for repeat in range(repeats):
            for index, (name, drop) in enumerate(variants.items()):  # interleaved: drift
                root = Path(workdir) / f"variant{index}-{repeat}"  # hits every variant alike
                extra = empty_callbacks(len(names)) if name == empties else ()
                times[name] += train(modules, project, epochs, root, drop, extra)[2]

    print(f"machine: {machine()}; torch threads 1; default model and data, {epochs} epochs")
    print("\n| callback (configs/default.yaml) | time in its hooks, share of epoch time |")
    print("|---|---:|")
    for name in names:
        print(f"| {name} | {100 * shares[name]:.2f}% |")
    print(f"| all together | {100 * sum(shares.values()):.2f}% (target <= 5%) |")

    base = statistics.median(times["all"])
    print(f"\nend to end, median epoch over {repeats} interleaved repeats (noisy):")
    print("\n| variant | median epoch (ms) | vs all |\n|---|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median * 1000:.1f} | {100 * (median - base) / base:+.1f}% |")


if __name__ == "__main__":
    main()
