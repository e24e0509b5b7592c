"""Short real trainings with the presets: CPU ones everywhere, GPU ones where CUDA exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from .conftest import CONFIGS, build
from .subprocesses import run_train

pytestmark = pytest.mark.slow


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
        model = pl_module.model  # the network's own output (the prior bias is added in fp32)
        with trainer.precision_plugin.forward_context():
            self.logits_dtypes.add(model.net(model.standardize(batch[0][:2])).dtype)


def fit_preset(directory: Path, name: str, *args: str) -> tuple[L.Trainer, Observe]:
    directory.mkdir(parents=True, exist_ok=True)
    cli = build(directory, "--config", str(CONFIGS / f"{name}.yaml"), *args)
    observe = Observe()
    cli.trainer.callbacks.append(observe)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return cli.trainer, observe


def test_cpu_preset_trains(tmp_path: Path) -> None:
    trainer, observe = fit_preset(tmp_path, "cpu", "--trainer.max_epochs", "2")
    assert trainer.current_epoch == 2
    assert observe.logits_dtypes == {torch.float32}
    assert trainer.callback_metrics["val/acc"] > 0.8


def test_bf16_mixed_preset_trains_in_bfloat16_on_the_cpu(tmp_path: Path) -> None:
    # bf16 is slow on CPUs without bf16 instructions: a few batches prove the path.
    limits: tuple[str, ...] = ("--trainer.limit_train_batches", "4")
    limits = (*limits, "--trainer.limit_val_batches", "2")
    limits = (*limits, "--trainer.log_every_n_steps", "1")
    trainer, observe = fit_preset(
        tmp_path, "bf16-mixed", "--trainer.accelerator", "cpu", "--trainer.max_epochs", "2", *limits
    )
    assert trainer.global_step == 8
    assert observe.logits_dtypes == {torch.bfloat16}
    assert torch.isfinite(trainer.callback_metrics["train/loss"])


def test_debug_preset_overfits_its_batches_with_anomaly_detection(tmp_path: Path) -> None:
    # Validation and checkpoints once, at the end: the 40 training epochs are what is tested.
    trainer, observe = fit_preset(tmp_path, "debug", "--trainer.check_val_every_n_epoch", "40")
    assert observe.anomaly_detection == {True}
    assert trainer.num_training_batches == 2
    # The "does the loss go down" check a healthy model passes: 2 batches memorised.
    assert trainer.callback_metrics["train/loss"] < 0.05
    assert trainer.callback_metrics["train/acc"] == 1.0


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


def test_low_memory_preset_accumulates_and_recomputes(tmp_path: Path) -> None:
    trainer, _ = fit_preset(
        tmp_path,
        "low-memory",
        *("--trainer.max_epochs", "1", "--trainer.limit_train_batches", "8"),
        *("--trainer.log_every_n_steps", "1"),
    )
    assert trainer.global_step == 2  # 8 batches of 16, one optimizer step per 4
    module: Any = trainer.lightning_module
    assert module.model.net.activation_checkpointing
    assert torch.isfinite(trainer.callback_metrics["train/loss"])


# --- GPU presets ------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


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
