"""sweep.py for real: a study that prunes and leaves best.yaml, report.md and plots; one that
is killed and finished by the same command (Optuna's heartbeat fails and retries the killed
trial); one stopped by Ctrl-C; two processes sharing a study; every bad input refused in one
line before any trial."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from optuna.distributions import FloatDistribution
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from {{ cookiecutter.package_name }}.tasks.classification import linear_gap
from {{ cookiecutter.package_name }}.tune.report import best_trial, chosen_trial, summary_lines
from {{ cookiecutter.package_name }}.tune.space import load_spec, values
from {{ cookiecutter.package_name }}.tune.trial import SIZE, VAL_SAMPLES

from ..conftest import CONFIGS, one_thread, run_training, working_directory
from ..subprocesses import PROJECT, script_env

# RetryHeartbeatStaleTrialCallback.retried_trial_number, fail_stale_trials: "experimental"
EXPERIMENTAL = "ignore::optuna.exceptions.ExperimentalWarning"
pytestmark = [pytest.mark.tuning, pytest.mark.filterwarnings(EXPERIMENTAL)]

SWEEP = PROJECT / "sweep.py"
SHORT = ("--trainer.max_epochs", "1")  # the properties below need trials, not a good model
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
FOLDS_SWEEP = ("--trials", "1", "--folds", "2", "--name", "folds", *SHORT)
BASELINE_LINE = "baselines (test split): majority class 0.1000, logistic regression 0.9651"


def write_space(folder: Path, space: dict, **top: object) -> Path:
    """configs/sweep.yaml's metric, pruner and select with another space, and no start
    points (they name keys of the shipped space)."""
    spec = yaml.safe_load((CONFIGS / "sweep.yaml").read_text())
    del spec["start"]
    spec.update(top, space=space)
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def load_study(folder: Path, name: str) -> optuna.Study:
    storage = f"sqlite:///{folder / 'runs' / 'sweeps' / name / 'study.db'}"
    return optuna.load_study(study_name=name, storage=storage)


def finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=FINISHED)


def start_sweep(folder: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """`python sweep.py ARGS` in ``folder``, its output (stdout and stderr) to a file."""
    log = folder / f"sweep-{len(list(folder.glob('sweep-*.log')))}.log"
    process = subprocess.Popen(
        [sys.executable, str(SWEEP), *args],
        cwd=folder,
        # One thread each: several of these and the test process share the cores.
        env=script_env(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1"),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        # Ctrl-C as in a terminal: a shell starts background jobs (CI's `cmd &`) with SIGINT
        # ignored, and the child would keep ignoring it outside the training loop.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    return process, log


BAD_LEARNING_RATES = {
    # From 1e-6 (learns nothing in a few epochs) to 1.0 (diverges or thrashes).
    "model.lr": {"type": "float", "low": 1.0e-6, "high": 1.0, "log": True},
    "model.net.init_args.dropout": {"type": "float", "low": 0.0, "high": 0.5},
}
EARLY_PRUNER = {"kind": "median", "startup_trials": 2, "warmup_epochs": 0}


def in_second_trial(signal: str) -> tuple[str, ...]:
    """Arguments that send ``signal`` in the second trial's first training step."""
    probe = ("--trainer.callbacks+=tests.tune.probes.SignalInTrial", "--trainer.callbacks.trial")
    return (*probe, "1", "--trainer.callbacks.signal", signal)


