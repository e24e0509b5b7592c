"""configs/*.yaml: every preset parses, keeps the defaults it does not mention, and builds the
Trainer it promises; GPU presets on a machine without a GPU stop at once with the fix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import lightning as L
import pytest
import torch
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

from {{ cookiecutter.package_name }}.hardware import HardwareError, check_hardware

from .conftest import build, run_until_exit
from .subprocesses import run_train

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PRESETS = sorted(p.stem for p in CONFIGS.glob("*.yaml") if p.stem != "default")
MOCKED_GPUS = 4
# name: (accelerator, strategy, precision, devices per node, nodes)
EXPECTED = {
    "cpu": (CPUAccelerator, SingleDeviceStrategy, "32-true", 1, 1),
    "gpu": (CUDAAccelerator, SingleDeviceStrategy, "32-true", 1, 1),
    "bf16-mixed": (CPUAccelerator, SingleDeviceStrategy, "bf16-mixed", 1, 1),
    "16-mixed": (CUDAAccelerator, SingleDeviceStrategy, "16-mixed", 1, 1),
    "ddp": (CUDAAccelerator, DDPStrategy, "32-true", MOCKED_GPUS, 1),
    "ddp-cpu": (CPUAccelerator, DDPStrategy, "32-true", 2, 1),
    "multi-node": (CUDAAccelerator, DDPStrategy, "32-true", MOCKED_GPUS, 2),
    "debug": (CPUAccelerator, SingleDeviceStrategy, "32-true", 1, 1),
    "reproducible": (CPUAccelerator, SingleDeviceStrategy, "32-true", 1, 1),
    "low-memory": (CPUAccelerator, SingleDeviceStrategy, "32-true", 1, 1),
}
NEEDS_GPU = {"gpu", "16-mixed", "ddp", "multi-node"}


@pytest.fixture
def restore_torch_flags(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A deterministic Trainer switches torch to deterministic algorithms process-wide."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(deterministic)


@pytest.fixture(scope="module")
def default_types(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[type], type]:
    """The callback and logger classes of configs/default.yaml alone."""
    trainer = build(tmp_path_factory.mktemp("default")).trainer
    return [type(c) for c in trainer.callbacks], type(trainer.logger)


@pytest.fixture
def mocked_gpus() -> Iterator[None]:
    """Lightning and our check see MOCKED_GPUS CUDA devices, so GPU presets build on any
    machine. Nothing runs on them: only the Trainer's construction is exercised."""
    with (
        mock.patch("lightning.fabric.accelerators.cuda.num_cuda_devices", return_value=MOCKED_GPUS),
        mock.patch(
            "lightning.pytorch.accelerators.cuda.num_cuda_devices", return_value=MOCKED_GPUS
        ),
        mock.patch.object(CUDAAccelerator, "is_available", return_value=True),
        mock.patch("{{ cookiecutter.package_name }}.hardware.gpu_kind", return_value="cuda"),
        mock.patch("torch.cuda.device_count", return_value=MOCKED_GPUS),
        mock.patch("torch.cuda.is_bf16_supported", return_value=True),
    ):
        yield


def test_every_preset_is_covered_and_headed_by_its_command() -> None:
    assert set(PRESETS) == set(EXPECTED)
    for name in PRESETS:
        header = (CONFIGS / f"{name}.yaml").read_text().splitlines()[0]
        assert header.startswith("# run"), name
        assert f"configs/{name}.yaml" in header or name == "multi-node", header
    assert "scripts/slurm.sbatch" in (CONFIGS / "multi-node.yaml").read_text()


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.filterwarnings("ignore:.*GradScaler is enabled, but CUDA is not available")
def test_preset_builds_its_trainer_and_keeps_the_defaults(
    name: str,
    tmp_path: Path,
    default_types: tuple[list[type], type],
    restore_torch_flags: None,
    request: pytest.FixtureRequest,
) -> None:
    if name in NEEDS_GPU and not torch.cuda.is_available():
        request.getfixturevalue("mocked_gpus")
    cli = build(tmp_path, "--config", str(CONFIGS / f"{name}.yaml"))
    trainer = cli.trainer
    accelerator, strategy, precision, devices, nodes = EXPECTED[name]
    if name == "bf16-mixed" and torch.cuda.is_available():
        accelerator = CUDAAccelerator  # accelerator: auto takes the GPU when there is one
    if name in NEEDS_GPU and torch.cuda.is_available():
        devices = torch.cuda.device_count() if devices == MOCKED_GPUS else devices
    assert isinstance(trainer.accelerator, accelerator)
    assert type(trainer.strategy) is strategy
    assert trainer.precision == precision
    assert (trainer.num_devices, trainer.num_nodes) == (devices, nodes)
    # A preset adds to default.yaml; it never replaces its callbacks or logger.
    assert ([type(c) for c in trainer.callbacks], type(trainer.logger)) == default_types
    assert trainer.max_epochs == (40 if name == "debug" else 60)
    if name.startswith("ddp") or name == "multi-node":
        assert cli.config.trainer.use_distributed_sampler
        # SyncBatchNorm on GPUs; PyTorch's fails on CPU, so ddp-cpu leaves it off.
        assert cli.config.trainer.sync_batchnorm == (name != "ddp-cpu")
    if name == "16-mixed":
        assert isinstance(trainer.precision_plugin, MixedPrecision)
        assert trainer.precision_plugin.scaler is not None  # gradient scaling for fp16
    if name == "debug":
        assert trainer.overfit_batches == 2
        assert trainer._detect_anomaly
    if name == "reproducible":
        assert torch.are_deterministic_algorithms_enabled()
        assert cli.config.seed_everything == 42
    if name == "low-memory":
        assert trainer.accumulate_grad_batches == 4
        assert cli.model.model.activation_checkpointing


