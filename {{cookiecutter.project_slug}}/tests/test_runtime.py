"""Start-up settings: a progress bar only in terminals, known third-party noise hidden and
nothing else."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }} import runtime
from {{ cookiecutter.package_name }}.training.cli import build_cli

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = PROJECT_ROOT / "configs" / "default.yaml"


@pytest.mark.parametrize("tty", [True, False])
@pytest.mark.slow
def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch, tty: bool) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    cli = build_cli(["--trainer.logger=false", "--export.formats=[]"], DEFAULT_CONFIG)
    assert (cli.trainer.progress_bar_callback is not None) is tty


def test_known_noise_is_hidden_and_other_warnings_still_show() -> None:
    """A small dataset (7 batches an epoch, log_every_n_steps 10) runs without Lightning's
    logging-interval warning; a warning nobody has checked is still shown."""
    from lightning.fabric.utilities.warnings import PossibleUserWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runtime.quiet_known_noise()
        warnings.warn(
            "The number of training batches (7) is smaller than the logging interval "
            "Trainer(log_every_n_steps=10).",
            PossibleUserWarning,
            stacklevel=1,
        )
        warnings.warn("something new", PossibleUserWarning, stacklevel=1)
    assert [str(warning.message) for warning in caught] == ["something new"]
