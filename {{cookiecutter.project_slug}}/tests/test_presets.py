"""configs/*.yaml: every preset parses, keeps the defaults it does not mention, and builds the
Trainer it promises; GPU presets on a machine without a GPU stop at once with the fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import torch
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

from {{ cookiecutter.package_name }}.networks import CNN
from {{ cookiecutter.package_name }}.training.checkpoints import AtomicCheckpointIO
from {{ cookiecutter.package_name }}.training.hardware import HardwareError, check_hardware

from .conftest import CONFIGS, build, run_until_exit

# Trainer presets; sweep.yaml is sweep.py's search space, not a train.py config.
PRESETS = sorted(p.stem for p in CONFIGS.glob("*.yaml") if p.stem not in ("default", "sweep"))
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
    "cnn": (CPUAccelerator, SingleDeviceStrategy, "32-true", 1, 1),
}
NEEDS_GPU = {"gpu", "16-mixed", "ddp", "multi-node"}


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
        mock.patch("{{ cookiecutter.package_name }}.training.hardware.gpu_kind", return_value="cuda"),
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
@pytest.mark.slow
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
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
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
        assert cli.model.model.net.activation_checkpointing


@pytest.mark.slow
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
@pytest.mark.slow
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
@pytest.mark.slow
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


@pytest.fixture(scope="module")
def parser(tmp_path_factory: pytest.TempPathFactory):
    """train.py's parser (parsing only: a preset combination costs no model, data or Trainer)."""
    return build(tmp_path_factory.mktemp("parser"), "--trainer.logger", "false").parser


def parse(parser, *presets: str):
    return parser.parse_args([a for p in presets for a in ("--config", str(CONFIGS / f"{p}.yaml"))])


@pytest.mark.parametrize("name", sorted(set(PRESETS) - {"cnn"}))
@pytest.mark.slow
def test_the_cnn_preset_stacks_with_every_other_preset(parser, name: str) -> None:
    alone = parse(parser, name)
    for order in ([name, "cnn"], ["cnn", name]):
        config = parse(parser, *order)
        assert config.model.net.class_path.endswith(".CNN"), order
        assert config.trainer == alone.trainer, f"{order}: the other preset's Trainer holds"
        assert config.data == alone.data, order
        net_args = config.model.net.init_args
        if name == "low-memory":  # the preset's setting reaches the CNN in either order
            assert net_args.activation_checkpointing, order
        if name == "debug":
            assert net_args.dropout == 0.0, order


@pytest.mark.slow
def test_low_memory_and_cnn_build_a_cnn_that_recomputes(tmp_path: Path) -> None:
    presets = ("--config", str(CONFIGS / "low-memory.yaml"), "--config", str(CONFIGS / "cnn.yaml"))
    net = build(tmp_path, *presets, "--trainer.logger", "false").model.model.net
    assert type(net) is CNN and net.activation_checkpointing
