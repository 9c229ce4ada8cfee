"""Reading a table a sweep is still writing: a file that goes between the listing and the read
(a run restarted from round 1 clears its unfinished attempt's files) is not an error, and the
table is listed and read again."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from reuse_ray.results import read_table


def _write(root, method: str, run_id: str) -> str:
    folder = root / "runs" / f"method={method}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{run_id}.parquet"
    pq.write_table(pa.table({"run_id": [run_id], "rounds_completed": [3]}), path)
    return str(path)


def test_a_file_gone_after_its_footer_was_read_is_read_again_without_it(tmp_path, monkeypatch):
    _write(tmp_path, "fedavg", "kept")
    gone = _write(tmp_path, "laq", "restarted")
    real, calls = pa.unify_schemas, []

    def footers_read_then_gone(schemas, *args, **kwargs):
        # between reading every file's footer and reading their data, the writer clears one
        calls.append(len(schemas))
        if len(calls) == 1:
            os.remove(gone)
        return real(schemas, *args, **kwargs)

    monkeypatch.setattr(pa, "unify_schemas", footers_read_then_gone)
    runs = read_table(tmp_path, "runs")
    assert runs["run_id"].tolist() == ["kept"] and runs["method"].tolist() == ["fedavg"]
    assert calls == [2, 1]  # two files listed, then the one of the second listing


def test_a_table_whose_files_all_stay_reads_every_row(tmp_path):
    _write(tmp_path, "fedavg", "a")
    _write(tmp_path, "laq", "b")
    runs = read_table(tmp_path, "runs").sort_values("run_id")
    assert runs["run_id"].tolist() == ["a", "b"] and runs["method"].tolist() == ["fedavg", "laq"]