def test_presets_stack_in_order(tmp_path: Path, mocked_gpus: None) -> None:
    cli = build(
        tmp_path,
        "--config",
        str(CONFIGS / "ddp.yaml"),
        "--config",
        str(CONFIGS / "bf16-mixed.yaml"),
    )
    assert type(cli.trainer.strategy) is DDPStrategy
    assert cli.trainer.precision == "bf16-mixed"
    assert cli.trainer.num_devices == MOCKED_GPUS


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.parametrize("name", sorted(NEEDS_GPU))
def test_gpu_preset_without_a_gpu_stops_before_anything_is_built(name: str, tmp_path: Path) -> None:
    preset = CONFIGS / f"{name}.yaml"
    result = run_until_exit(tmp_path, "--config", str(preset))
    assert result.code == 2
    assert result.stderr.splitlines() == [
        f"error: {preset} needs a GPU (accelerator 'gpu'), none found: "
        "use configs/cpu.yaml or configs/ddp-cpu.yaml"
    ]
    assert list(tmp_path.iterdir()) == [], "no run directory, no logs, no checkpoints"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_gpu_flag_without_a_gpu_names_the_flag(tmp_path: Path) -> None:
    result = run_until_exit(tmp_path, "--trainer.accelerator", "gpu")
    assert result.code == 2
    assert result.stderr.startswith("error: --trainer.accelerator gpu needs a GPU")


def test_impossible_device_count_and_precisions_are_refused(mocked_gpus: None) -> None:
    with pytest.raises(HardwareError, match="asks for 8 GPUs, 4 found"):
        check_hardware("gpu", 8, "32-true", ["configs/ddp.yaml"])
    with (
        mock.patch("torch.cuda.is_bf16_supported", return_value=False),
        pytest.raises(HardwareError, match=r"bf16 .*use configs/16-mixed\.yaml"),
    ):
        check_hardware("gpu", 1, "bf16-mixed", ["configs/bf16-mixed.yaml"])
    check_hardware("gpu", -1, "16-mixed", ["configs/ddp.yaml"])  # all fine: no error


def test_fp16_on_the_cpu_is_refused_instead_of_silently_becoming_bf16() -> None:
    with pytest.raises(HardwareError, match="16-mixed needs a GPU"):
        check_hardware("cpu", 1, "16-mixed", ["--trainer.precision 16-mixed"])


# --- short real trainings with the CPU presets ------------------------------------------


class Observe(L.Callback):
    """Records what the training steps really ran with."""

    def __init__(self) -> None:
        self.logits_dtypes: set[torch.dtype] = set()
        self.anomaly_detection: set[bool] = set()
        self.deterministic: set[bool] = set()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, *_) -> None:
        self.anomaly_detection.add(torch.is_anomaly_enabled())
        self.deterministic.add(torch.are_deterministic_algorithms_enabled())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        with trainer.precision_plugin.forward_context():
            self.logits_dtypes.add(pl_module(batch[0][:2]).dtype)


