"""Process-level settings made once at start-up: CPU threads, our log lines, and known
third-party noise hidden."""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

import torch

log = logging.getLogger(__name__)


def available_cores() -> int:
    """Cores this process may run on (respects taskset/cgroup affinity, unlike cpu_count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def configure_threads() -> int:
    """Split the cores between the processes of this node, so that none oversubscribes: an
    explicit OMP_NUM_THREADS wins; under torchrun (LOCAL_WORLD_SIZE) each process gets its
    share. (Lightning's own DDP launcher sets cores // processes on every rank itself.)"""
    if "OMP_NUM_THREADS" in os.environ:
        threads = int(os.environ["OMP_NUM_THREADS"])
    else:
        threads = max(1, available_cores() // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    torch.set_num_threads(threads)
    return threads


def leave_process_group() -> None:
    """End this process's part in DDP after its last collective call: a rank that exits with
    the group still up can abort in gloo's teardown, and torchrun then fails the whole run."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def configure_logging() -> None:
    """Show this project's own messages (INFO and up) as `LEVEL name: message` on stderr."""
    package_logger = logging.getLogger(__name__.rsplit(".", 1)[0])
    package_logger.setLevel(logging.INFO)
    if not logging.getLogger().handlers and not package_logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        package_logger.addHandler(handler)


class DropMessages(logging.Filter):
    def __init__(self, *fragments: str) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(fragment in message for fragment in self.fragments)


def quiet_known_noise() -> None:
    """Hide third-party messages that say nothing actionable here, each filter scoped to one
    message we have checked, so that new warnings still show."""
    # lightning 2.6 + torch 2.13: Lightning's own pytree call is deprecated upstream.
    warnings.filterwarnings(
        "ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning
    )
    # In-memory tensors need no loader workers (data.datamodule): Lightning suggests more.
    warnings.filterwarnings("ignore", message=r".*does not have many workers", category=UserWarning)
    # Fewer batches an epoch than log_every_n_steps loses no log (epoch metrics per epoch).
    warnings.filterwarnings("ignore", message=r".*is smaller than the logging interval")
    # Lightning's cloud adverts, its note on our trainer.estimated_stepping_batches call (the
    # schedule), the "GPU/TPU available" lines (describe_run says what runs instead), and the
    # note that default.yaml's ModelSummary replaces Lightning's default one.
    noise = DropMessages(
        "💡 Tip:",
        "to estimate number of stepping batches",
        "GPU available: ",
        "TPU available: ",
        "Trainer already configured with model summary callbacks",
    )
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(noise)
{%- if cookiecutter.logger == "mlflow" %}
    # MLflow's first run in a store: it creates the database tables and the experiment.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    logging.getLogger("lightning.pytorch.loggers.mlflow").addFilter(
        DropMessages("not found. Creating it.")
    )
{%- endif %}


def describe_run(trainer: Any, module: Any, datamodule: Any) -> list[str]:
    """The first lines of every run (rank zero): what trains on what, where and how, and
    which task the targets made, from what."""
    network = module.model.net
    parameters = sum(p.numel() for p in network.parameters())
    data = datamodule.hparams.get("path") or "the built-in digits"
    device = type(trainer.accelerator).__name__.removesuffix("Accelerator").lower()
    processes, threads = trainer.world_size, torch.get_num_threads()
    where = f"{processes} processes" if processes > 1 else f"1 process x {threads} threads"
    sizes = "/".join(
        str(len(i)) for i in (datamodule.train_idx, datamodule.val_idx, datamodule.test_idx)
    )
    task, why = datamodule.task, datamodule.source.why
    count = datamodule.num_outputs
    noun = "classes" if task == "classification" else "targets" if count > 1 else "target"
    outputs = f"{count} {noun}"
    other = "regression" if task == "classification" else "classification"
    lines = [
        f"training {type(network).__name__} ({parameters:,} parameters) on {data}: {sizes} "
        f"train/val/test samples of shape {tuple(datamodule.input_shape)}, {outputs}; "
        f"{device}, {where}, precision {trainer.precision}",
        f"task: {task} ({why}); --data.task {other} to change it",
    ]
    if trainer.is_global_zero:
        for line in lines:
            log.info(line)
    return lines
