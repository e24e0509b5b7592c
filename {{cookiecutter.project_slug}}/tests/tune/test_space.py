"""The sweep's pieces, without training: the space file, the per-trial seeding, a killed
trial failed and retried by Optuna's heartbeat, the choice of the best trial and the report."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState, create_trial

from {{ cookiecutter.package_name }}.tune import study as study_module
from {{ cookiecutter.package_name }}.tune.report import (
    best_trial,
    chosen_trial,
    standard_error,
    write_report,
)
from {{ cookiecutter.package_name }}.tune.space import (
    SpaceError,
    SweepSpec,
    args_of,
    check_keys,
    from_param,
    load_spec,
    to_param,
    values,
)
from {{ cookiecutter.package_name }}.tune.study import TrialSeededSampler, open_storage
from {{ cookiecutter.package_name }}.tune.trial import SIZE, TIE_BREAK, VAL_SAMPLES

from ..conftest import CONFIGS
from ..subprocesses import script_env

# RetryHeartbeatStaleTrialCallback.retried_trial_number, fail_stale_trials: "experimental"
EXPERIMENTAL = "ignore::optuna.exceptions.ExperimentalWarning"
pytestmark = [pytest.mark.tuning, pytest.mark.filterwarnings(EXPERIMENTAL)]
optuna.logging.set_verbosity(optuna.logging.ERROR)


def test_the_shipped_space_reads_as_documented() -> None:
    spec = load_spec(CONFIGS / "sweep.yaml")
    assert (spec.metric, spec.direction, spec.pruner) == ("", "", "median")  # the task's
    classes = spec.for_task(("acc", "maximize"))
    assert (classes.metric, classes.direction, classes.test_metric) == (
        "val/acc",
        "maximize",
        "test/acc",
    )
    values = spec.for_task(("rmse", "minimize"))
    assert (values.metric, values.direction, values.test_metric) == (
        "val/rmse",
        "minimize",
        "test/rmse",
    )
    assert load_spec(CONFIGS / "sweep.yaml").for_task(("acc", "maximize")).metric_is_accuracy
    assert spec.warmup_epochs >= 1 and spec.startup_trials >= 1
    lr, hidden = spec.space["model.lr"], spec.space["model.net.init_args.hidden_sizes"]
    assert isinstance(lr, FloatDistribution) and lr.log
    assert isinstance(hidden, CategoricalDistribution) and "[]" in hidden.choices  # linear
    assert set(spec.space) >= {"model.lr", "model.weight_decay", "data.batch_size"}
    # First train.py's own config, then a linear model; best.yaml takes the simplest trial.
    assert spec.start == ({}, {"model.net.init_args.hidden_sizes": [], "model.lr": 0.01})
    assert spec.select == "simplest"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


A = "space: {a: {type: float, low: 1, high: 2}}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("space: [", "not valid YAML"),
        ("metric: val/acc\n", "a non-empty 'space:'"),
        ("space: {}\n", "a non-empty 'space:'"),
        ("spaces: {model.lr: {type: float, low: 1, high: 2}}\n", "a non-empty 'space:'"),
        (A + "metrics: x\n", "unknown top-level key"),
        (A + "pruner: hyperband\n", "expected {kind"),
        (A + "pruner: {warmup_epochs: -1}\n", "pruner.warmup_epochs -1: must be 0 or more"),
        ("space: {a: 0.1}\n", "0.1 is not a distribution"),
        ("space: {a: {type: int, low: 1.5, high: 4}}\n", "low must be a finite int number"),
        ("space: {a: {type: float, low: 1, high: .inf}}\n", "high must be a finite float"),
        # Optuna's own checks, each in one line naming the key:
        ("space: {a: {type: float, low: 1, high: 2, log: true, step: 0.5}}\n", "key a: The "),
        ("space: {a: {type: float, low: 0, high: 2, log: true}}\n", "`low > 0` must hold"),
        ("space: {a: {type: float, low: 3, high: 2}}\n", "`low <= high` must hold"),
        ("space: {a: {type: float, low: 1, high: 2, scale: log}}\n", "keyword argument 'scale'"),
        ("space: {a: {type: float, low: 1}}\n", "missing 1 required positional argument"),
        ("space: {a: {type: categorical, choices: []}}\n", "one or more elements"),
        ("space: {a: {type: categorical, choices: 3}}\n", "choices must be a non-empty list"),
        (A + "metric: ''\n", "must be a logged metric"),
        (A + "select: newest\n", "must be best or simplest"),
        (A + "direction: up\n", "direction 'up': must be maximize or minimize"),
        (A + "start: {a: 1}\n", "a list of mappings"),
        (
            "space: {lr: {type: float, low: 1, high: 2}}\nstart: [{}, {lrate: 1.5}]\n",
            "start point 1: lrate is no space key: did you mean lr?",
        ),
        (A + "start: [{a: 3}]\n", "start point 0: a: 3 is outside its distribution Float"),
        (
            "space: {a: {type: int, low: 0, high: 8, step: 2}}\nstart: [{a: 3}]\n",
            "a: 3 is outside its distribution IntDistribution(high=8, log=False, low=0, step=2)",
        ),
        (
            "space: {h: {type: categorical, choices: [[], [8]]}}\nstart: [{h: [9]}]\n",
            "h: [9] is outside its distribution",
        ),
        (  # the trial would run 64.0, which the option refuses, and Optuna store 64
            "space: {b: {type: categorical, choices: [32, 64]}}\nstart: [{b: 64.0}]\n",
            "b: 64.0 is outside its distribution",
        ),
        (
            "space: {f: {type: categorical, choices: [0, 1]}}\nstart: [{f: false}]\n",
            "f: False is outside its distribution",
        ),
        (
            "space: {lr: {type: float, low: 0.001, high: 0.1}}\nstart: [{lr: 1e-2}]\n",
            "'1e-2' is text, not a number (write 1.0e-2)",
        ),
    ],
)
def test_a_malformed_space_is_refused_with_what_to_write(
    tmp_path: Path, text: str, expected: str
) -> None:
    with pytest.raises(SpaceError) as error:
        load_spec(write(tmp_path, text))
    assert expected in str(error.value)
    assert "\n" not in str(error.value)
    assert str(tmp_path) in str(error.value)  # the file it is in


def test_a_missing_space_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match="no such file"):
        load_spec(tmp_path / "nope.yaml")


def test_list_choices_travel_through_optuna_as_text_and_come_back() -> None:
    for choice in ([], [256, 256], {"a": 1}):
        assert from_param(to_param(choice)) == choice
        assert isinstance(to_param(choice), str)
    for scalar in (32, 0.5, "relu", None, True):
        assert to_param(scalar) == scalar
    args = args_of(values({"model.net.init_args.hidden_sizes": "[128, 64]", "model.lr": 0.01}))
    assert args == ["--model.net.init_args.hidden_sizes=[128, 64]", "--model.lr=0.01"]


def test_an_unknown_key_names_the_closest_config_key() -> None:
    spec = load_spec(CONFIGS / "sweep.yaml")
    valid = list(spec.space)
    check_keys(spec, valid)  # every key known: passes
    with pytest.raises(SpaceError, match=r"model\.weight_decay is no config key: see python"):
        check_keys(spec, [k for k in valid if k != "model.weight_decay"] + ["zzz"])
    typo = SweepSpec(space={"model.lrate": FloatDistribution(0.1, 1.0)})
    with pytest.raises(SpaceError, match=r"did you mean model\.lr\?"):
        check_keys(typo, valid)


def test_the_edges_reach_every_bound_and_choice() -> None:
    spec = SweepSpec(
        space={
            "lr": FloatDistribution(0.1, 1.0),
            "hidden": CategoricalDistribution(["[]", "[8]", "[8, 8]"]),
        }
    )
    assert spec.edges() == [
        {"lr": 0.1, "hidden": []},
        {"lr": 1.0, "hidden": [8]},
        {"lr": 0.1, "hidden": [8, 8]},
    ]


def test_start_points_are_the_first_trials_and_fill_in_what_they_leave_out() -> None:
    spec = load_spec(CONFIGS / "sweep.yaml")
    config = {
        "model.lr": 0.003,
        "model.weight_decay": 0.01,
        "model.net.init_args.dropout": 0.3,
        "model.net.init_args.hidden_sizes": (256, 256),  # as parsed: a tuple
        "data.batch_size": 48,  # no choice of the space: drawn
    }
    (defaults, linear), drawn = spec.start_params(config.get)
    assert drawn == [
        f"start point {n}: data.batch_size is drawn, train.py's 48 is outside the space"
        for n in (0, 1)
    ]
    assert defaults == {
        "model.lr": 0.003,
        "model.weight_decay": 0.01,
        "model.net.init_args.dropout": 0.3,
        "model.net.init_args.hidden_sizes": "[256, 256]",
    }
    assert linear == {**defaults, "model.net.init_args.hidden_sizes": "[]", "model.lr": 0.01}


def draw(seed: int, trials: int, starts: tuple[dict, ...] = (), startup: int = 10) -> list[dict]:
    spec = SweepSpec(
        space={
            "lr": FloatDistribution(1e-4, 1e-1, log=True),
            "hidden": CategoricalDistribution(["[]", "[8]", "[8, 8]"]),
        }
    )
    study = optuna.create_study(sampler=TrialSeededSampler(seed, startup, starts))
    params = []
    for number in range(trials):
        trial = study.ask()
        params.append(spec.suggest(trial))
        study.tell(trial, 0.5 + number / 100)
    return params


def test_the_sampler_runs_the_start_points_first_then_draws() -> None:
    starts = ({"lr": 0.003, "hidden": "[8, 8]"}, {"hidden": "[]"})
    first = draw(42, 6, starts, startup=2)
    assert first[0] == {"lr": 0.003, "hidden": [8, 8]}
    assert first[1]["hidden"] == [] and first[1]["lr"] != 0.003  # lr drawn
    assert first == draw(42, 6, starts, startup=2)  # seeded: the same every time
    assert all(1e-4 <= p["lr"] <= 1e-1 for p in first[2:])


def test_each_trial_is_seeded_by_its_number() -> None:
    """The same study draws the same values for trial N every time (a resumed study goes on
    as if never stopped), and no two trials share their values."""
    first, again = draw(42, 4), draw(42, 4)
    assert first == again
    assert len({p["lr"] for p in first}) == 4
    assert draw(7, 4) != first


KILLED_TRIAL = """
import os, signal, time, optuna
from {{ cookiecutter.package_name }}.tune.study import open_storage