KILLED = ("--trials", "2", "--name", "killed", *SHORT, *in_second_trial("SIGKILL"))
INTERRUPTED = ("--trials", "2", *SHORT, *in_second_trial("SIGINT"))
# No logger: the two processes test the study they share, not a logger's store (MLflow's
# SQLite store, unlike Optuna's, is not safe to create from two processes at once).
SHARED = ("--trials", "4", "--name", "shared", "--trainer.logger=false", *SHORT)
# Ctrl-C in the last validation, after the last training step.
LATE = ("--trials", "3", *SHORT, "--trainer.callbacks+=tests.probes.SignalAtLastValidation")


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Three real sweep processes at once, for what needs a process of its own:
    - shared-a, shared-b: two processes, one study of 4 trials in one storage;
    - killed: SIGKILL in its second trial;
    and meanwhile, in this process (no start-up to pay):
    - interrupted: Ctrl-C in its second trial, on a CSV of breast-cancer data;
    - late: Ctrl-C after a trial's last step;
    - main: 6 trials over bad learning rates, pruned from the first epoch on;
    - folds: a cross-validated trial of 2 folds;
    - killed-rerun: the killed sweep's command again, once its process is gone.
    name -> {folder, returncode, output}."""
    names = ("main", "shared", "killed", "folds", "interrupted", "late")
    folders = {name: tmp_path_factory.mktemp(name) for name in names}
    started = {
        "shared-a": start_sweep(folders["shared"], *SHARED),
        "shared-b": start_sweep(folders["shared"], *SHARED),
        "killed": start_sweep(folders["killed"], *KILLED),
    }
    main_space = write_space(folders["main"], BAD_LEARNING_RATES, pruner=EARLY_PRUNER)
    interrupted = (*INTERRUPTED, "--data.path", str(breast_cancer_csv(folders["interrupted"])))
    results = {}
    with one_thread():  # the processes share the cores with this one
        for name, args in (
            ("interrupted", interrupted),
            ("main", ("--trials", "6", "--space", str(main_space), *SHORT)),
            ("folds", FOLDS_SWEEP),
            ("late", LATE),
        ):
            results[name] = run_to_the_end(folders[name], *args)
        started["killed"][0].wait(timeout=300)
        results["killed-before"] = {
            "states": [t.state for t in load_study(folders["killed"], "killed").trials]
        }
        results["killed-rerun"] = run_to_the_end(folders["killed"], *KILLED)
    for name, (process, log) in started.items():
        process.wait(timeout=300)
        folder = folders[name.split("-")[0]]
        results[name] = dict(folder=folder, returncode=process.returncode, output=log.read_text())
    return results


def run_to_the_end(folder: Path, *args: str) -> dict:
    """sweep.main in this process: {folder, returncode, output (stdout and stderr)}."""
    output, code = io.StringIO(), 0
    with contextlib.redirect_stderr(output):
        try:
            run_sweep(folder, *args, output=output)
        except SystemExit as exit:
            code = int(exit.code or 0)
    return dict(folder=folder, returncode=code, output=output.getvalue())


def breast_cancer_csv(folder: Path) -> Path:
    """scikit-learn's breast-cancer data as a user has it: a CSV with a header, text labels."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    names = [str(name).replace(" ", "_") for name in data.feature_names]
    rows = [",".join([*names, "diagnosis"])]
    for features, label in zip(data.data, data.target, strict=True):
        rows.append(",".join([*map(str, features), str(data.target_names[label])]))
    csv = folder / "breast_cancer.csv"
    csv.write_text("\n".join(rows) + "\n")
    return csv


@contextlib.contextmanager
def restored_signal_handlers() -> Iterator[None]:
    """In-process trials install their handlers; leave this process's as they were."""
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def run_sweep(folder: Path, *args: str, output: io.StringIO | None = None) -> tuple[Path, str]:
    """sweep.main in ``folder``, in this process; (its folder, what it printed)."""
    import sweep

    stdout = output or io.StringIO()
    with working_directory(folder), contextlib.redirect_stdout(stdout), restored_signal_handlers():
        result = sweep.main(list(args))
    return result, stdout.getvalue()


@pytest.mark.slow
def test_a_sweep_prunes_bad_trials_and_leaves_best_yaml_report_and_plots(sweeps) -> None:
    run = sweeps["main"]
    assert run["returncode"] == 0, run["output"][-3000:]
    assert "Traceback" not in run["output"]
    folder = run["folder"] / "runs" / "sweeps" / "space"
    lines = run["output"].strip().splitlines()
    assert lines[-1] == f"sweep: {folder.resolve()}"
    progress = [line for line in lines if line.startswith("trial ")]
    assert len(progress) == 6
    assert all("best" in line and " s " in line and "finished" in line for line in progress)

    study = load_study(run["folder"], "space")
    assert len(finished(study)) == 6
    pruned = study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
    assert pruned, "no trial pruned over learning rates from 1e-6 to 1"
    for name in ("optimization_history", "param_importances", "slice", "intermediate_values"):
        assert (folder / f"{name}.png").stat().st_size > 0, name
        assert f"![{name}]({name}.png)" in (folder / "report.md").read_text()
    assert (folder / "best.yaml").stat().st_size > 0
    report = (folder / "report.md").read_text()
    # Every trial has the same network here: the simplest within one standard error of the
    # best value is the best value itself.
    best, chosen = best_trial(study), chosen_trial(study, "simplest")
    assert best is not None and chosen is not None and chosen.number == best.number
    assert f"## Chosen: trial {best.number} (select: simplest)" in report
    assert "baselines on the same test split: majority class" in report
    table = [line for line in report.splitlines() if line.startswith("| ") and "|---" not in line]
    assert len(table) == 1 + len(study.trials)  # the header, then every trial, best first
    assert table[1].startswith(f"| {best.number} | complete |")
    # Each trial's logs and checkpoints in a folder of its own under the sweep's; the size of
    # its network and of its validation split, for the choice.
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert len({t.user_attrs["log_dir"] for t in complete}) == len(complete)
    for trial in complete:
        assert Path(trial.user_attrs["log_dir"]).is_relative_to(folder)
        assert "test/acc" in trial.user_attrs
        assert trial.user_attrs[SIZE] == 85_002  # the default MLP on the digits
        assert trial.user_attrs[VAL_SAMPLES] == 270  # 15 % of 1,797 digits


