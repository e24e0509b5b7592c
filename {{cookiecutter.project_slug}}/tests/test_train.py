import gc
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import predict
from {{ cookiecutter.package_name }}.data.datamodule import DataModule
from {{ cookiecutter.package_name }}.module import LitModel

from .conftest import Run, build, logged_values, run_training, run_until_exit
from .networks import KINDS, net_args
from .subprocesses import TRAIN, script_env


@pytest.mark.slow
def test_fast_dev_run_smoke(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        run = run_training(tmp_path, "--trainer.fast_dev_run", "true")
    assert run.summary["global_step"] == 1
    assert "test/acc" in run.summary["metrics"]
    # The first line says what runs, instead of Lightning's "GPU/TPU available" lines.
    first = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("training "))
    assert first.startswith("training MLP (85,002 parameters) on the built-in digits")
    assert "samples of shape (1, 8, 8), 10 classes; cpu, 1 process x " in first
    assert not [r for r in caplog.records if "TPU available" in r.getMessage()]


@pytest.mark.slow
def test_a_run_without_a_logger_trains_and_says_so(tmp_path: Path) -> None:
    """--trainer.logger false: the learning-rate monitor, which needs a logger, is left out
    instead of stopping the run with Lightning's traceback. And main() in a running process
    freezes nothing for the garbage collector (only the script does, before main()): a
    frozen earlier run would never be freed."""
    frozen = gc.get_freeze_count()
    run = run_training(
        tmp_path, "--trainer.logger", "false", "--trainer.max_epochs", "1", "--export.formats", "[]"
    )
    assert run.summary["epochs"] == 1 and "test/acc" in run.summary["metrics"]
    assert "logs: none (no logger: --trainer.logger false)" in run.stdout
    assert gc.get_freeze_count() <= frozen  # frozen objects can still die, none is added


@pytest.mark.slow
def test_help_lists_the_options_without_importing_what_only_a_run_uses(tmp_path: Path) -> None:
    """`python train.py --help` pays for Lightning and the parser, not for scikit-learn,
    ONNX, W&B, Optuna or FastAPI: each is imported where it is used."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", str(TRAIN), "--help"],
        cwd=tmp_path,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--trainer.max_epochs" in result.stdout and "--data.path" in result.stdout
    # -X importtime: "import time: self | cumulative | package.module" for every import.
    modules = [
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    ]
    imported = {module.split(".")[0] for module in modules}
    assert "lightning" in imported and "torchmetrics" in imported
    unused = {"sklearn", "onnx", "onnxruntime", "onnxscript", "wandb", "optuna", "fastapi"}
    assert not imported & unused


@pytest.mark.slow
def test_short_training_clears_the_accuracy_bar(trained_run: Run) -> None:
    assert trained_run.summary["metrics"]["test/acc"] >= 0.96
    assert trained_run.summary["epochs"] == 25


@pytest.mark.slow
@pytest.mark.logger
def test_summary_json_records_the_run(trained_run: Run) -> None:
    summary = trained_run.summary
    assert (summary["status"], summary["reason"]) == ("completed", None)
    assert summary["class_names"] == [str(digit) for digit in range(10)]
    assert summary["seed"] == 42
    assert summary["wall_time_s"] > 0
    assert {"torch", "lightning", "python"} <= summary["versions"].keys()
    for key in ("run_dir", "best_checkpoint", "last_checkpoint", "logs"):
        assert summary["paths"][key], key
    assert trained_run.summary_path.parent.as_posix() == summary["paths"]["run_dir"]
    assert trained_run.stdout.rstrip().splitlines()[-1] == f"summary: {trained_run.summary_path}"


@pytest.mark.slow
@pytest.mark.logger
def test_the_logger_run_holds_every_epoch_and_the_test_metrics(trained_run: Run) -> None:
    """Read back with the logger's own reader (TensorBoard's, metrics.csv, MLflow's client)."""
    run_dir = Path(trained_run.summary["paths"]["run_dir"])
    assert (run_dir / "config.yaml").is_file(), "the run's exact config, beside its summary"
    validation = logged_values(run_dir, trained_run.stdout, "val/acc")
    if validation is None:
        pytest.skip("W&B's offline run files are read by its servers only")
    assert len(validation) == trained_run.summary["epochs"]
    test = logged_values(run_dir, trained_run.stdout, "test/acc")
    assert test is not None
    (accuracy,) = test.values()
    assert accuracy == pytest.approx(trained_run.summary["metrics"]["test/acc"])