def objective(trial):
    trial.suggest_float("x", 0.0, 1.0)
    time.sleep(0.5)  # the heartbeat's first beat
    os.kill(os.getpid(), signal.SIGKILL)

optuna.load_study(study_name="s", storage=open_storage(os.environ["URL"])).optimize(objective)
"""


@pytest.mark.slow  # starts a process
def test_a_killed_processes_trial_is_failed_and_retried_by_optunas_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(study_name="s", storage=open_storage(url))
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_TRIAL], env=script_env(URL=url), check=False, timeout=120
    )
    assert killed.returncode == -9
    monkeypatch.setattr(study_module, "GRACE_S", 1)  # this process's look: a shorter grace
    study = optuna.load_study(study_name="s", storage=open_storage(url))
    (running,) = study.get_trials(states=(TrialState.RUNNING,))
    for _ in range(300):  # until the grace period has passed (SQLite's clock: whole seconds)
        optuna.storages.fail_stale_trials(study)  # Optuna's own, as every optimize call does
        if not study.get_trials(states=(TrialState.RUNNING,)):
            break
        time.sleep(0.1)
    failed, retry = study.get_trials()
    assert failed.state == TrialState.FAIL
    assert retry.state == TrialState.WAITING and retry.params == running.params
    assert RetryHeartbeatStaleTrialCallback.retried_trial_number(retry) == failed.number


NEW_STUDY = """
import os, sys, time, optuna
from {{ cookiecutter.package_name }}.tune.study import open_storage

