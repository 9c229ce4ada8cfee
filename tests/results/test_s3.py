"""Results on a real S3 API with no network: moto's server on 127.0.0.1, started here.

A quickstart sweep writes its Parquet tables, trials table, Tune experiment state and report to
``s3://bucket/qs``; pandas reads them back through pyarrow's S3FileSystem; ``reuse-ray report``
reads from the bucket; ``--resume`` restores the sweep from the bucket.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest
import ray
from conftest import free_port, init_ray_for_sweeps

from reuse_ray.results import read_table
from reuse_ray.tuning import load_spec, run_sweep

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMALL = [
    "base.fl.rounds=2",
    "base.fl.eval_every=1",
    "base.fl.num_clients=10",
    "base.fl.clients_per_round=3",
    "base.train.epochs=1",
    "base.model.hidden=16",
    "search.num_samples=2",
    "final.seeds=[1001]",
    "checkpoint_every=1",
]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(endpoint host:port) of a moto S3 server with an empty bucket ``bucket``; AWS variables
    set for this process and the Ray workers it starts."""
    exe = shutil.which("moto_server")
    if exe is None:
        pytest.fail(
            "moto's server is missing: it comes with the test extra (pip install -e '.[test]')"
        )
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"moto server did not start: {log.read_text()[-2000:]}")
                time.sleep(0.2)
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{port}", scheme="http", allow_bucket_creation=True
        )
        fs.create_dir("bucket")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module", autouse=True)
def ray_runtime(s3):
    init_ray_for_sweeps()
    yield
    ray.shutdown()


def _fs(endpoint):
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(endpoint_override=endpoint, scheme="http")


def test_a_quickstart_sweep_round_trips_through_s3(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"s3://bucket/qs?endpoint_override={s3}&scheme=http"
    spec = load_spec(
        "/".join([os.path.dirname(__file__), "../../sweeps/quickstart.yaml"]),
        [*SMALL, f"results_dir={uri}"],
    )
    assert spec.results_dir == uri and not spec.dated
    said: list[str] = []
    out = run_sweep(spec, say=said.append)
    assert out.final_runs is not None and len(out.final_runs) == 2
    assert said[0] == f"results root: {uri}" and said[-1] == f"results root: {uri}"
    assert list(tmp_path.iterdir()) == []  # nothing written where the sweep was started

    # pandas reads the tables back through pyarrow's S3FileSystem
    fs = _fs(s3)
    runs = pd.read_parquet("bucket/qs/runs", filesystem=fs)
    rounds = pd.read_parquet("bucket/qs/rounds", filesystem=fs)
    trials = pd.read_parquet("bucket/qs/trials", filesystem=fs)
    assert len(runs) == 4 and set(runs["stage"]) == {"search", "final"}  # 2 trials + 2 final
    assert (runs["status"] == "finished").all()
    assert (runs.loc[runs["stage"] == "search", "test_reads"] == 0).all()
    assert len(rounds) == 4 * 2 and len(trials) == 2
    names = [i.path for i in fs.get_file_info(_selector("bucket/qs"))]
    hidden = [n for n in names if n.rsplit("/", 1)[-1].startswith(".") and "/_tune/" not in n]
    assert hidden == []  # no attempt left
    assert any("/_tune/quickstart-search/" in n for n in names)  # Tune state in the bucket
    assert any(n.endswith("report/report.html") for n in names)
    assert read_table(uri, "runs")["run_id"].is_unique

    # reuse-ray report reads from the bucket and writes its report there
    fs.delete_dir("bucket/qs/report")
    cli = subprocess.run(
        [sys.executable, "-m", "reuse_ray", "report", uri],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr
    assert "report: s3://bucket/qs/report/report.html" in cli.stdout
    html = fs.open_input_stream("bucket/qs/report/report.html").read().decode()
    assert "Fixed-budget comparison" in html

    # --resume restores both stages from the bucket: nothing is rerun, no row duplicated
    before = read_table(uri, "rounds").drop(columns=["round_wall_s"])
    again = run_sweep(spec, resume=True, say=said.append)
    assert len(again.trials) == 2
    after = read_table(uri, "rounds").drop(columns=["round_wall_s"])
    key = ["run_id", "round"]
    assert (
        after.sort_values(key)
        .reset_index(drop=True)
        .equals(before.sort_values(key).reset_index(drop=True))
    )
    assert read_table(uri, "runs")["run_id"].is_unique


def test_aws_endpoint_url_reaches_the_same_bucket(s3, tmp_path, monkeypatch):
    from conftest import small_config

    from reuse_ray.runner import run_fl

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{s3}")
    cfg = small_config(tmp_path, fl__rounds=1).replace(results_dir="s3://bucket/plain")
    assert run_fl(cfg).status == "finished"
    rounds = pd.read_parquet("bucket/plain/rounds", filesystem=_fs(s3))
    assert len(rounds) == 1


def test_unwritable_bucket_is_one_line(s3, tmp_path):
    from conftest import small_config

    from reuse_ray.errors import UserError
    from reuse_ray.runner import run_fl

    cfg = small_config(tmp_path, fl__rounds=1).replace(
        results_dir=f"s3://no-such-bucket/x?endpoint_override={s3}&scheme=http"
    )
    with pytest.raises(UserError, match="results_dir: cannot write to 's3://no-such-bucket"):
        run_fl(cfg)


def _selector(path):
    import pyarrow.fs as pafs

    return pafs.FileSelector(path, recursive=True)
