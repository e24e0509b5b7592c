"""Checkpoints: written atomically, found (`--ckpt_path last`), checked and loaded
weights-only, with errors that name the fix."""

from __future__ import annotations

import logging
import os
import pickle
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import fsspec
import torch
from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, unreadable, or not one this run can use."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, writing local files beside their target and renaming
    them over it: a run killed mid-save leaves the previous checkpoint whole. (Lightning's
    own move is atomic only when TMPDIR is on the checkpoint's filesystem.)"""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or fsspec.utils.get_protocol(str(path)) != "file":
            return super().save_checkpoint(checkpoint, path, storage_options)  # s3://, ...
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            torch.save(checkpoint, temporary)
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)


class ResumableCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint whose best/last bookkeeping survives a resume: the resumed
    run is given the folder as an absolute path (continue_in_checkpoint_dir), the checkpoint
    recorded it as written (runs/...), and Lightning restores the state only when both
    strings are equal (else it warns "dirpath has changed" and forgets the best epoch)."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("dirpath")
        if saved and self.dirpath and os.path.realpath(saved) == os.path.realpath(self.dirpath):
            state_dict = {**state_dict, "dirpath": self.dirpath}
        super().load_state_dict(state_dict)


def run_dir(trainer: Any) -> Path:
    """The run's folder: the one that holds its checkpoints/, summary.json, plots, export/."""
    dirpath = getattr(trainer.checkpoint_callback, "dirpath", None)  # a ModelCheckpoint's
    return Path(dirpath).parent.resolve() if dirpath else Path(trainer.default_root_dir).resolve()


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load with weights_only=True: tensors and plain data only, no pickled code runs."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist: check the path.")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"checkpoint {path} holds objects that weights-only loading refuses (pickled "
            f"code; {str(error).splitlines()[0]}). Load only checkpoints you trust, and "
            "save hyper-parameters as plain values."
        ) from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile) as error:
        raise CheckpointError(
            f"checkpoint {path} is truncated or corrupt ({str(error).splitlines()[0]}), e.g. "
            "written by a run killed mid-save: resume from an earlier checkpoint or afresh."
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path} is not a Lightning checkpoint (no 'state_dict').")
    return checkpoint


def resolve_ckpt_path(value: str | None, root: Path) -> str | None:
    """``--ckpt_path``: None (a fresh start), 'last' (the newest last.ckpt under ``root``) or
    a path; checked readable before any training starts."""
    if value == "last":
        found = list(Path(root).glob("**/checkpoints/last.ckpt"))
        if not found:
            raise CheckpointError(
                f"--ckpt_path last: no checkpoints/last.ckpt under {root}/ yet: train once first."
            )
        value = str(max(found, key=lambda p: p.stat().st_mtime))
    if value is not None:
        read_checkpoint(value)
    return value


def check_resumable(ckpt_path: str, max_epochs: int | None) -> int:
    """Refuse a resume that cannot train: weights only, or max_epochs already reached.
    Returns the global step the checkpoint was saved at."""
    checkpoint = read_checkpoint(ckpt_path)
    completed = checkpoint.get("epochs_trained")  # written by LitModel.on_save_checkpoint
    if "optimizer_states" not in checkpoint or completed is None:
        raise CheckpointError(
            f"checkpoint {ckpt_path} holds weights only, not the training state: resume from "
            "a last.ckpt, or load its weights for a new run (checkpoints.load_weights)."
        )
    if max_epochs is not None and max_epochs != -1 and completed >= max_epochs:
        raise CheckpointError(
            f"checkpoint {ckpt_path} has already trained {completed} epochs and "
            f"trainer.max_epochs is {max_epochs}: nothing is left to train. Raise "
            f"--trainer.max_epochs above {completed} to train on."
        )
    return int(checkpoint.get("global_step", 0))


def check_same_model(ckpt_path: str, model: nn.Module) -> None:
    """Refuse a checkpoint of another network or data shape before training, naming the
    first tensor that differs (Lightning would fail inside fit, with a long traceback)."""
    saved = read_checkpoint(ckpt_path)["state_dict"]
    own = model.state_dict()
    for key in sorted(saved.keys() | own.keys()):
        if key not in saved or key not in own or saved[key].shape != own[key].shape:
            have = tuple(saved[key].shape) if key in saved else "absent"
            want = tuple(own[key].shape) if key in own else "absent"
            raise CheckpointError(
                f"checkpoint {ckpt_path} is of another network or data shape ({key}: "
                f"{have} in the checkpoint, {want} in this run): resume with the network "
                "and data it was trained with, or start afresh without --ckpt_path."
            )


def continue_in_checkpoint_dir(callbacks: list[Any], ckpt_path: Path) -> None:
    """Every checkpoint callback of the parsed config without its own ``dirpath`` writes
    into the resumed checkpoint's folder, so best/last tracking goes on in one place (the
    logger goes on in its run too: loggers.py). A checkpoint from elsewhere changes nothing."""
    if ckpt_path.parent.name != "checkpoints":
        return
    folder = os.path.realpath(ckpt_path.parent)
    for callback in callbacks:
        init_args = getattr(callback, "init_args", None)
        is_checkpoint = getattr(callback, "class_path", "").endswith("Checkpoint")
        if is_checkpoint and init_args is not None and init_args.get("dirpath") is None:
            init_args.dirpath = folder
    # Lightning warns that an explicit checkpoint folder is not empty: this one is meant to be.
    warnings.filterwarnings(
        "ignore", message=f"Checkpoint directory {re.escape(folder)} exists and is not empty"
    )


def load_weights(model: nn.Module, path: str | Path, prefix: str = "model.net.") -> nn.Module:
    """Transfer learning: copy the weights that fit from a checkpoint into ``model``, and log
    which were missing, unexpected or of another shape (a new head): no silent partial load.
    ``prefix`` strips the LightningModule's attributes to load into the plain network."""
    state = read_checkpoint(path)["state_dict"]
    if prefix:
        state = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
    own = model.state_dict()
    reshaped = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    state = {k: v for k, v in state.items() if k not in reshaped}
    result = model.load_state_dict(state, strict=False)
    log.info("loaded %d tensors from %s", len(state) - len(result.unexpected_keys), path)
    for problem, keys in (
        ("not in the checkpoint (left as initialised)", result.missing_keys),
        ("in the checkpoint but not in the model (ignored)", result.unexpected_keys),
        ("of another shape in the checkpoint (left as initialised)", reshaped),
    ):
        if keys:
            log.warning("%s: %s", problem, ", ".join(keys))
    return model
