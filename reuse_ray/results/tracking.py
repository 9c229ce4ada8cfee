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

ROUND_METRICS = ("train_loss", "cum_up_restricted", "cum_up_measured", "cum_down_measured",
                 "cum_saving_restricted", "num_fresh", "num_reused", "round_wall_s")  # fmt: skip


class MlflowRun:
    """One FL run's MLflow run; ``close`` marks it finished or failed."""

    def __init__(self, uri: str, experiment: str, run_name: str, params: dict[str, Any]):
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise UserError(
                "--mlflow needs the MLflow client — pip install mlflow-skinny"
            ) from None
        if uri.startswith("file:") or "://" not in uri:
            # a local folder is what the user asked for; recent MLflow wants the opt-in
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
        self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
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
        metrics = [Metric(k, float(v), now, last_round) for k, v in final.items()
                   if v is not None]  # fmt: skip
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)
        self.client.set_terminated(self.run_id, "FINISHED" if status == "finished" else "FAILED")