@pytest.mark.slow
def test_best_yaml_trains_the_best_trial_the_normal_way(sweeps, tmp_path: Path) -> None:
    run = sweeps["main"]
    folder = run["folder"] / "runs" / "sweeps" / "space"
    best = chosen_trial(load_study(run["folder"], "space"), "simplest")
    assert best is not None
    config = yaml.safe_load((folder / "best.yaml").read_text())
    assert config["model"]["lr"] == pytest.approx(best.params["model.lr"])
    assert config["model"]["net"]["init_args"]["dropout"] == pytest.approx(
        best.params["model.net.init_args.dropout"]
    )
    assert config["trainer"]["max_epochs"] == 1  # what the sweep was given
    with one_thread():  # as the trial ran (a float sum over other threads may round otherwise)
        trained = run_training(
            tmp_path, "--config", str(folder / "best.yaml"), "--export.formats", "[]"
        )
    assert trained.summary["status"] == "completed"
    assert trained.summary["epochs"] == 1
    # The trial, trained again: the same seed, data and settings, the same test accuracy.
    assert trained.summary["metrics"]["test/acc"] == pytest.approx(
        best.user_attrs["test/acc"], abs=1e-6
    )


@pytest.mark.slow
@pytest.mark.logger
def test_each_trial_logs_a_run_of_its_own(tmp_path: Path) -> None:
    """TensorBoard and CSV: a folder per trial; W&B: a run per trial (trials in one process
    would otherwise share the first one: Lightning's WandbLogger reuses a run in progress);
    MLflow: a run per trial, named after it, in the sweep's own experiment. (A sweep of its
    own: the logger bakes run this test, not the sweeps fixture's.)"""
    folder, _ = run_sweep(tmp_path, "--trials", "2", *SHORT)
    names = ["trial-000", "trial-001"]
    store = tmp_path / "runs" / "mlflow.db"
    if store.exists():  # (mlflow is installed only where the project chose it)
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"sqlite:///{store}")
        experiment = client.get_experiment_by_name(f"sweep-{folder.name}")
        assert experiment is not None
        trials = client.search_runs([experiment.experiment_id])
        assert sorted(trial.info.run_name for trial in trials) == names
        assert all("val/acc" in trial.data.metrics for trial in trials)
    elif (folder / "wandb").exists():
        runs = {path.name.rsplit("-", 1)[-1] for path in (folder / "wandb").glob("offline-run-*")}
        assert len(runs) == 2, runs
    else:
        assert sorted(path.name for path in (folder / "trials").iterdir()) == names


@pytest.mark.slow
def test_a_killed_sweep_is_finished_by_the_same_command(sweeps) -> None:
    """The killed trial has no process to end it: Optuna's heartbeat, silent past its grace
    period, fails it and queues it again with the same values (RetryHeartbeatStaleTrialCallback),
    which the rerun runs."""
    assert sweeps["killed"]["returncode"] == -signal.SIGKILL
    assert sweeps["killed-before"]["states"] == [TrialState.COMPLETE, TrialState.RUNNING]
    run = sweeps["killed-rerun"]
    assert run["returncode"] == 0, run["output"][-3000:]
    assert "study killed: 1 of 2 trials finished before" in run["output"]
    study = load_study(run["folder"], "killed")
    killed, retry = study.trials[1:]
    assert killed.state == TrialState.FAIL and retry.state in FINISHED
    assert RetryHeartbeatStaleTrialCallback.retried_trial_number(retry) == 1
    assert retry.params == killed.params
    assert re.search(r"trial +2 .*\[retry of trial 1 \(its process stopped\)\]", run["output"])
    assert not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    folder = run["folder"] / "runs" / "sweeps" / "killed"
    assert run["output"].strip().splitlines()[-1] == f"sweep: {folder.resolve()}"
    assert (folder / "best.yaml").exists()


