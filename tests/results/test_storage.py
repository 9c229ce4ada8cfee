"""Results locations: the default root, URIs, and write-once files where nothing renames."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import crash_at, small_config

from reuse_ray.results import ResultsError, read_table
from reuse_ray.results.reader import read_table_if_any
from reuse_ray.results.storage import (
    Storage,
    anchored,
    dated_folder,
    default_root,
    join,
    latest_dated,
)
from reuse_ray.runner import run_fl


def test_join_keeps_a_uri_query_at_the_end():
    uri = "s3://bucket/qs?endpoint_override=127.0.0.1:9000&scheme=http"
    assert join(uri, "runs", "x.parquet") == (
        "s3://bucket/qs/runs/x.parquet?endpoint_override=127.0.0.1:9000&scheme=http"
    )
    assert join("/a/b", "c") == "/a/b/c"


def test_relative_locations_are_anchored_at_the_results_root(tmp_path, monkeypatch):
    monkeypatch.setenv("REUSE_RAY_RESULTS", str(tmp_path / "root"))
    assert default_root() == str(tmp_path / "root")
    assert anchored("sweeps/qs") == (str(tmp_path / "root" / "sweeps" / "qs"), True)
    assert anchored("") == (str(tmp_path / "root"), True)
    assert anchored("/abs/x") == ("/abs/x", False)
    assert anchored("s3://b/x") == ("s3://b/x", False)
    monkeypatch.delenv("REUSE_RAY_RESULTS")
    assert default_root() == str(Path("~/reuse_ray_results").expanduser())


def test_a_run_with_no_results_dir_writes_below_the_root_not_the_working_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REUSE_RAY_RESULTS", str(tmp_path / "root"))
    cfg = small_config(tmp_path, fl__rounds=1).replace(results_dir="")
    summary = run_fl(cfg)
    assert summary.results_dir == str(tmp_path / "root")
    assert len(read_table(tmp_path / "root", "runs")) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_a_file_uri_writes_where_it_points(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = small_config(tmp_path, fl__rounds=1).replace(results_dir=f"file://{tmp_path}/out")
    assert run_fl(cfg).status == "finished"
    assert len(read_table(tmp_path / "out", "rounds")) == 1
    assert not (tmp_path / "file:").exists()  # no stray folder named after the scheme


def test_dated_folders_are_fresh_and_the_newest_is_found(tmp_path):
    first = dated_folder(str(tmp_path))
    Path(first).mkdir()
    second = dated_folder(str(tmp_path))
    assert second != first and Path(second).name.startswith(Path(first).name[:8])
    Path(second).mkdir()
    (tmp_path / "not-a-sweep").mkdir()
    assert latest_dated(str(tmp_path)) == second
    assert latest_dated(str(tmp_path / "none")) is None


@pytest.fixture
def write_once(monkeypatch):
    """A local folder treated as an object store: no rename, files written once."""
    monkeypatch.setattr(Storage, "renames", property(lambda self: False))


def test_without_rename_progress_is_hidden_and_final_files_are_written_once(
    tmp_path, write_once, monkeypatch
):
    cfg = small_config(tmp_path, fl__rounds=3, fl__eval_every=1)
    writes: list[str] = []
    real = Storage.write_parquet

    def spy(self, rel, table):
        writes.append(rel)
        return real(self, rel, table)

    monkeypatch.setattr(Storage, "write_parquet", spy)
    with pytest.raises(KeyboardInterrupt):
        run_fl(cfg, backend=crash_at(3))
    # stopped in round 3: rounds 1-2 were flushed under hidden names only, then the final
    # files were written once each, holding the failed attempt's rows
    first_final = next(i for i, w in enumerate(writes) if not Path(w).name.startswith("."))
    assert first_final > 0 and all(Path(w).name.startswith(".") for w in writes[:first_final])
    finals = writes[first_final:]
    assert len(finals) == len(set(finals)) == 4
    assert not any(Path(w).name.startswith(".") for w in finals)
    assert read_table(cfg.results_dir, "runs").iloc[0]["status"] == "interrupted"
    assert len(read_table(cfg.results_dir, "rounds")) == 2
    assert list(Path(cfg.results_dir).rglob(".*.attempt.parquet")) == []
    writes.clear()
    assert run_fl(cfg).status == "finished"
    finals = [w for w in writes if not Path(w).name.startswith(".")]
    assert len(finals) == len(set(finals)) == 4  # each final name written exactly once
    assert {w.split("/")[0] for w in finals} == {"runs", "rounds", "client_events", "clients"}
    assert len(read_table(cfg.results_dir, "rounds")) == 3
    assert list(Path(cfg.results_dir).rglob(".*.attempt.parquet")) == []


def test_without_rename_a_killed_run_shows_no_half_result(tmp_path, write_once, monkeypatch):
    # a process killed outright never reaches its last write: readers see nothing of it
    from reuse_ray.results.writer import RunWriter

    monkeypatch.setattr(RunWriter, "finish", lambda self, status: None)
    cfg = small_config(tmp_path, fl__rounds=3, fl__eval_every=1)
    with pytest.raises(KeyboardInterrupt):
        run_fl(cfg, backend=crash_at(3))
    assert list(Path(cfg.results_dir).rglob(".*.attempt.parquet"))
    assert read_table_if_any(cfg.results_dir, "rounds") is None
    assert read_table_if_any(cfg.results_dir, "runs") is None


def test_without_rename_a_forced_rerun_that_dies_keeps_the_finished_result(tmp_path, write_once):
    cfg = small_config(tmp_path, fl__rounds=2)
    assert run_fl(cfg).status == "finished"
    before = read_table(cfg.results_dir, "rounds")
    with pytest.raises(KeyboardInterrupt):
        run_fl(cfg, backend=crash_at(2), force=True)
    after = read_table(cfg.results_dir, "rounds")
    assert after.drop(columns="round_wall_s").equals(before.drop(columns="round_wall_s"))


def test_a_results_location_that_is_not_a_uri_pyarrow_knows_is_one_line():
    from reuse_ray.errors import UserError

    with pytest.raises(UserError, match="results location 'nosuch://x'"):
        Storage.of("nosuch://x")
    with pytest.raises(ResultsError):
        read_table("/nonexistent/results", "runs")
