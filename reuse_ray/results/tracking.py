"""Optional MLflow tracking (``--mlflow URI``): a run's parameters and its per-round metrics,
with the FL round as the step, through the MLflow client (``pip install mlflow-skinny``).

One MLflow run per FL run, in the experiment named after the sweep (``reuse_ray`` for single
runs), named like its TensorBoard folder. Validation metrics are logged on evaluation rounds
only. A local ``file:`` URI needs no server.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..errors import UserError

ROUND_METRICS = (
    "train_loss",
    "cum_up_restricted",
    "cum_up_measured",
    "cum_down_measured",
    "cum_saving_restricted",
    "num_fresh",
    "num_reused",
    "round_wall_s",
)


# the tracking stores MLflow opens (a database URI may name its driver: postgresql+psycopg2)
TRACKING_SCHEMES = ("file", "http", "https", "databricks", "sqlite", "postgresql", "mysql", "mssql")


class MlflowRun:
    """One FL run's MLflow run; ``close`` marks it finished or failed."""

    def __init__(self, uri: str, experiment: str, run_name: str, params: dict[str, Any]):
        client_class = _client_class(uri)
        from mlflow.entities import Param

        try:
            self.client = client_class(tracking_uri=uri)
            exp = self.client.get_experiment_by_name(experiment)
            exp_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
            self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
        except Exception as err:  # noqa: BLE001 - MLflow raises its own, OSError, KeyError…
            raise _tracking_error(uri, err) from None
        items = [Param(k, str(v)[:500]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params a batch
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def log_round(self, t: int, row: dict[str, Any], val) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        values = {k: row[k] for k in ROUND_METRICS if row.get(k) is not None}
        if val is not None:
            values.update(val_acc=val[0], val_loss=val[1])
        metrics = [Metric(k, float(v), now, t) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self, status: str, last_round: int, final: dict[str, Any]) -> None:
        """The run's end: its final metrics at the last round, and its status."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, last_round) for k, v in final.items() if v is not None]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)
        self.client.set_terminated(self.run_id, "FINISHED" if status == "finished" else "FAILED")


def _tracking_error(uri: str, err: BaseException) -> UserError:
    if isinstance(err, KeyError):  # MLflow's registry: an unknown URI scheme
        why = f"unknown scheme {err.args[0]!r}" if err.args else "unknown scheme"
    else:
        text = str(err).strip().splitlines()
        why = text[0][:200] if text else type(err).__name__
    return UserError(
        f"--mlflow {uri}: cannot track there ({why}) — allowed: a folder or file: "
        f"URI, sqlite:///FILE, or http(s)://HOST:PORT of a running MLflow server"
    )


def _client_class(uri: str):
    """MLflow's client class (one line when MLflow is missing); a local folder is what the user
    asked for, and recent MLflow wants the opt-in for it."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise UserError("--mlflow needs the MLflow client — pip install mlflow-skinny") from None
    if uri.startswith("file:") or "://" not in uri:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient


def check_tracking_uri(uri: str) -> None:
    """Fail before any work when ``uri`` is not a tracking store MLflow can open (one read,
    nothing created), with a server's retries cut short: a bad address is one line within
    seconds, not after MLflow's back-off."""
    client_class = _client_class(uri)
    scheme = uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else ""
    if scheme and scheme not in TRACKING_SCHEMES:
        raise _tracking_error(uri, KeyError(scheme))
    keys = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    before = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: v for k, v in keys.items() if before[k] is None})
    try:
        client_class(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as err:  # noqa: BLE001 - MLflow raises its own, OSError, KeyError…
        raise _tracking_error(uri, err) from None
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