@pytest.mark.slow
def test_ctrl_c_stops_the_sweep_after_writing_the_report(sweeps) -> None:
    run = sweeps["interrupted"]
    assert run["returncode"] == 130, run["output"][-3000:]
    assert "Traceback" not in run["output"]
    lines = run["output"].strip().splitlines()
    folder = run["folder"] / "runs" / "sweeps" / "sweep"
    assert lines[-1] == f"sweep: {folder.resolve()}"
    assert "interrupted: stopped by Ctrl-C" in lines
    assert f"resume: python sweep.py {shlex.join(INTERRUPTED)} --data.path " in run["output"]
    study = load_study(run["folder"], "sweep")
    # The finished trial is kept and reported; the stopped one is failed, not counted.
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.FAIL]
    report = (folder / "report.md").read_text()
    assert "| 0 | complete |" in report and "| 1 | fail |" in report


@pytest.mark.slow
def test_ctrl_c_after_a_trials_last_step_still_stops_the_sweep(sweeps) -> None:
    """A signal in the final validation comes after the last training step: the fit ends
    without acting on it, and the sweep must stop there, not start its next trial."""
    run = sweeps["late"]
    assert run["returncode"] == 130
    assert [t.state for t in load_study(run["folder"], "sweep").trials] == [TrialState.FAIL]
    assert "interrupted: stopped by Ctrl-C" in run["output"]


@pytest.mark.slow
def test_two_processes_share_one_study_without_running_a_trial_twice(sweeps) -> None:
    runs = [sweeps["shared-a"], sweeps["shared-b"]]
    for run in runs:
        assert run["returncode"] == 0, run["output"][-3000:]
        assert run["output"].strip().splitlines()[-1].startswith("sweep: ")
    study = load_study(runs[0]["folder"], "shared")
    done = finished(study)
    assert len(done) == 4
    # Both took part, and no trial ran twice: each number is one process's.
    ran = [
        set(re.findall(r"^trial +(\d+) (?:complete|pruned)", run["output"], re.M)) for run in runs
    ]
    assert all(ran) and not ran[0] & ran[1]
    started = [t for t in study.trials if "log_dir" in t.user_attrs]
    assert len({t.user_attrs["log_dir"] for t in started}) == len(started)
    assert len({tuple(sorted(t.params.items())) for t in done}) == len(done)


@pytest.mark.slow
def test_the_first_trials_are_train_pys_config_then_a_linear_model(sweeps) -> None:
    """configs/sweep.yaml's start points, by trial number: the same with two processes."""
    study = load_study(sweeps["shared-a"]["folder"], "shared")
    defaults = {
        "model.lr": 0.003,
        "model.weight_decay": 0.01,
        "model.net.init_args.dropout": 0.3,
        "model.net.init_args.hidden_sizes": [256, 256],
        "data.batch_size": 64,
    }
    first, second = (values(t.params) for t in study.trials[:2])
    assert first == defaults
    assert second == {**defaults, "model.net.init_args.hidden_sizes": [], "model.lr": 0.01}
    assert study.trials[1].user_attrs[SIZE] == 64 * 10 + 10  # a linear model
    assert all(t.params != study.trials[0].params for t in study.trials[2:])
    output = sweeps["shared-a"]["output"] + sweeps["shared-b"]["output"]
    assert re.search(r"trial +0 .*\[start point 0: train.py's values\]", output)
    assert re.search(r"trial +1 .*\[start point 1\]", output)


@pytest.mark.slow
def test_a_cross_validated_trial_is_the_mean_of_its_folds_and_fold_0_is_tested(
    sweeps, capsys: pytest.CaptureFixture[str]
) -> None:
    run = sweeps["folds"]
    folder = run["folder"] / "runs" / "sweeps" / "folds"
    study = load_study(run["folder"], "folds")
    (trial,) = finished(study)
    values = trial.user_attrs["fold_values"]
    assert len(values) == 2 and values[0] != values[1]
    assert trial.value == pytest.approx(sum(values) / 2, abs=1e-5)
    # Fold 0 is the plain run: its logs are the trial's, its best checkpoint is tested.
    log_dir = Path(trial.user_attrs["log_dir"]).relative_to(folder)
    assert "fold" not in str(log_dir) and "test/acc" in trial.user_attrs
    assert "the mean of 2 cross-validation folds" in (folder / "report.md").read_text()
    # best.yaml trains fold 0, the run whose test accuracy the trial reports.
    assert yaml.safe_load((folder / "best.yaml").read_text())["data"]["val_fold"] == 0
    # The study keeps its folds: a rerun with others would compare other values.
    with pytest.raises(SystemExit) as exit:
        run_sweep(run["folder"], *FOLDS_SWEEP[:3], "3", *FOLDS_SWEEP[4:])
    assert exit.value.code == 2
    assert "--folds 2): rerun with those" in capsys.readouterr().err


