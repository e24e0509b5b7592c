"""Process-level settings made once at start-up: CPU threads and known third-party noise."""

from __future__ import annotations

import gc
import logging
import netrc
import os
import threading
import urllib.error
import urllib.request
import warnings
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

import torch

log = logging.getLogger(__name__)


def freeze_imports() -> None:
    """Put every object alive now out of the garbage collector's sight, for good. Called by
    each script before its main(), these are the modules' objects (millions, with torch and
    Lightning), which live until the process ends anyway. Every full collection of the run,
    and the last one at exit, then scans only the run's own objects: a process that imports
    Lightning ends 0.9 s sooner (BENCHMARKS.md of the template, issue 17). Cycles made
    later are collected as before. Not for main() called in a running process (a notebook,
    the tests): a frozen object of an earlier run would never be freed."""
    gc.freeze()


def available_cores() -> int:
    """Cores this process may run on (respects taskset/cgroup affinity, unlike cpu_count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def configure_threads() -> int:
    """Split the cores between the processes on this node, so none oversubscribes.

    A single process gets every core; under torchrun (which sets ``LOCAL_WORLD_SIZE``) each
    gets its share. An explicit ``OMP_NUM_THREADS`` always wins; torchrun sets it to 1
    unless you do. Lightning's own DDP launcher starts rank 0 before the others exist and
    sets no ``LOCAL_WORLD_SIZE``, but it sets cores // processes on every rank itself when
    fit starts (tests/test_distributed.py checks both launchers).
    """
    if "OMP_NUM_THREADS" in os.environ:
        threads = int(os.environ["OMP_NUM_THREADS"])
    else:
        local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        threads = max(1, available_cores() // local_processes)
    torch.set_num_threads(threads)
    return threads


def leave_process_group() -> None:
    """End this process's part in DDP cleanly, after its last collective call.

    A rank that exits with the process group still up can abort in gloo's teardown
    ("terminate called without an active exception"); torchrun then kills the other ranks
    and reports the whole run as failed, although it finished.
    """
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        distributed.destroy_process_group()


def configure_logging() -> None:
    """Show this project's own messages (INFO and up) as `LEVEL name: message` on stderr."""
    package_logger = logging.getLogger(__name__.rsplit(".", 1)[0])
    package_logger.setLevel(logging.INFO)
    if not logging.getLogger().handlers and not package_logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        package_logger.addHandler(handler)


class _DropMessages(logging.Filter):
    def __init__(self, *fragments: str) -> None:
        super().__init__()
        self.fragments = fragments

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(fragment in message for fragment in self.fragments)


def quiet_known_noise() -> None:
    """Hide third-party messages that say nothing actionable about this project.

    Each filter is scoped to one message we have checked, so new warnings still show.
    """
    # lightning 2.6 + torch 2.13: Lightning's own pytree call is deprecated upstream.
    warnings.filterwarnings(
        "ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning
    )
    # Lightning suggests more loader workers on machines with over 2 cores; the default data
    # are in-memory tensors, for which workers are slower (see data.default_num_workers).
    warnings.filterwarnings("ignore", message=r".*does not have many workers", category=UserWarning)
    # A small dataset (fewer batches an epoch than log_every_n_steps) loses no logs: Lightning
    # counts the logging interval over all steps, not per epoch, and the epoch metrics are
    # logged per epoch.
    warnings.filterwarnings("ignore", message=r".*is smaller than the logging interval")
    # Adverts for Lightning's cloud services, printed by every Trainer() through rank_zero_info,
    # a note on our own call to trainer.estimated_stepping_batches (the LR schedule), the
    # rote "GPU/TPU available" lines (describe_run says what runs instead), and the note that
    # our NetworkSummary replaces Lightning's default summary.
    noise = _DropMessages(
        "💡 Tip:",
        "to estimate number of stepping batches",
        "GPU available: ",
        "TPU available: ",
        "Trainer already configured with model summary callbacks",
    )
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(noise)
    # MLflow's first run in a store: it creates the database tables and the experiment.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    logging.getLogger("lightning.pytorch.loggers.mlflow").addFilter(
        _DropMessages("not found. Creating it.")
    )


def end_wandb_run(loggers: Sequence[Any]) -> None:
    """End the W&B run of a finished training. A process exits and ends it anyway; a caller
    that trains again in the same process (a test, a notebook) would otherwise log the next
    run into this one (Lightning's WandbLogger reuses a run in progress)."""
    if any(type(logger).__name__ == "WandbLogger" for logger in loggers):
        import wandb

        wandb.finish()


def keep_wandb_offline_safe(loggers: Sequence[Any], timeout_s: float = 2.0) -> str | None:
    """Make an online wandb logger fall back to offline instead of prompting or hanging.

    wandb 0.31 asks for a key on a terminal when it has none, and with a key but no network
    blocks ~106 s before failing (measured). Both are checked here first, in at most
    ``timeout_s``; on failure WANDB_MODE=offline (read by wandb.init) keeps the run going
    and the end-of-run lines print the `wandb sync` command. Returns the reason, if any.
    """
    online = [
        logger
        for logger in loggers
        # Lightning keeps the `offline=` argument only in a private attribute.
        if type(logger).__name__ == "WandbLogger" and not getattr(logger, "_offline", False)
    ]
    if not online or os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):
        return None
    url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    reason = None
    if not (os.environ.get("WANDB_API_KEY") or _netrc_has(urlparse(url).hostname or "")):
        reason = "no wandb API key (run `wandb login` or set WANDB_API_KEY)"
    elif not _reachable(url, timeout_s):
        reason = f"{url} is unreachable within {timeout_s:g} s"
    if reason:
        os.environ["WANDB_MODE"] = "offline"
        log.info("wandb logs offline: %s; upload later with `wandb sync`.", reason)
    return reason


def _netrc_has(host: str) -> bool:
    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _reachable(url: str, timeout_s: float) -> bool:
    """Any HTTP answer from ``url`` within ``timeout_s``. An HTTP request, not a bare TCP
    connect: proxies accept connections to any address and then never answer. A thread
    bounds the whole probe (the socket timeout does not cover name resolution)."""
    answered: list[bool] = []

    def probe() -> None:
        try:
            urllib.request.urlopen(url, timeout=timeout_s).close()
            answered.append(True)
        except urllib.error.HTTPError:  # 401, 404...: the server is there
            answered.append(True)
        except (OSError, ValueError):  # DNS, refused, TLS, timed out, malformed URL
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(answered)


def describe_run(trainer: Any, module: Any, datamodule: Any) -> str:
    """One line, first of every run (rank zero): what trains on what, where and how."""
    network = getattr(getattr(module, "model", None), "net", module)
    parameters = sum(p.numel() for p in network.parameters())
    data = datamodule.hparams.get("path") or "the built-in digits"
    device = type(trainer.accelerator).__name__.removesuffix("Accelerator").lower()
    processes = trainer.world_size
    where = (
        f"{processes} processes"
        if processes > 1
        else f"1 process x {torch.get_num_threads()} threads"
    )
    sizes = "/".join(
        str(len(i)) for i in (datamodule.train_idx, datamodule.val_idx, datamodule.test_idx)
    )
    line = (
        f"training {type(network).__name__} ({parameters:,} parameters) on {data}: {sizes} "
        f"train/val/test samples of shape {tuple(datamodule.input_shape)}, "
        f"{datamodule.num_classes} classes; {device}, {where}, precision {trainer.precision}"
    )
    if trainer.is_global_zero:
        log.info(line)
    return line