@pytest.mark.slow
def test_best_checkpoint_loads_weights_only_and_reproduces_test_accuracy(trained_run: Run) -> None:
    path = trained_run.summary["paths"]["best_checkpoint"]
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    assert "state_dict" in checkpoint and "hyper_parameters" in checkpoint
    model = LitModel.load_from_checkpoint(path, map_location="cpu").eval()
    x, y = map(torch.from_numpy, DataModule().split_arrays("test"))
    with torch.inference_mode():
        accuracy = (model(x).argmax(dim=-1) == y).float().mean().item()
    assert accuracy == pytest.approx(trained_run.summary["metrics"]["test/acc"], abs=1e-6)


@pytest.mark.slow
def test_print_config_shows_the_resolved_configuration(tmp_path) -> None:
    result = run_until_exit(tmp_path, "--print_config", "--trainer.max_epochs", "3")
    assert result.code == 0
    assert "max_epochs: 3" in result.stdout
    assert "class_path: {{ cookiecutter.package_name }}.networks.MLP" in result.stdout
    assert "hidden_sizes:" in result.stdout


def test_unknown_option_is_refused(tmp_path) -> None:
    result = run_until_exit(tmp_path, "--trainer.max_epochz", "3")
    assert result.code != 0
    assert "max_epochz" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_any_network_trains_tests_exports_and_reloads_from_its_checkpoint(
    tmp_path, kind: str
) -> None:
    """Chosen on the command line only (the user's network lives in tests/, not in src/)."""
    run = run_training(tmp_path, *net_args(kind), "--trainer.max_epochs", "3")
    summary = run.summary
    assert summary["metrics"]["test/acc"] > 0.5
    assert set(summary["export"]) >= {"eager", "torchscript", "int8", "torch.export"}
    # The checkpoint names its network: it reloads weights-only, with no argument.
    path = summary["paths"]["best_checkpoint"]
    hyper_parameters = torch.load(path, weights_only=True)["hyper_parameters"]
    assert hyper_parameters["net"]["class_path"].endswith(net_args(kind)[1].rsplit(".", 1)[1])
    assert hyper_parameters["net"]["init_args"]["input_shape"] == (1, 8, 8)
    model = LitModel.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    assert type(model.model.net).__name__ == hyper_parameters["net"]["class_path"].rsplit(".")[-1]
    eager = summary["export"]["eager"]["accuracy"]
    assert eager == pytest.approx(summary["metrics"]["test/acc"], abs=1e-6)
    # predict.py on the export gives the checkpoint's classes, by name.
    x = torch.from_numpy(DataModule().split_arrays("test")[0])
    np.save(tmp_path / "test.npy", x[:20].numpy())
    with torch.inference_mode():
        expected = model.eval()(x[:20]).argmax(dim=-1).tolist()
    predictions = predict.main(
        [summary["export"]["torch.export"]["path"], str(tmp_path / "test.npy")]
    )
    assert [p.classes[0] for p in predictions] == [str(c) for c in expected]


@pytest.mark.parametrize(
    ("net", "message"),
    [
        ("torch.nn.Flatten", "must accept input_shape and num_outputs"),
        ("torch.nn.Identity", "maps a batch of shape (2, 1, 8, 8) to (2, 1, 8, 8)"),
        ("tests.networks.nothing", "tests.networks.nothing"),
    ],
)
@pytest.mark.slow
def test_a_network_that_breaks_the_contract_is_refused_in_one_line(
    tmp_path, net: str, message: str
) -> None:
    result = run_until_exit(tmp_path, "--model.net", net)
    assert result.code == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) <= 5, result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_the_network_gets_its_input_shape_and_classes_from_the_data(tmp_path) -> None:
    cli = build(tmp_path, *net_args("cnn"), "--trainer.logger", "false")
    assert cli.model.model.net.blocks[0][0].in_channels == 1
    assert cli.model.model.net.head[-1].out_features == 10
    assert cli.model.hparams.input_shape == (1, 8, 8)
    assert cli.model.hparams.output_names == [str(digit) for digit in range(10)]


@pytest.mark.slow
# Non-finite values are the point: torchmetrics drops a NaN from the epoch mean, warning.
@pytest.mark.filterwarnings("ignore:Encountered `nan` values in tensor")
def test_a_run_stopped_by_the_nan_guard_says_so_in_one_line_and_in_its_summary(tmp_path) -> None:
    result = run_until_exit(
        tmp_path, "--model.net", "tests.networks.NaNAfter", "--model.net.init_args.bad_call", "4"
    )
    assert result.code == 1
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: loss is nan at global step 3 (epoch 0)"), result.stderr
    assert "Traceback" not in result.stderr
    summary_path = Path(result.stdout.strip().splitlines()[-1].removeprefix("summary: "))
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "failed" and summary["reason"] == line.removeprefix("error: ")
    assert (summary["epochs"], summary["global_step"]) == (0, 3)
    assert summary["metrics"] == {} and summary["export"] == {}