@pytest.mark.slow
def test_a_study_refuses_other_arguments_than_it_was_started_with(sweeps, capsys) -> None:
    """The rerun of a study must be the same command: other settings would mix trials that
    cannot be compared."""
    folder = sweeps["shared-a"]["folder"]
    with pytest.raises(SystemExit) as exit:
        run_sweep(folder, *SHARED, "--trainer.max_epochs", "4")
    assert exit.value.code == 2
    assert "was started with other arguments or another space" in capsys.readouterr().err


def sweep_error(folder: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run sweep.main expecting a refusal: exit code 2, one line, nothing written."""
    with pytest.raises(SystemExit) as exit:
        run_sweep(folder, *args)
    assert exit.value.code == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1, errors
    assert not (folder / "runs" / "sweeps").exists()
    return errors[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--trials=0",), "--trials 0: must be 1 or more"),
        (("--trials=-3",), "--trials -3: must be 1 or more"),
        (("--trials", "2", "--folds", "0"), "--folds 0: must be 1 (no cross-validation) or more"),
        pytest.param(
            ("--trials", "2", "--folds", "9"),
            "make 5 folds of the validation split's size: use --folds 5 or fewer",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ("--trials", "2", "--config", str(CONFIGS / "ddp-cpu.yaml")),
            "trains on 2 processes (1 node(s) x 2 device(s)): a sweep runs its trials in this "
            "process, so give each trial one device (--trainer.devices 1) and start one "
            "sweep.py per GPU sharing --storage",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_bad_sweep_options_are_refused_in_one_line_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], expected: str
) -> None:
    assert expected in sweep_error(tmp_path, capsys, *args)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("space", "top", "expected"),
    [
        (
            {"model.lrr": {"type": "float", "low": 0.001, "high": 0.1}},
            {},
            "space key model.lrr is no config key: did you mean model.lr?",
        ),
        (
            {"model.net.init_args.drop": {"type": "float", "low": 0.0, "high": 0.5}},
            {},
            "did you mean model.net.init_args.dropout?",
        ),
        (
            {"model.lr": {"type": "float", "low": 0.001}},
            {},
            "missing 1 required positional argument: 'high'",
        ),
        ({"model.lr": {"type": "normal", "mean": 0.01}}, {}, "is not a distribution"),
        (
            {"model.lr": {"type": "float", "low": 0.0, "high": 0.1, "log": True}},
            {},
            "`low > 0` must hold for `log=True`",
        ),
        (
            {"model.net.init_args.dropout": {"type": "float", "low": 0.0, "high": 1.5}},
            {},
            "space key model.net.init_args.dropout: train.py refuses 1.5: Parser key "
            '"dropout": Not of type ClosedUnitInterval',
        ),
        (
            {"model.lr": {"type": "float", "low": 0.001, "high": 0.1}},
            {"metric": "val/accuracy"},
            "metric 'val/accuracy' is not logged in validation: use one of val/acc, val/loss",
        ),
    ],
)
def test_a_bad_space_is_refused_in_one_line_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], space: dict, top: dict, expected: str
) -> None:
    path = write_space(tmp_path, space, **top)
    error = sweep_error(tmp_path, capsys, "--trials", "2", "--space", str(path))
    assert error.startswith("error: ")
    assert expected in error


def test_the_end_says_how_far_the_chosen_trial_is_below_the_logistic_regression() -> None:
    """In test samples; within two standard errors it is called chance, past them the note
    suggests what to try; the same count right (float32 against float64) is no gap."""
    spec = load_spec(CONFIGS / "sweep.yaml").for_task(("acc", "maximize"))
    baselines = {"majority_class": 0.6, "logistic_regression": 83 / 86, "test_samples": 86}

    def ending(test_accuracy: float) -> list[str]:
        study = optuna.create_study(direction="maximize")
        study.add_trial(
            optuna.trial.create_trial(
                params={"model.lr": 0.01},
                distributions={"model.lr": FloatDistribution(1e-4, 0.1, log=True)},
                value=0.98,
                user_attrs={"test/acc": test_accuracy, SIZE: 62, VAL_SAMPLES: 86},
            )
        )
        return summary_lines(study, spec, baselines, BASELINE_LINE, Path("runs/sweeps/x"))

    lines = ending(80 / 86)
    assert lines[0] == "chosen trial 0: val/acc 0.9800, test accuracy 0.9302; model.lr=0.01"
    assert lines[1] == BASELINE_LINE
    assert lines[-1] == "train it: python train.py --config runs/sweeps/x/best.yaml"
    assert (
        "note: the chosen trial gets 3 fewer of the 86 test samples right than the logistic "
        "regression (0.9302 < 0.9651), within two standard errors of its accuracy (4.2 "
        "samples): not distinguishable from chance (README: Tune it); report.md lists every "
        "trial's test accuracy"
    ) in lines
    assert (
        "note: the chosen trial gets 13 fewer of the 86 test samples right than the logistic "
        "regression (0.8140 < 0.9651): on this data a simpler model, or longer trials, may do "
        "better; report.md lists every trial's test accuracy"
    ) in ending(70 / 86)
    same_count = round(float(torch.tensor(83 / 86, dtype=torch.float32)), 6)
    assert not any(line.startswith("note:") for line in ending(same_count))
    assert not any(line.startswith("note:") for line in ending(84 / 86))


@pytest.mark.slow
def test_a_csv_of_breast_cancer_data_gets_both_baselines_in_the_run_and_the_sweep(
    sweeps, tmp_path: Path
) -> None:
    """scikit-learn's breast-cancer data as a user has it. The run reports the majority class
    and the logistic regression on its test split; the sweep's report puts the same numbers
    beside its best trial."""
    from {{ cookiecutter.package_name }}.data.datamodule import DataModule

    run = sweeps["interrupted"]
    csv = run["folder"] / "breast_cancer.csv"
    trained = run_training(tmp_path, "--data.path", str(csv), *SHORT, "--export.formats", "[]")
    baselines = trained.summary["baselines"]
    _, test_labels = DataModule(path=str(csv)).split_arrays("test")
    benign = trained.summary["class_names"].index("benign")  # the most frequent class
    assert baselines["majority_class"] == pytest.approx(float((test_labels == benign).mean()))
    assert baselines["logistic_regression"] >= 0.9
    line = (
        f"baselines (test split): majority class {baselines['majority_class']:.4f}, "
        f"logistic regression {baselines['logistic_regression']:.4f}"
    )
    assert line in trained.stdout
    assert line in run["output"]  # the sweep's line is train.py's
    # 86 validation samples: the sweep suggests cross-validation.
    _, validation = DataModule(path=str(csv)).split_arrays("val")
    assert f"note: the validation split has {len(validation)} samples" in run["output"]
    assert "--folds 5 compares them on 5 folds (cross-validation)" in run["output"]
    report = (run["folder"] / "runs" / "sweeps" / "sweep" / "report.md").read_text()
    assert (
        f"baselines on the same test split: majority class {baselines['majority_class']:.4g}, "
        f"logistic regression {baselines['logistic_regression']:.4g}"
    ) in report
    # The end says so when the chosen trial tests below the logistic regression.
    chosen = chosen_trial(load_study(run["folder"], "sweep"), "simplest")
    assert chosen is not None
    gap = linear_gap(chosen.user_attrs["test/acc"], baselines)
    assert ("note: the chosen trial gets " in run["output"]) == (gap is not None)


@pytest.mark.slow
def test_a_regression_sweep_minimises_the_rmse_beside_the_regression_baselines(
    tmp_path: Path,
) -> None:
    """The diabetes table: the sweep takes the task's metric, val/rmse, minimised, and puts
    the training mean's and the ridge regression's test RMSE beside its chosen trial."""
    from ..test_regression import write_diabetes

    csv = write_diabetes(tmp_path / "diabetes.csv")
    args = ("--trials", "2", "--data.path", str(csv), *SHORT, "--trainer.logger=false")
    with one_thread():
        folder, printed = run_sweep(tmp_path, *args)
    study = load_study(tmp_path, "sweep")
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    assert len(finished(study)) == 2
    assert "chosen trial " in printed and ": val/rmse " in printed
    assert "baselines (test split): training mean RMSE " in printed
    report = (folder / "report.md").read_text()
    assert "Minimise val/rmse" in report and "ridge regression RMSE" in report
    assert all("test/rmse" in trial.user_attrs for trial in finished(study))
