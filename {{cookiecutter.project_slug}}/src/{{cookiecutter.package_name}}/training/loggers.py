{%- set logger = cookiecutter.logger -%}
"""The experiment logger around Lightning's own: where its run lives, the command that shows
it, and a resumed run (`--ckpt_path`) continuing it.

Lightning's loggers start a new version unless told which one, so a resume would split its
curves over two runs. Where the checkpoint lies in the logger's layout
(<save_dir>/<name>/<version>/checkpoints/), the parsed config is pointed at that run.
{%- if logger == "tensorboard" %}
TensorBoard's `purge_step` then hides what the stopped run logged from the checkpoint's step.
{%- elif logger == "csv" %}
Lightning's CSVLogger deletes a version's metrics.csv when it opens the folder: its rows from
before the checkpoint's step are read first and logged again through the logger.
{%- elif logger == "wandb" %}
The W&B run id is the version folder's name, and Lightning's WandbLogger resumes that run.
{%- elif logger == "mlflow" %}
The MLflow run id is the version folder's name (<experiment id>/<run id>); the resumed run
logs from the checkpoint's step again, and MLflow keeps both values of those steps.
{%- endif %}
"""

from __future__ import annotations
{% if logger == "csv" %}
import csv
import re
import warnings
{%- elif logger == "wandb" %}
import logging
import os
import threading
import urllib.error
import urllib.request
{%- endif %}
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
{%- if logger == "tensorboard" %}
from lightning.pytorch.loggers import Logger, TensorBoardLogger
{%- elif logger == "csv" %}
from lightning.pytorch.loggers import CSVLogger, Logger
{%- elif logger == "wandb" %}
from lightning.pytorch.loggers import Logger, WandbLogger

log = logging.getLogger(__name__)
{%- elif logger == "mlflow" %}
from lightning.pytorch.loggers import Logger, MLFlowLogger

SQLITE = "sqlite:///"
SERVERS = ("http://", "https://", "databricks")
{%- endif %}

# Called with the Trainer's loggers once they are built, before anything is logged.
AfterBuild = Callable[[list[Logger]], None]


def log_dir(trainer: L.Trainer) -> str | None:
    """The first logger's folder (for MLflow its store). Not trainer.log_dir: under DDP
    that is a collective call, and this runs on rank zero."""
    if not trainer.loggers:
        return None
    logger = trainer.loggers[0]
{%- if logger == "mlflow" %}
    if isinstance(logger, MLFlowLogger):
        client: Any = logger.experiment  # mlflow's MlflowClient
        return str(client.tracking_uri).removeprefix(SQLITE)
{%- endif %}
    folder = getattr(logger, "log_dir", None) or logger.save_dir
    return str(Path(folder).resolve()) if folder else None


def how_to_view_logs(trainer: L.Trainer) -> list[str]:
    """For each logger, the command (or file) that shows this run's curves."""
    hints = []
    for logger in trainer.loggers:
{%- if logger == "tensorboard" %}
        if isinstance(logger, TensorBoardLogger):
            hints.append(f"tensorboard --logdir {Path(logger.root_dir).resolve()}")
{%- elif logger == "csv" %}
        if isinstance(logger, CSVLogger):
            hints.append(f"metrics per epoch: {Path(logger.log_dir).resolve() / 'metrics.csv'}")
{%- elif logger == "wandb" %}
        if isinstance(logger, WandbLogger):
            run = logger.experiment
            # Offline, each process that logged to the run (a resumed run: several) has a
            # folder named after the run id; `wandb sync` uploads them into the one run.
            offline = Path(run.sync_dir).resolve().parent / f"offline-run-*-{run.id}"
            hints.append(f"wandb sync {offline}" if run.offline else f"wandb: {run.url}")
{%- elif logger == "mlflow" %}
        if isinstance(logger, MLFlowLogger):
            client: Any = logger.experiment  # mlflow's MlflowClient
            uri = client.tracking_uri
            if uri.startswith(SERVERS):
                page = f"#/experiments/{logger.experiment_id}/runs/{logger.run_id}"
                hints.append(f"mlflow: {uri.rstrip('/')}/{page}")
            else:
                hints.append(f"mlflow ui --backend-store-uri {uri}")
{%- endif %}
    return hints


def continue_logger_run(logger: Any, ckpt_path: Path, step: int) -> AfterBuild | None:
    """Point the parsed ``trainer.logger`` config at the run that wrote ``ckpt_path`` (saved
    at global step ``step``); returns what to do once the loggers are built, if anything.
    A logger with its version set by hand, or a checkpoint from elsewhere, is left alone."""
    init_args = getattr(logger, "init_args", None)
    if init_args is None or ckpt_path.parent.name != "checkpoints":
        return None
    run_dir = ckpt_path.parent.parent
{%- if logger != "mlflow" %}
    save_dir = init_args.get("save_dir")
{%- endif %}
{%- if logger in ("tensorboard", "csv") %}
    name = init_args.get("name") or "lightning_logs"
    same = save_dir is not None and run_dir.parent.resolve() == (Path(save_dir) / name).resolve()
    if init_args.get("version") is not None or not same:
        return None
    init_args.version = run_dir.name
{%- endif %}
{%- if logger == "tensorboard" %}
    init_args.purge_step = step
    return None
{%- elif logger == "csv" %}
    rows = rows_before(run_dir / "metrics.csv", step)
    return lambda loggers: log_again(loggers, rows)
{%- elif logger == "wandb" %}
    project = init_args.get("project") or "lightning_logs"
    same = save_dir is not None and run_dir.parent.resolve() == (Path(save_dir) / project).resolve()
    if same and init_args.get("id") is None and init_args.get("version") is None:
        init_args.id = run_dir.name
    return None
{%- elif logger == "mlflow" %}
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri, run_id = absolute(init_args.get("tracking_uri")), run_dir.name
    if not uri or init_args.get("run_id") is not None:
        return None
    if uri.startswith(SQLITE) and not Path(uri.removeprefix(SQLITE)).exists():
        return None  # (a client would create an empty store)
    try:
        experiment = MlflowClient(uri).get_run(run_id).info.experiment_id
    except MlflowException:
        return None  # no such run in this store: a checkpoint from elsewhere
    if str(experiment) == run_dir.parent.name:
        init_args.run_id = run_id
    return None
{%- endif %}
{%- if logger == "csv" %}


