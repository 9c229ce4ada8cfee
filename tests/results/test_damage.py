"""Damaged result files: found, named, set aside whole (never deleted), and named by readers."""

from __future__ import annotations

import pytest
from conftest import small_config

from reuse_ray.results import ResultsError, read_table
from reuse_ray.results.damage import DAMAGED, find_damaged, set_aside
from reuse_ray.runner import run_fl


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.parquet"))


def test_a_truncated_file_is_found_and_its_whole_run_set_aside(tmp_path):
    a = small_config(tmp_path, fl__rounds=2, seed=1)
    b = small_config(tmp_path, fl__rounds=2, seed=2)
    run_fl(a), run_fl(b)
    root = type(tmp_path)(a.results_dir)
    assert find_damaged(root) == []
    bad = root / "rounds" / f"method={a.method.name}" / f"{a.run_id}.parquet"
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ResultsError, match=f"corrupt Parquet file .*{a.run_id}"):
        read_table(root, "rounds")
    found = find_damaged(root)
    assert [d.rel for d in found] == [f"rounds/method={a.method.name}/{a.run_id}.parquet"]
    assert found[0].run == (a.method.name, a.run_id) and "ArrowInvalid" in found[0].error
    before = _files(root)
    folder, runs = set_aside(root, found)
    assert runs == [a.run_id] and folder.startswith(str(root / DAMAGED))
    kept = _files(root)
    moved = [f for f in kept if f.startswith(DAMAGED)]
    # all four of the run's files moved, byte for byte, the other run untouched
    assert len(moved) == 4 and all(a.run_id in f for f in moved)
    assert sorted(f.split("/", 2)[2] for f in moved) == sorted(f for f in before if a.run_id in f)
    rounds = next(m for m in moved if "/rounds/" in m)
    assert (root / rounds).read_bytes() == data[: len(data) // 2]
    assert list(read_table(root, "runs")["run_id"]) == [b.run_id]
    assert find_damaged(root) == []


def test_a_file_whose_footer_reads_but_whose_data_does_not_is_named(tmp_path):
    cfg = small_config(tmp_path, fl__rounds=3)
    run_fl(cfg)
    bad = next((tmp_path).rglob(f"rounds/**/{cfg.run_id}.parquet"))
    data = bytearray(bad.read_bytes())
    for i in range(8, len(data) // 2):  # the column chunks, not the footer
        data[i] ^= 0x5A
    bad.write_bytes(bytes(data))
    assert [d.rel.split("/")[0] for d in find_damaged(cfg.results_dir)] == ["rounds"]
    with pytest.raises(ResultsError, match=f"corrupt Parquet file .*{cfg.run_id}"):
        read_table(cfg.results_dir, "rounds")


def test_a_file_a_live_writer_clears_while_it_is_read_is_not_called_corrupt(tmp_path, monkeypatch):
    """Reading a sweep that is still writing: a run restarted from round 1 clears its
    unfinished attempt's files, and a reader that listed one of them a moment before finds it
    gone. That file is not corrupt: the table is listed and read again, without it."""
    import reuse_ray.results.reader as reader

    a = small_config(tmp_path, fl__rounds=2, seed=1)
    b = small_config(tmp_path, fl__rounds=2, seed=2)
    run_fl(a), run_fl(b)
    root = type(tmp_path)(a.results_dir)
    gone = root / "rounds" / f"method={a.method.name}" / f"{a.run_id}.parquet"
    read_metadata = reader.pq.read_metadata

    def clears_a_file_on_first_read(fh, *args, **kwargs):
        if gone.exists():
            gone.unlink()  # the writer, between the reader's listing and its reads
        return read_metadata(fh, *args, **kwargs)

    monkeypatch.setattr(reader.pq, "read_metadata", clears_a_file_on_first_read)
    rounds = read_table(root, "rounds")
    assert set(rounds["run_id"]) == {b.run_id} and len(rounds) == 2