def fit_preset(directory: Path, name: str, *args: str) -> tuple[L.Trainer, Observe]:
    directory.mkdir(parents=True, exist_ok=True)
    cli = build(directory, "--config", str(CONFIGS / f"{name}.yaml"), *args)
    observe = Observe()
    cli.trainer.callbacks.append(observe)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return cli.trainer, observe


@pytest.mark.slow
def test_cpu_preset_trains(tmp_path: Path) -> None:
    trainer, observe = fit_preset(tmp_path, "cpu", "--trainer.max_epochs", "2")
    assert trainer.current_epoch == 2
    assert observe.logits_dtypes == {torch.float32}
    assert trainer.callback_metrics["val/acc"] > 0.8


@pytest.mark.slow
def test_bf16_mixed_preset_trains_in_bfloat16_on_the_cpu(tmp_path: Path) -> None:
    # bf16 is slow on CPUs without bf16 instructions: a few batches prove the path.
    limits = ("--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2")
    limits += ("--trainer.log_every_n_steps", "1")
    trainer, observe = fit_preset(
        tmp_path, "bf16-mixed", "--trainer.accelerator", "cpu", "--trainer.max_epochs", "2", *limits
    )
    assert trainer.global_step == 8
    assert observe.logits_dtypes == {torch.bfloat16}
    assert torch.isfinite(trainer.callback_metrics["train/loss"])


@pytest.mark.slow
def test_debug_preset_overfits_its_batches_with_anomaly_detection(tmp_path: Path) -> None:
    # Validation and checkpoints once, at the end: the 40 training epochs are what is tested.
    trainer, observe = fit_preset(tmp_path, "debug", "--trainer.check_val_every_n_epoch", "40")
    assert observe.anomaly_detection == {True}
    assert trainer.num_training_batches == 2
    # The "does the loss go down" check a healthy model passes: 2 batches memorised.
    assert trainer.callback_metrics["train/loss"] < 0.05
    assert trainer.callback_metrics["train/acc"] == 1.0


@pytest.mark.slow
def test_reproducible_preset_reruns_bit_identically(
    tmp_path: Path, restore_torch_flags: None
) -> None:
    runs = [
        fit_preset(tmp_path / f"run{i}", "reproducible", "--trainer.max_epochs", "2")
        for i in (0, 1)
    ]
    assert all(observe.deterministic == {True} for _, observe in runs)
    first, second = (trainer.lightning_module.state_dict() for trainer, _ in runs)
    for key, value in first.items():
        assert torch.equal(value, second[key]), key


@pytest.mark.slow
def test_low_memory_preset_accumulates_and_recomputes(tmp_path: Path) -> None:
    trainer, _ = fit_preset(
        tmp_path,
        "low-memory",
        *("--trainer.max_epochs", "1", "--trainer.limit_train_batches", "8"),
        *("--trainer.log_every_n_steps", "1"),
    )
    assert trainer.global_step == 2  # 8 batches of 16, one optimizer step per 4
    assert trainer.lightning_module.model.activation_checkpointing
    assert torch.isfinite(trainer.callback_metrics["train/loss"])


# --- GPU presets: run where there is a GPU ----------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.slow
@needs_cuda
@pytest.mark.parametrize(
    ("name", "dtype"),
    [("gpu", torch.float32), ("16-mixed", torch.float16), ("bf16-mixed", torch.bfloat16)],
)
def test_gpu_preset_trains_on_the_gpu(tmp_path: Path, name: str, dtype: torch.dtype) -> None:
    if name == "bf16-mixed" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    trainer, observe = fit_preset(tmp_path, name, "--trainer.max_epochs", "2")
    assert trainer.strategy.root_device.type == "cuda"
    assert observe.logits_dtypes == {dtype}
    assert trainer.callback_metrics["val/acc"] > 0.8


@pytest.mark.slow
@needs_cuda
def test_ddp_preset_trains_on_every_gpu(tmp_path: Path) -> None:
    result = run_train(
        tmp_path,
        "--config",
        str(CONFIGS / "ddp.yaml"),
        "--trainer.max_epochs",
        "2",
        "--trainer.callbacks+=tests.probes.RankProbe",
        "--trainer.callbacks.out_dir",
        "probe",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    ranks = sorted((tmp_path / "probe").glob("rank-*.json"))
    assert len(ranks) == torch.cuda.device_count()
    backends = {json.loads(path.read_text())["backend"] for path in ranks}
    assert backends == {"nccl"}  # DDP initialises its process group even on one GPU
    assert len(list(tmp_path.glob("runs/**/summary.json"))) == 1
