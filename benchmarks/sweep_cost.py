"""What a sweep trial costs against the training it runs, and against a plain `python train.py`.

A trial runs in the sweep's process: it pays its training, plus building its Trainer, model
and data (LightningCLI's public parse of the sweep's arguments and the trial's values, every
trial afresh), testing its best checkpoint and the study's bookkeeping, but not the process
start-up (Python, torch, Lightning imports) that every separate `python train.py` pays. Both
sides train the default config (60 epochs, digits), without export (a trial does not export);
every trial of the sweep has that same config (a space of one value), and the pruner is off,
so each trial trains to the end. Training time is timed inside the runs, from the fit's setup
to its end (epoch_clock.FitClock). The build of a trial's run is timed apart, in this process,
with the arguments the sweep gives its trials.

To run:
    .venv/bin/python benchmarks/sweep_cost.py            # a minute or two on 2 cores
    .venv/bin/python benchmarks/sweep_cost.py --smoke    # 2 epochs, 2 trials, 2 builds
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import optuna

from baked import bake, import_modules, machine

QUIET = ["--trainer.enable_progress_bar=false", "--export.formats=[]"]
CLOCK = "--trainer.callbacks+=epoch_clock.FitClock"
# Every trial the default config: a space of one value, no pruning.
SPACE = """\
metric: val/acc
direction: maximize
pruner: {kind: none}
space:
  model.lr: {type: categorical, choices: [0.003]}
"""


def run(command: list[str], project: Path) -> float:
    path = os.pathsep.join([str(project / "src"), str(Path(__file__).parent)])  # + FitClock
    env = {**os.environ, "PYTHONPATH": path, "WANDB_MODE": "offline"}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - start


def build_seconds(project: Path, sweep_args: list[str], params: dict, builds: int) -> list[float]:
    """Seconds of each build of a trial's run as the sweep makes it (tune/trial.py: the
    sweep's arguments, the trial's values and log folders, parsed by the project's CLI). A
    first build, untimed, warms up as the sweep's own build before its trials does."""
    modules = import_modules(project, "training.cli", "tune.setup", "tune.space", "runtime")
    cli, setup, space = (modules[name] for name in ("training.cli", "tune.setup", "tune.space"))
    gc.freeze()  # as sweep.py's __main__ after its imports: out of the collector's sight
    modules["runtime"].quiet_known_noise()
    modules["runtime"].configure_threads()
    # As sweep.py: each CLI gets its arguments from here, not from sys.argv.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    default_config = project / "configs" / "default.yaml"
    base_args = [*setup.TRIAL_DEFAULTS, *sweep_args]
    base = cli.build_cli(base_args, default_config)
    log_values = setup.trial_log_values(base.config, project / "runs" / "sweeps" / "builds")
    del base
    seconds = []
    for number in range(builds):
        args = [*base_args, *space.args_of({**space.values(params), **log_values(number, 0)})]
        gc.collect()  # as the sweep does between trials, untimed
        start = time.perf_counter()
        cli.build_cli(args, default_config)
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3, help="separate `python train.py` runs")
    parser.add_argument("--builds", type=int, default=5, help="a trial's run, built in-process")
    parser.add_argument("--smoke", action="store_true", help="2 epochs, 2 trials, 1 run, 2 builds")
    args = parser.parse_args()
    trials, runs, epochs = (2, 1, 2) if args.smoke else (args.trials, args.runs, 60)
    builds = 2 if args.smoke else args.builds

    with tempfile.TemporaryDirectory() as workdir:
        project = bake(Path(workdir), answers={"tuning": "yes"})
        (project / "one-config.yaml").write_text(SPACE)
        options = [f"--trainer.max_epochs={epochs}", *QUIET]
        process_walls = []

        def train(index: int) -> None:
            clock = f"--trainer.callbacks.out=fit-train-{index}.json"
            command = [sys.executable, "train.py", *options, CLOCK, clock]
            process_walls.append(run(command, project))

        # The separate runs before and after the sweep: a machine that slows down or speeds
        # up during the script moves both sides alike.
        for index in range(runs // 2 + runs % 2):
            train(index)
        sweep = [sys.executable, "sweep.py", "--trials", str(trials), "--space", "one-config.yaml"]
        sweep_args = [*options, CLOCK, "--trainer.callbacks.out=fit.json"]
        sweep_wall = run([*sweep, *sweep_args], project)
        for index in range(runs // 2 + runs % 2, runs):
            train(index)
        train_fits = [
            json.loads((project / f"fit-train-{index}.json").read_text())[0]
            for index in range(runs)
        ]
        trial_fits = json.loads((project / "fit.json").read_text())
        storage = f"sqlite:///{project / 'runs' / 'sweeps' / 'one-config' / 'study.db'}"
        study = optuna.load_study(study_name="one-config", storage=storage)
        trial_walls = [t.duration.total_seconds() for t in study.trials]
        params = study.trials[0].params
        build = statistics.median(build_seconds(project, sweep_args, params, builds))

    process, trial = statistics.median(process_walls), statistics.median(trial_walls)
    train_fit, trial_fit = statistics.median(train_fits), statistics.median(trial_fits)
    print(
        f"machine: {machine()}; {epochs} epochs; medians of {runs} runs, {trials} trials "
        f"and {builds} builds"
    )
    print("\n| the default config, no export | wall (s) | of it, training (s) |")
    print("|---|---:|---:|")
    print(f"| `python train.py`, whole process | {process:.2f} | {train_fit:.2f} |")
    print(f"| one in-process sweep trial | {trial:.2f} | {trial_fit:.2f} |")
    print(f"| `python sweep.py --trials {trials}`, whole process | {sweep_wall:.2f} | |")
    print("\n| ratio | value |\n|---|---:|")
    print(f"| trial / its training (target <= 1.10) | {trial / trial_fit:.3f} |")
    print(f"| trial / `python train.py`'s training | {trial / train_fit:.3f} |")
    print(f"| trial / `python train.py` process | {trial / process:.3f} |")
    print(f"| start-up saved per trial (s) | {process - trial:.2f} |")
    print("\n| a trial besides its training | seconds |\n|---|---:|")
    print(f"| all of it: build, test, Optuna's bookkeeping | {trial - trial_fit:.2f} |")
    print(f"| of it, building the run (the CLI's parse), timed apart | {build:.2f} |")


if __name__ == "__main__":
    main()
