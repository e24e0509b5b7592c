"""A sweep trial built from the config parsed once is the run that parsing its arguments
gives; where it would not be, the builder takes the full parse."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.search_space import args_of, load_spec
from {{ cookiecutter.package_name }}.sweep_setup import TRIAL_DEFAULTS, space_edges, trial_log_values
from {{ cookiecutter.package_name }}.trial_builder import TrialBuilder

from .conftest import CONFIGS, working_directory


@pytest.fixture
def builder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TrialBuilder:
    monkeypatch.setattr(sys, "argv", ["sweep.py"])
    with working_directory(tmp_path):
        return TrialBuilder([*TRIAL_DEFAULTS, "--trainer.max_epochs=2"], CONFIGS / "default.yaml")


def built_settings(cli) -> dict:
    """What a run is made of: the saved hyper-parameters of model and data, the Trainer's
    settings, its callbacks and where it logs."""
    trainer = cli.trainer
    return {
        "model": dict(cli.model.hparams),
        "data": dict(cli.datamodule.hparams),
        "epochs": trainer.max_epochs,
        "root": trainer.default_root_dir,
        "log_dir": trainer.logger.log_dir,
        "callbacks": [type(callback).__name__ for callback in trainer.callbacks],
    }


@pytest.mark.slow
def test_a_trial_built_from_the_parsed_config_equals_the_parsed_run(
    builder: TrialBuilder, tmp_path: Path
) -> None:
    spec = load_spec(CONFIGS / "sweep.yaml")
    logs = trial_log_values(builder.base.config, tmp_path / "sweeps" / "s")
    assert builder.verify(space_edges(spec), {**logs(0, 1), "data.val_fold": 1})
    values = {
        "model.lr": 0.0123,
        "model.net.init_args.hidden_sizes": [64],
        "model.net.init_args.dropout": 0.1,
        "data.batch_size": 32,
        "data.val_fold": 2,
        **logs(7, 2),
    }
    fast = built_settings(builder(values))
    builder.fast = False
    parsed = built_settings(builder(values))
    assert fast == parsed
    assert fast["model"]["lr"] == 0.0123 and fast["data"]["val_fold"] == 2
    assert fast["log_dir"] == str(tmp_path / "sweeps" / "s" / "trials" / "trial-007-fold2")
    # Each build its own: the next trial's values are not the first one's.
    builder.fast = True
    assert built_settings(builder({**values, "model.lr": 0.5}))["model"]["lr"] == 0.5


@pytest.mark.slow
def test_a_value_the_parser_would_convert_sends_every_trial_through_the_parser(
    builder: TrialBuilder,
) -> None:
    """A class given by name is turned into a class_path by the parser; set as it is, it
    would not be: verify notices and keeps the full parse."""
    cnn = "{{ cookiecutter.package_name }}.model.ConvClassifier"
    assert not builder.verify([{"model.net": cnn}])
    assert type(builder({"model.net": cnn}).model.model.net).__name__ == "ConvClassifier"


def test_values_become_arguments_that_parse_as_written() -> None:
    """Strings stay bare (jsonargparse keeps a JSON string's quotes for a str option);
    lists, numbers and None are JSON."""
    values = {"a.path": "runs/x y", "a.sizes": [1, 2], "a.lr": 0.001, "a.none": None}
    assert args_of(values) == [
        "--a.path=runs/x y",
        "--a.sizes=[1, 2]",
        "--a.lr=0.001",
        "--a.none=null",
    ]
