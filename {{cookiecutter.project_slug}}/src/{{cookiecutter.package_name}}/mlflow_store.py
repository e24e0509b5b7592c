"""MLflow's side of a run: where its store lies, the command that shows it, and what a resumed
run takes back from it.

Lightning's MLFlowLogger does the logging; this module covers what it leaves out. mlflow is
imported inside the functions: it is installed only in a project that chose the MLflow logger.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SQLITE_PREFIX = "sqlite:///"
SERVER_PREFIXES = ("http://", "https://", "databricks")


def absolute_store_uri(uri: str | None, create: bool = True) -> str | None:
    """``sqlite:///runs/mlflow.db`` made absolute, its folder created (``create``).

    mlflow keeps one database engine per URI for the life of the process: with a relative
    path, a process that changes directory (a test, a notebook, a sweep) would go on writing
    to the first directory's file. SQLite also needs the folder to exist."""
    if uri is None or not uri.startswith(SQLITE_PREFIX):
        return uri
    path = uri.removeprefix(SQLITE_PREFIX)
    if path in ("", ":memory:"):
        return uri
    absolute = Path(path).resolve()
    if create:
        absolute.parent.mkdir(parents=True, exist_ok=True)
    return SQLITE_PREFIX + str(absolute)


def absolute_stores(logger: Any) -> None:
    """In the parsed ``trainer.logger`` config (one logger, a list or none), each MLflow
    logger's SQLite store made absolute (``absolute_store_uri``)."""
    for entry in logger if isinstance(logger, list) else [logger]:
        init_args = getattr(entry, "init_args", None)
        if init_args is not None and str(getattr(entry, "class_path", "")).endswith("MLFlowLogger"):
            init_args.tracking_uri = absolute_store_uri(init_args.get("tracking_uri"))


def how_to_view(tracking_uri: str, experiment_id: str | None, run_id: str | None) -> str:
    """The command that shows a local store's runs, or the run's page on a server."""
    if tracking_uri.startswith(SERVER_PREFIXES):
        return f"mlflow: {tracking_uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
    return f"mlflow ui --backend-store-uri {tracking_uri}"


def run_experiment(tracking_uri: str, run_id: str) -> str | None:
    """The experiment id of run ``run_id`` in the store, or None if the store has no such run."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = absolute_store_uri(tracking_uri, create=False)
    if uri and uri.startswith(SQLITE_PREFIX) and not Path(uri.removeprefix(SQLITE_PREFIX)).exists():
        return None  # (a client would create an empty store)
    try:
        client = MlflowClient(uri)
        return str(client.get_run(run_id).info.experiment_id)
    except MlflowException:
        return None


def continue_run(tracking_uri: str, run_id: str, step: int) -> None:
    """Make run ``run_id`` ready to go on from global step ``step``: drop the metric values the
    interrupted run logged from that step on (a checkpoint at step S holds what came before S,
    and the resumed run logs from S again), and mark the run running again."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(absolute_store_uri(tracking_uri))
    dropped = _drop_metric_steps(client, run_id, step)
    if dropped is None and _has_steps_from(client, run_id, step):
        log.warning(
            "the MLflow run %s keeps the values its interrupted training logged from step %d "
            "on (this tracking store cannot delete them): those steps show twice",
            run_id,
            step,
        )
    client.update_run(run_id, status="RUNNING")


def _drop_metric_steps(client: Any, run_id: str, step: int) -> int | None:
    """Delete run ``run_id``'s metric values at ``step`` and later, with mlflow's own database
    models; the number deleted, or None where the store is not a database (a server).

    No mlflow API deletes metric values, hence this. The latest value of each metric (what
    the runs table shows) is recomputed from the values that remain."""
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = client._tracking_client.store
    if not isinstance(store, SqlAlchemyStore):
        return None
    with store.ManagedSessionMaker(read_only=False) as session:
        later = session.query(SqlMetric).filter(
            SqlMetric.run_uuid == run_id, SqlMetric.step >= step
        )
        keys = {metric.key for metric in later}
        dropped = later.delete()
        stale = session.query(SqlLatestMetric).filter(
            SqlLatestMetric.run_uuid == run_id, SqlLatestMetric.key.in_(keys)
        )
        stale.delete()
        for key in sorted(keys):
            newest = (
                session.query(SqlMetric)
                .filter(SqlMetric.run_uuid == run_id, SqlMetric.key == key)
                .order_by(SqlMetric.step.desc(), SqlMetric.timestamp.desc(), SqlMetric.value.desc())
                .first()
            )
            if newest is not None:
                session.add(
                    SqlLatestMetric(
                        key=key,
                        value=newest.value,
                        timestamp=newest.timestamp,
                        step=newest.step,
                        is_nan=newest.is_nan,
                        run_uuid=run_id,
                    )
                )
    return int(dropped)


def _has_steps_from(client: Any, run_id: str, step: int) -> bool:
    keys = client.get_run(run_id).data.metrics
    return any(
        metric.step >= step for key in keys for metric in client.get_metric_history(run_id, key)
    )
