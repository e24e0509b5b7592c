import pytest
import torch

from {{ cookiecutter.package_name }}.data import DigitsDataModule
from {{ cookiecutter.package_name }}.module import LitClassifier

from .conftest import Run, run_training, run_until_exit


def test_fast_dev_run_smoke(tmp_path) -> None:
    run = run_training(tmp_path, "--trainer.fast_dev_run", "true")
    assert run.summary["global_step"] == 1
    assert "test/acc" in run.summary["metrics"]


@pytest.mark.slow
def test_short_training_clears_the_accuracy_bar(trained_run: Run) -> None:
    assert trained_run.summary["metrics"]["test/acc"] >= 0.96
    assert trained_run.summary["epochs"] == 25


@pytest.mark.slow
def test_summary_json_records_the_run(trained_run: Run) -> None:
    summary = trained_run.summary
    assert summary["seed"] == 42
    assert summary["wall_time_s"] > 0
    assert {"torch", "lightning", "python"} <= summary["versions"].keys()
    for key in ("run_dir", "best_checkpoint", "last_checkpoint", "logs"):
        assert summary["paths"][key], key
    assert trained_run.summary_path.parent.as_posix() == summary["paths"]["run_dir"]
    assert trained_run.stdout.rstrip().splitlines()[-1] == f"summary: {trained_run.summary_path}"


@pytest.mark.slow
def test_best_checkpoint_loads_weights_only_and_reproduces_test_accuracy(trained_run: Run) -> None:
    path = trained_run.summary["paths"]["best_checkpoint"]
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    assert "state_dict" in checkpoint and "hyper_parameters" in checkpoint
    model = LitClassifier.load_from_checkpoint(path, map_location="cpu").eval()
    datamodule = DigitsDataModule(num_workers=0)
    datamodule.setup("test")
    x, y = datamodule.test_set.tensors
    with torch.inference_mode():
        accuracy = (model(x).argmax(dim=-1) == y).float().mean().item()
    assert accuracy == pytest.approx(trained_run.summary["metrics"]["test/acc"], abs=1e-6)


def test_print_config_shows_the_resolved_configuration(tmp_path) -> None:
    result = run_until_exit(tmp_path, "--print_config", "--trainer.max_epochs", "3")
    assert result.code == 0
    assert "max_epochs: 3" in result.stdout
    assert "hidden_sizes:" in result.stdout


def test_unknown_option_is_refused(tmp_path) -> None:
    result = run_until_exit(tmp_path, "--trainer.max_epochz", "3")
    assert result.code != 0
    assert "max_epochz" in result.stderr