time.sleep(max(0.0, float(sys.argv[1]) - time.time()))  # all at once
optuna.create_study(study_name="s", storage=open_storage(os.environ["URL"]), load_if_exists=True)
"""


@pytest.mark.slow  # starts processes
def test_processes_started_together_on_a_new_database_all_open_the_study(tmp_path: Path) -> None:
    """Each creates Optuna's tables, and all but the first may fail (optuna/optuna#1092):
    open_storage opens it again."""
    env = script_env(URL=f"sqlite:///{tmp_path / 'study.db'}")
    at = str(time.time() + 3)  # once all have imported Optuna (or at once, if later)
    command = [sys.executable, "-c", NEW_STUDY, at]
    processes = [subprocess.Popen(command, env=env, stderr=subprocess.PIPE) for _ in range(3)]
    for process in processes:
        assert process.wait(timeout=120) == 0, process.stderr.read() if process.stderr else ""
    assert optuna.get_all_study_names(f"sqlite:///{tmp_path / 'study.db'}") == ["s"]


def add(
    study: optuna.Study, value: float, loss: float, test_acc: float = 0.9, **attrs: object
) -> None:
    study.add_trial(
        create_trial(
            value=value,
            params={"model.lr": 0.01},
            distributions={"model.lr": FloatDistribution(1e-4, 1e-1, log=True)},
            user_attrs={TIE_BREAK: loss, "test/acc": test_acc, **attrs},
        )
    )


def test_the_standard_error_is_binomial_over_the_validation_samples_or_that_of_the_folds() -> None:
    study = optuna.create_study(direction="maximize")
    add(study, 1.0, 0.1, **{VAL_SAMPLES: 86})  # perfect, yet uncertain: (86+2)/(86+4)
    add(study, 0.5, 0.1, **{VAL_SAMPLES: 100})
    add(study, 0.9, 0.1, fold_values=[0.8, 0.9, 1.0])
    add(study, 0.9, 0.1)  # nothing known
    add(study, 3.0, 0.1, **{VAL_SAMPLES: 100})  # not a proportion
    perfect, half, folds, unknown, other = study.trials
    assert standard_error(perfect) == pytest.approx(math.sqrt(88 / 90 * 2 / 90 / 86))
    assert standard_error(half) == pytest.approx(0.05)
    assert standard_error(folds) == pytest.approx(0.1 / math.sqrt(3))
    assert standard_error(unknown) == standard_error(other) == 0.0


def test_only_an_accuracy_has_a_binomial_standard_error() -> None:
    accuracy = load_spec(CONFIGS / "sweep.yaml").for_task(("acc", "maximize"))
    loss = SweepSpec(metric="val/loss")
    assert accuracy.metric_is_accuracy and not loss.metric_is_accuracy
    assert SweepSpec(metric="val_accuracy").metric_is_accuracy
    assert SweepSpec(metric="valid/Accuracy").metric_is_accuracy
    assert not SweepSpec(metric="val/f1").metric_is_accuracy


def test_simplest_takes_the_fewest_parameters_within_one_standard_error_of_the_best() -> None:
    study = optuna.create_study(direction="maximize")
    add(study, 1.000, 0.20, **{SIZE: 74_242, VAL_SAMPLES: 86})  # the best value (SE 0.0159)
    add(study, 0.9884, 0.30, **{SIZE: 4_226, VAL_SAMPLES: 86})  # within: 1 sample fewer
    add(study, 0.9884, 0.25, **{SIZE: 4_226, VAL_SAMPLES: 86})  # same size, lower loss
    add(study, 0.9767, 0.10, **{SIZE: 62, VAL_SAMPLES: 86})  # 2 samples fewer: outside
    best, simplest = chosen_trial(study, "best"), chosen_trial(study, "simplest")
    assert best is not None and simplest is not None
    assert [best.number, simplest.number] == [0, 2]
    minimising = optuna.create_study(direction="minimize")
    add(minimising, 0.10, 0.1, **{SIZE: 1000}, fold_values=[0.05, 0.15])  # SE 0.05
    add(minimising, 0.14, 0.1, **{SIZE: 10})  # within 0.10 + 0.05
    add(minimising, 0.16, 0.1, **{SIZE: 1})  # outside
    simplest = chosen_trial(minimising, "simplest")
    assert simplest is not None and simplest.number == 1
    assert chosen_trial(optuna.create_study(), "simplest") is None


def test_ties_of_the_metric_go_to_the_lower_validation_loss() -> None:
    study = optuna.create_study(direction="maximize")
    add(study, 0.98, 0.10)
    add(study, 1.00, 0.30)
    add(study, 1.00, 0.20)  # the best: tied at 1.0, lower loss
    add(study, 1.00, 0.25)
    best = best_trial(study)
    assert best is not None and best.number == 2
    minimising = optuna.create_study(direction="minimize")
    add(minimising, 0.2, 0.2)
    add(minimising, 0.1, 0.9)
    best = best_trial(minimising)
    assert best is not None and best.number == 1
    assert best_trial(optuna.create_study()) is None


def test_the_report_lists_every_trial_best_first_beside_the_baselines(tmp_path: Path) -> None:
    study = optuna.create_study(direction="maximize", study_name="demo")
    add(study, 0.90, 0.3, test_acc=0.88)
    add(study, 0.97, 0.2, test_acc=0.95)
    study.add_trial(create_trial(state=TrialState.FAIL))
    spec = load_spec(CONFIGS / "sweep.yaml").for_task(("acc", "maximize"))
    baselines = {"majority_class": 0.1, "logistic_regression": 0.96}
    report = write_report(study, spec, tmp_path, baselines, ["slice"])
    text = report.read_text()
    assert "Trials: 2 complete, 1 fail." in text
    assert "## Chosen: trial 1 (select: simplest)" in text
    assert "test accuracy (its best checkpoint): 0.95" in text
    assert "majority class 0.1, logistic regression 0.96" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row.split(" | ")[0] for row in rows[1:]] == ["| 1", "| 0", "| 2"]
    assert "![slice](slice.png)" in text
    skipped = {"majority_class": 0.1, "logistic_regression": None, "skipped": "too large"}
    text = write_report(study, spec, tmp_path, skipped, []).read_text()
    assert "logistic regression skipped (too large)" in text


def test_the_report_says_why_a_smaller_trial_than_the_best_was_chosen(tmp_path: Path) -> None:
    study = optuna.create_study(direction="maximize", study_name="demo")
    add(study, 1.0, 0.2, test_acc=0.94, **{SIZE: 74_242, VAL_SAMPLES: 86})
    add(study, 0.9884, 0.3, test_acc=0.97, **{SIZE: 62, VAL_SAMPLES: 86})
    spec = load_spec(CONFIGS / "sweep.yaml").for_task(("acc", "maximize"))
    text = write_report(study, spec, tmp_path, {}, []).read_text()
    assert "## Chosen: trial 1 (select: simplest)" in text
    assert "- val/acc: 0.9884 ± 0.0193" in text
    assert (
        "- the fewest parameters (62) within one standard error of the best value, trial 0's "
        "1.0000 ± 0.0159 (74,242 parameters)"
    ) in text
    header = next(line for line in text.splitlines() if line.startswith("| trial"))
    assert header.startswith("| trial | state | val/acc | test/acc | parameters |")
    assert "| 1 | complete | 0.9884 | 0.97 | 62 |" in text
    assert "| start point 0: train.py's values |" in text  # the note column
    assert "| start point 1 |" in text
    best = dataclasses.replace(spec, select="best")
    assert "## Best: trial 0" in write_report(study, best, tmp_path, {}, []).read_text()
    add(study, 1.0, 0.1, **{SIZE: 62, VAL_SAMPLES: 86})  # the best value, and the smallest
    text = write_report(study, spec, tmp_path, {}, []).read_text()
    assert "## Chosen: trial 2 (select: simplest)" in text
    assert (
        "- the fewest parameters (62) within one standard error of the best value, trial 2's "
        "1.0000 ± 0.0159 (62 parameters)"
    ) in text
    unknown = optuna.create_study(direction="maximize", study_name="loss")
    add(unknown, 0.9, 0.2, **{SIZE: 1000})  # no validation samples recorded: no error known
    add(unknown, 0.8, 0.2, **{SIZE: 10})
    text = write_report(unknown, spec, tmp_path, {}, []).read_text()
    assert "## Chosen: trial 0 (select: simplest)" in text
    assert "- val/acc: 0.9000\n" in text  # no ± 0.0000
    assert "- the best value: val/acc has no known standard error without --folds" in text
