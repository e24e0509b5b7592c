"""What the generated project's guard callbacks cost, as a share of epoch time.

Bakes the template with its defaults into a temporary folder and trains the default model
and data with the default config's other callbacks (checkpointing, LR monitor, CSV logs)
plus RandomState, GradientMonitor and MemoryMonitor at their configs/default.yaml settings.

Two figures:
- the time spent inside the guards' own hooks (Lightning's SimpleProfiler) as a share of
  the training-epoch time: robust to machine noise, the headline figure;
- end to end, median epoch time with none / each / all guards, variants interleaved and
  repeated (first epoch skipped as warm-up): the honest cross-check, but on a shared
  machine its noise (several %) is as large as what it measures.

To run:
    .venv/bin/python benchmarks/callback_overhead.py               # ~2 minutes on 2 cores
    .venv/bin/python benchmarks/callback_overhead.py --smoke       # seconds: does it still run?
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import tempfile
import warnings
from pathlib import Path

from baked import bake, epoch_timer, import_modules


def load_project(workdir: Path) -> dict:
    return import_modules(bake(workdir), "callbacks", "data", "module", "runtime")


def guards(project: dict, names: tuple[str, ...]) -> list:
    callbacks = project["callbacks"]
    settings = {
        "RandomState": {},
        "GradientMonitor": {"log_every_n_steps": 50, "per_layer": True, "check_finite": True},
        "MemoryMonitor": {"every_n_steps": 0, "growth_epochs": 4, "min_growth_mib": 1.0},
    }
    return [getattr(callbacks, name)(**settings[name]) for name in names]


def epoch_times(
    project: dict, names: tuple[str, ...], epochs: int, root: Path, profiler=None, extra=()
) -> list[float]:
    import lightning as L
    from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    L.seed_everything(42, workers=True, verbose=False)
    timer = epoch_timer()
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=CSVLogger(root, name="csv"),
        log_every_n_steps=10,
        enable_progress_bar=False,
        enable_model_summary=False,
        profiler=profiler,
        callbacks=[
            ModelCheckpoint(monitor="val/loss", mode="min", filename="best"),
            ModelCheckpoint(filename="last", enable_version_counter=False),
            LearningRateMonitor(logging_interval="epoch"),
            *guards(project, names),
            *extra,
            timer,
        ],
    )
    trainer.fit(project["module"].LitClassifier(), datamodule=project["data"].DigitsDataModule())
    return timer.times[1:]  # the first epoch pays for warm-up


GUARDS = ("RandomState", "GradientMonitor", "MemoryMonitor")


def hook_shares(project: dict, epochs: int, root: Path) -> tuple[dict[str, float], float]:
    """Seconds inside each guard's hooks, and seconds of training epochs, from one run."""
    from lightning.pytorch.profilers import SimpleProfiler

    profiler = SimpleProfiler()
    epoch_times(project, GUARDS, epochs, root, profiler=profiler, extra=(empty_callback(),))
    durations = profiler.recorded_durations

    def seconds(name: str) -> float:
        prefix = f"[Callback]{name}."
        return sum(sum(d) for action, d in durations.items() if action.startswith(prefix))

    # Lightning calls (and the profiler times) every hook of every callback, overridden or
    # not: an empty callback measures that per-callback floor, which is not the guards' cost.
    floor = seconds("EmptyCallback")
    inside = {name: max(0.0, seconds(name) - floor) for name in GUARDS}
    return inside, sum(durations["run_training_epoch"])


def empty_callback():
    """A callback that overrides nothing (built here: lightning imports after the bake)."""
    import lightning as L

    return type("EmptyCallback", (L.Callback,), {})()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--smoke", action="store_true", help="1 repeat of 3 epochs")
    args = parser.parse_args()
    repeats, epochs = (1, 3) if args.smoke else (args.repeats, args.epochs)

    with tempfile.TemporaryDirectory() as workdir:
        project = load_project(Path(workdir))
        project["runtime"].quiet_known_noise()
        warnings.filterwarnings("ignore", message=".*smaller than the logging interval")
        threads = project["runtime"].configure_threads()
        logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)

        inside, epoch_total = hook_shares(project, epochs, Path(workdir) / "profiled")
        variants = {"none": (), **{name: (name,) for name in GUARDS}, "all three": GUARDS}
        times: dict[str, list[float]] = {name: [] for name in variants}
        for repeat in range(repeats):
            for name, names in variants.items():  # interleaved: drift hits every variant alike
                times[name] += epoch_times(
                    project, names, epochs, Path(workdir) / f"{name}{repeat}"
                )

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch threads {threads}; "
        f"default model and data, {epochs} epochs"
    )
    print(
        "\ntime inside the guards' hooks (SimpleProfiler, net of an empty callback's),"
        " share of training-epoch time:"
    )
    for name, seconds in inside.items():
        print(f"  {name:<16} {100 * seconds / epoch_total:6.2f}%")
    share = 100 * sum(inside.values()) / epoch_total
    print(f"  {'all three':<16} {share:6.2f}%   (target <= 5%)")

    base = statistics.median(times["none"])
    print(f"\nend to end, median epoch over {repeats} interleaved repeats (noisy):")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<16} {median * 1000:8.1f} ms {100 * (median - base) / base:+7.1f}%")


if __name__ == "__main__":
    main()
