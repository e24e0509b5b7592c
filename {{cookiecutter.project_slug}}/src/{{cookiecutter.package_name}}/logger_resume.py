"""A resumed run (`--ckpt_path`) logs into the logger run of the training it continues: the
same TensorBoard or CSV version folder, the same W&B or MLflow run. Its curves go on in one run.

Lightning's loggers start a new version unless told which one, so a resume would split its
curves over two runs. Where the checkpoint lies in a logger's run folder (Lightning's layout,
<save_dir>/<name>/<version>/checkpoints/), that version is set on the logger before it is
built. What the interrupted run logged from its checkpoint's step on is dropped, so that no
step appears twice. (Lightning logs a batch's learning rate and step metrics at the global
step before it, and an epoch's metrics at its last batch's: a checkpoint at step S holds the
events before S, and the resumed run logs from S on.)
- TensorBoard: `purge_step` (TensorBoard then hides the older files' events from that step);
- CSV: Lightning's CSVLogger deletes an existing metrics.csv, so its rows up to the
  checkpoint's step are read first and put back (``restore_csv_rows``);
- W&B: the run id is the version folder's name; Lightning's WandbLogger resumes it
  (`resume="allow"`);
- MLflow: the run id is the version folder's name (<experiment id>/<run id>); the values
  logged from the checkpoint's step on are deleted from its store (``mlflow_store``).
A logger with its version set by hand, or a checkpoint from elsewhere, is left alone.
"""

from __future__ import annotations

import csv
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Lightning's own defaults, where the config leaves them out.
DEFAULT_NAME = "lightning_logs"


# Called with the Trainer's loggers once they are built, before anything is logged.
AfterBuild = Callable[[list[Any]], None]


def continue_logger_run(logger: Any, ckpt_path: Path, step: int) -> AfterBuild | None:
    """Point the parsed ``trainer.logger`` config at the run that wrote ``ckpt_path`` (saved
    at global step ``step``). Returns what to do once the loggers are built (None: nothing):
    called after the resume's last checks, so a refused resume changes no logs."""
    init_args = getattr(logger, "init_args", None)
    kind = str(getattr(logger, "class_path", "")).rsplit(".", 1)[-1]
    if init_args is None or ckpt_path.parent.name != "checkpoints":
        return None
    run_dir = ckpt_path.parent.parent
    save_dir = init_args.get("save_dir")
    if kind in ("TensorBoardLogger", "CSVLogger"):
        name = init_args.get("name") or DEFAULT_NAME
        if init_args.get("version") is not None or not _same(run_dir.parent, save_dir, name):
            return None
        init_args.version = run_dir.name
        if kind == "TensorBoardLogger":
            init_args.purge_step = step
            return None
        rows = _rows_before(run_dir / "metrics.csv", step)
        return lambda loggers: restore_csv_rows(loggers, rows)
    if kind == "WandbLogger":
        project = init_args.get("project") or DEFAULT_NAME
        ids = (init_args.get("id"), init_args.get("version"))
        if ids == (None, None) and _same(run_dir.parent, save_dir, project):
            init_args.id = run_dir.name
    if kind == "MLFlowLogger" and init_args.get("run_id") is None:
        return _continue_mlflow_run(init_args, run_dir, step)
    return None


def _continue_mlflow_run(init_args: Any, run_dir: Path, step: int) -> AfterBuild | None:
    """Lightning puts an MLflow run's checkpoints in <root>/<experiment id>/<run id>/."""
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    from . import mlflow_store

    tracking_uri, run_id = init_args.get("tracking_uri"), run_dir.name
    if not tracking_uri or mlflow_store.run_experiment(tracking_uri, run_id) != run_dir.parent.name:
        return None  # a checkpoint from elsewhere: a new run
    init_args.run_id = run_id

    def after_build(loggers: list[Any]) -> None:
        if getattr(rank_zero_only, "rank", 0) == 0:  # the one process that logs
            mlflow_store.continue_run(tracking_uri, run_id, step)

    return after_build


def _same(folder: Path, save_dir: str | None, name: str) -> bool:
    return save_dir is not None and folder.resolve() == (Path(save_dir) / name).resolve()


def _rows_before(path: Path, step: int) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as file:
        return [row for row in csv.DictReader(file) if _step(row) < step]


def _step(row: dict[str, str]) -> float:
    try:
        return float(row.get("step") or "inf")
    except ValueError:
        return float("inf")


def restore_csv_rows(loggers: list[Any], rows: list[dict[str, str]]) -> None:
    """Put the resumed run's earlier CSV rows back: Lightning's CSVLogger deleted its
    metrics.csv when it opened the folder; they are written again with the next rows."""
    from lightning.pytorch.loggers import CSVLogger

    for logger in loggers:
        if isinstance(logger, CSVLogger):
            folder = re.escape(str(logger.log_dir))
            with warnings.catch_warnings():  # "... will be deleted": these rows are kept
                warnings.filterwarnings("ignore", message=f"Experiment logs directory {folder}")
                writer = logger.experiment  # opens the folder (and deletes the old file)
            metrics = getattr(writer, "metrics", None)  # None on ranks but zero (a dummy)
            if isinstance(metrics, list):
                metrics[:0] = rows
