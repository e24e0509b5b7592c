"""Whole-process figures: start-up, `python train.py` end to end, DDP on CPU.

- start-up: `python train.py --help` against `python -c "import lightning"` (the floor), and
  the difference (issue 17's target: at most 0.3 s);
- end to end: the default `python train.py` (60 epochs, test, export, plots), wall time, as
  a multiple of `import lightning` too, and peak memory (max RSS of the process tree);
- DDP on CPU: the ddp-cpu preset (2 processes, gloo) against 1 process, samples per second
  of training, at the default batch (64 per process) and at 256: one epoch's samples over
  the median epoch time, timed inside each run (epoch_clock.py), so start-up, test and
  export stay out. benchmarks/ddp_plain.py measures what hand-written
  DistributedDataParallel gains on the same cores, for comparison.
Runs are interleaved and repeated; medians are quoted.

To run:
    .venv/bin/python benchmarks/runs.py            # ~10 minutes on 2 cores
    .venv/bin/python benchmarks/runs.py --smoke    # one repeat of short runs
    .venv/bin/python benchmarks/runs.py --no-ddp   # start-up and end to end only (~3 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from baked import bake, machine

QUIET = ["--trainer.enable_progress_bar=false"]


def timed(command: list[str], cwd: Path) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MiB of the child processes so far, and stdout."""
    path = os.pathsep.join([str(cwd / "src"), str(Path(__file__).parent)])  # + epoch_clock
    env = {**os.environ, "PYTHONPATH": path, "WANDB_MODE": "offline"}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    # ru_maxrss of children: the largest process so far (KiB on Linux), not a sum.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return wall, peak, result.stdout


def summary_of(stdout: str) -> dict:
    return json.loads(Path(stdout.rstrip().splitlines()[-1].removeprefix("summary: ")).read_text())


def startup(project: Path, repeats: int) -> dict[str, float]:
    python = sys.executable
    commands = {
        'python -c "import lightning"': [python, "-c", "import lightning"],
        "python train.py --help": [python, "train.py", "--help"],
        # The floor with what every entry point's __main__ does first (gc.freeze()): the
        # exit's last collection no longer scans the imported modules' objects.
        'python -c "import lightning, gc; gc.freeze()"': [
            python,
            "-c",
            "import lightning, gc; gc.freeze()",
        ],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, command in commands.items():
            times[name].append(timed(command, project)[0])
    return {name: statistics.median(values) for name, values in times.items()}


def end_to_end(project: Path, repeats: int, epochs: int) -> tuple[float, float, float]:
    """Median wall time, peak RSS, and the run's own wall_time_s from summary.json."""
    walls, own = [], []
    peak = 0.0
    for _ in range(repeats):
        wall, peak, stdout = timed(
            [sys.executable, "train.py", f"--trainer.max_epochs={epochs}", *QUIET], project
        )
        walls.append(wall)
        own.append(summary_of(stdout)["wall_time_s"])
    return statistics.median(walls), peak, statistics.median(own)


def ddp_throughput(
    project: Path, repeats: int, epochs: int, batch_sizes: tuple[int, ...]
) -> dict[tuple[int, str], float]:
    """Training samples per second, 1 process vs the ddp-cpu preset (2 processes, gloo), per
    batch size (per process): one epoch's samples over the median epoch time (first skipped),
    timed inside the run by epoch_clock.EpochClock, which counts the samples too."""
    variants = {
        "1 process": [],
        "2 processes (configs/ddp-cpu.yaml)": ["--config", "configs/ddp-cpu.yaml"],
    }
    epoch_times: dict[tuple[int, str], list[float]] = {
        (batch, name): [] for batch in batch_sizes for name in variants
    }
    samples = {}
    clock = project / "epochs.json"
    for _ in range(repeats):
        for (batch, name), times in epoch_times.items():
            command = [
                sys.executable,
                "train.py",
                *variants[name],
                f"--trainer.max_epochs={epochs}",
                f"--data.batch_size={batch}",
                "--export.formats=[]",
                "--trainer.callbacks+=epoch_clock.EpochClock",
                f"--trainer.callbacks.out={clock}",
                *QUIET,
            ]
            timed(command, project)
            figures = json.loads(clock.read_text())
            times += figures["seconds"][1:]
            samples[batch, name] = figures["train_samples"]
    return {key: samples[key] / statistics.median(times) for key, times in epoch_times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="1 repeat, short runs")
    parser.add_argument("--no-ddp", action="store_true", help="start-up and end to end only")
    args = parser.parse_args()
    repeats = 1 if args.smoke else args.repeats
    e2e_epochs, ddp_epochs = (3, 3) if args.smoke else (60, 20)

    with tempfile.TemporaryDirectory() as workdir:
        project = bake(Path(workdir))
        print(f"machine: {machine()}; medians of {repeats} interleaved repeats")

        print("\n| start-up | wall (s) |\n|---|---:|")
        starts = startup(project, repeats)
        for name, seconds in starts.items():
            print(f"| `{name}` | {seconds:.2f} |")
        floor, help_time, frozen_floor = starts.values()
        print(f"| `--help` over `import lightning` (target <= 0.3 s) | {help_time - floor:+.2f} |")
        frozen_gap = help_time - frozen_floor
        print(f"| `--help` over `import lightning, gc; gc.freeze()` | {frozen_gap:+.2f} |")

        wall, peak, own = end_to_end(project, repeats, e2e_epochs)
        print(f"\n| `python train.py` ({e2e_epochs} epochs, test, export, plots) | value |")
        print("|---|---:|")
        print(f"| wall time, whole process (s) | {wall:.1f} |")
        print(f"| wall time over `import lightning` | {wall / floor:.2f}x |")
        print(f"| wall time, as summary.json reports it (s) | {own:.1f} |")
        print(f"| peak memory, max RSS (MiB) | {peak:.0f} |")

        if args.no_ddp:
            return
        batch_sizes = (64,) if args.smoke else (64, 256)
        rates = ddp_throughput(project, repeats, ddp_epochs, batch_sizes)
        print("\n| DDP on CPU | batch per process | training samples/s | vs 1 process |")
        print("|---|---:|---:|---:|")
        for (batch, name), rate in rates.items():
            print(f"| {name} | {batch} | {rate:.0f} | {rate / rates[(batch, '1 process')]:.2f}x |")


if __name__ == "__main__":
    main()