def rows_before(path: Path, step: int) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as file:
        return [row for row in csv.DictReader(file) if float(row.get("step") or "inf") < step]


def log_again(loggers: list[Logger], rows: list[dict[str, str]]) -> None:
    """Log the stopped run's rows again, through the logger, after it deleted its file."""
    for logger in loggers:
        if not isinstance(logger, CSVLogger):
            continue
        folder = re.escape(str(logger.log_dir))
        with warnings.catch_warnings():  # "... will be deleted": these rows are logged again
            warnings.filterwarnings("ignore", message=f"Experiment logs directory {folder}")
            logger.experiment  # noqa: B018  (opening the folder deletes the old file)
        for row in rows:
            values: dict[str, Any] = {k: float(v) for k, v in row.items() if v and k != "step"}
            logger.log_metrics(values, step=int(float(row["step"])))
{%- endif %}


def prepare_logger_config(logger: Any) -> None:
    """Settings made on the parsed ``trainer.logger``, before the logger is built."""
{%- if logger == "mlflow" %}
    # mlflow keeps one database engine per URI for the process's life: a relative SQLite path
    # would follow a process that changes directory (a test, a notebook). SQLite also needs
    # the folder to exist.
    for entry in logger if isinstance(logger, list) else [logger]:
        init_args = getattr(entry, "init_args", None)
        uri = absolute(init_args.get("tracking_uri")) if init_args is not None else None
        if init_args is not None and uri and uri != init_args.get("tracking_uri"):
            Path(uri.removeprefix(SQLITE)).parent.mkdir(parents=True, exist_ok=True)
            init_args.tracking_uri = uri
            create_store(uri)


def absolute(uri: str | None) -> str | None:
    """A local SQLite store's URI with an absolute path (other URIs as they are)."""
    if not uri or not uri.startswith(SQLITE) or uri.removeprefix(SQLITE) in ("", ":memory:"):
        return uri
    return SQLITE + str(Path(uri.removeprefix(SQLITE)).resolve())


def create_store(uri: str, attempts: int = 5) -> None:
    """Create a new SQLite store's tables before the logger opens it. Processes started
    together on a new store each create them, and all but the first fail inside mlflow's
    migration (alembic): it does not handle the race, so the losers open it again."""
    import time

    from mlflow.tracking import MlflowClient

    for attempt in range(attempts):
        try:
            MlflowClient(uri).search_experiments(max_results=1)
            return
        except Exception:  # mlflow's and SQLAlchemy's errors of a lost race vary
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
{%- elif logger == "wandb" %}
    online = [
        entry
        for entry in (logger if isinstance(logger, list) else [logger])
        if str(getattr(entry, "class_path", "")).endswith("WandbLogger")
        and not entry.init_args.get("offline")
    ]
    if online:
        keep_wandb_offline_safe()
{%- else %}
    return None  # the {{ logger }} logger needs none
{%- endif %}


def end_logger_run(loggers: list[Logger]) -> None:
    """End the logger's run of a finished training: a caller that trains again in the same
    process (a test, a notebook, a sweep) would otherwise log into this one."""
{%- if logger == "wandb" %}
    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        wandb.finish()
{%- else %}
    return None  # the {{ logger }} logger ends its run itself
{%- endif %}
{%- if logger == "wandb" %}


def keep_wandb_offline_safe(timeout_s: float = 2.0) -> str | None:
    """An online W&B run without a key, or without an answer from its server within
    ``timeout_s``, goes offline (WANDB_MODE, which wandb.init reads) instead of prompting or
    blocking for minutes; the end-of-run lines then print `wandb sync`. Returns the reason."""
    import netrc
    from urllib.parse import urlparse

    if os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):
        return None
    url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    try:
        has_netrc = netrc.netrc().authenticators(urlparse(url).hostname or "") is not None
    except (OSError, netrc.NetrcParseError):
        has_netrc = False
    reason = None
    if not (os.environ.get("WANDB_API_KEY") or has_netrc):
        reason = "no wandb API key (run `wandb login` or set WANDB_API_KEY)"
    elif not reachable(url, timeout_s):
        reason = f"{url} is unreachable within {timeout_s:g} s"
    if reason:
        os.environ["WANDB_MODE"] = "offline"
        log.info("wandb logs offline: %s; upload later with `wandb sync`.", reason)
    return reason


def reachable(url: str, timeout_s: float) -> bool:
    """Any HTTP answer within ``timeout_s`` (not a bare connect: proxies accept every
    connection). A thread bounds the whole probe, name resolution included."""
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
{%- endif %}
