"""MLflow tracking (optional): a run's params and per-round metrics, logged to a file: URI."""

from __future__ import annotations

import pytest
from conftest import small_config

from reuse_ray.engine import RunHooks
from reuse_ray.runner import run_fl


def test_a_run_logs_params_and_metrics_by_round(tmp_path):
    # imported here, not at collection (~3.7 s in every pytest worker)
    pytest.importorskip("mlflow", reason="mlflow-skinny is part of the test extra")
    uri = (tmp_path / "mlruns").as_uri()
    cfg = small_config(tmp_path, fl__rounds=4, fl__eval_every=2)
    assert run_fl(cfg, hooks=RunHooks(mlflow=uri)).status == "finished"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("reuse_ray")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "fedavg-seed7"
    assert run.data.params["method.name"] == "fedavg" and run.data.params["run_id"] == cfg.run_id
    val = client.get_metric_history(run.info.run_id, "val_acc")
    assert sorted(m.step for m in val) == [1, 2, 4]  # evaluation rounds only
    up = client.get_metric_history(run.info.run_id, "cum_up_measured")
    assert sorted(m.step for m in up) == [1, 2, 3, 4]
    assert run.data.metrics["test_acc"] > 0
