"""``reuse-ray compact RESULTS SHARED``: every table reads back with the same rows, columns and
types from one file per method, a diverged run's NaN included; the record and the trials tables are
copied; the source is left as it was; a folder in the way or no results is one line, exit 2."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from conftest import small_config

from reuse_ray.cli import main
from reuse_ray.results import read_table
from reuse_ray.results.schema import RUN_TABLES
from reuse_ray.runner import run_fl

# the module fixture is built once: every test here on one xdist worker (conftest.py)
pytestmark = pytest.mark.xdist_group("compact_results")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    runs = [
        small_config(root, seed=1),
        small_config(root, seed=2),
        small_config(root, seed=3, method__name="dg_fedreuse"),
        small_config(root, seed=4, train__lr=1e30),  # diverges: NaN losses in its rows
        small_config(root, seed=5, fl__uplink_levels=[0.5]),  # a levels table
    ]
    for cfg in runs:
        run_fl(cfg)
    src = root / "results"
    (src / "study.json").write_text(json.dumps({"name": "tiny"}))
    (src / "trials").mkdir()
    pd.DataFrame({"x": [1]}).to_parquet(src / "trials" / "tiny.parquet")
    assert (src / "tensorboard").is_dir()  # each run's logs: left out
    return src


def _files(folder) -> dict[str, int]:
    return {
        str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()
    }


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in ("run_id", "round", "client_id", "level", "ledger") if c in df]
    return df.sort_values(keys).reset_index(drop=True)


def test_every_table_reads_back_the_same_from_one_file_per_method(results, tmp_path, capsys):
    before = _files(results)
    dst = tmp_path / "shipped"
    assert main(["compact", str(results), str(dst)]) == 0
    out = capsys.readouterr().out
    assert "left out: tensorboard" in out and "| runs | 5 | 5 |" in out
    assert _files(results) == before  # the source is untouched
    runs = read_table(results, "runs")
    assert runs["final_val_loss"].isna().any()  # the diverged run's NaN is compared too
    for table in RUN_TABLES:
        a, b = read_table(results, table), read_table(dst, table)
        pd.testing.assert_frame_equal(_sorted(a), _sorted(b))
        methods = sorted(a["method"].unique())
        files = sorted(p.parent.name for p in (dst / table).rglob("*.parquet"))
        assert files == [f"method={m}" for m in methods], table  # one file per method
    assert (dst / "study.json").read_text() == (results / "study.json").read_text()
    assert (dst / "trials" / "tiny.parquet").read_bytes() == (
        results / "trials" / "tiny.parquet"
    ).read_bytes()
    assert not (dst / "tensorboard").exists()


def test_a_folder_in_the_way_or_no_results_is_one_line(results, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep me")
    assert main(["compact", str(results), str(taken)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not empty" in err and "Traceback" not in err
    assert os.listdir(taken) == ["mine.txt"]
    assert main(["compact", str(tmp_path / "nothing"), str(tmp_path / "out")]) == 2
    assert "is not a results folder" in capsys.readouterr().err


def test_the_read_back_check_tells_a_changed_row_from_a_nan():
    import math

    import pyarrow as pa

    from reuse_ray.errors import UserError
    from reuse_ray.results.compact import _same

    a = pa.table({"run_id": ["a", "b"], "loss": [0.5, math.nan]})
    _same(a, pa.table({"run_id": ["b", "a"], "loss": [math.nan, 0.5]}), "runs")  # order free
    for other in ([0.5, 0.25], [0.75, math.nan]):
        with pytest.raises(UserError, match="did not read back the same"):
            _same(a, pa.table({"run_id": ["a", "b"], "loss": other}), "runs")


def test_nothing_is_written_into_a_compacted_copy(results, tmp_path, capsys):
    dst = tmp_path / "copy"
    assert main(["compact", str(results), str(dst)]) == 0
    mark = json.loads((dst / "compacted.json").read_text())
    assert mark["source"] == str(results)
    before = _files(dst)
    run = ["run", "sweeps/quickstart.yaml", "--backend", "local", "--set", "fl.rounds=1"]
    assert main([*run, "--results", str(dst)]) == 2
    err = capsys.readouterr().err
    assert "is a compacted copy for reading" in err and err.count("\n") == 1
    assert _files(dst) == before


def _set_status(folder, run_id: str, status: str, **more) -> None:
    """Rewrite one run's runs file as a live study would leave it (``running``) or finish it."""
    path = next(folder.glob(f"runs/method=*/{run_id}.parquet"))
    df = pd.read_parquet(path)
    df["status"] = status
    for k, v in more.items():
        df[k] = v
    df.to_parquet(path, index=False)


def test_update_adds_only_settled_runs_and_replaces_a_changed_one(results, tmp_path, capsys):
    import shutil

    src = tmp_path / "live"
    shutil.copytree(results, src)
    ids = sorted(read_table(src, "runs")["run_id"])
    _set_status(src, ids[0], "running")  # a run still computing: left for a later update
    _set_status(src, ids[1], "interrupted")
    dst = tmp_path / "copy"
    assert main(["compact", "--update", str(src), str(dst)]) == 0  # a new folder: created
    assert "update: 3 runs added, 0 replaced" in capsys.readouterr().out
    assert sorted(read_table(dst, "runs")["run_id"]) == ids[2:]
    first = _files(dst)
    # the study goes on: both runs finish, one settled run's row changes (computed again)
    _set_status(src, ids[0], "finished")
    _set_status(src, ids[1], "finished")
    _set_status(src, ids[2], "stopped", final_val_acc=0.125)
    assert main(["compact", "--update", str(src), str(dst)]) == 0
    assert "update: 2 runs added, 1 replaced" in capsys.readouterr().out
    for table in RUN_TABLES:
        pd.testing.assert_frame_equal(
            _sorted(read_table(src, table)), _sorted(read_table(dst, table)), check_like=True
        )
    # the new runs in one more file per method (a method with none yet: its first); the
    # earlier files kept, the replaced run's rewritten without it (removed if left empty)
    method = read_table(src, "runs").set_index("run_id")["method"]
    had = {method[r] for r in ids[2:]}
    for m in {method[r] for r in ids[:3]}:
        name = f"{m}.2.parquet" if m in had else f"{m}.parquet"
        assert (dst / "runs" / f"method={m}" / name).is_file(), name
    assert set(first) - set(_files(dst)) <= {
        f"runs/method={method[ids[2]]}/{method[ids[2]]}.parquet"
    }
    # nothing new: nothing written
    before = _files(dst)
    assert main(["compact", "--update", str(src), str(dst)]) == 0
    assert "update: 0 runs added, 0 replaced" in capsys.readouterr().out
    assert {
        k: v for k, v in _files(dst).items() if "study.json" not in k and "trials" not in k
    } == {k: v for k, v in before.items() if "study.json" not in k and "trials" not in k}


def test_update_refuses_a_folder_that_is_no_copy_of_the_same_study(results, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("keep me")
    assert main(["compact", "--update", str(results), str(other)]) == 2
    err = capsys.readouterr().err
    assert "is not a compacted copy" in err and err.count("\n") == 1
    copy = tmp_path / "copy"
    assert main(["compact", str(results), str(copy)]) == 0
    (copy / "study.json").write_text(json.dumps({"name": "another"}))
    assert main(["compact", "--update", str(results), str(copy)]) == 2
    assert "holds study 'another', not 'tiny'" in capsys.readouterr().err


def test_expand_gives_each_run_its_own_files_as_a_run_writes_them(results, tmp_path, capsys):
    from reuse_ray.results.writer import RunWriter

    copy, work = tmp_path / "copy", tmp_path / "work"
    assert main(["compact", str(results), str(copy)]) == 0
    assert main(["expand", str(copy), str(work)]) == 0
    assert "--resume continues it" in capsys.readouterr().out
    runs = read_table(results, "runs")
    for table in RUN_TABLES:
        pd.testing.assert_frame_equal(
            _sorted(read_table(results, table)), _sorted(read_table(work, table))
        )
        with_rows = read_table(results, table)["run_id"].unique()
        every = runs["run_id"] if table != "levels" else with_rows  # a run's every table
        assert sorted(p.stem for p in (work / table).rglob("*.parquet")) == sorted(every)
    assert not (work / "compacted.json").exists()
    assert (work / "study.json").read_text() == (results / "study.json").read_text()
    for row in runs.itertuples():  # the engine finds each complete result where it looks
        kept = RunWriter(work, row.run_id, row.method).previous_result()
        assert kept is not None and kept["status"] == row.status
    # the other way round, or onto something: one line each, nothing written
    assert main(["expand", str(results), str(tmp_path / "x")]) == 2
    assert "is not a compacted copy" in capsys.readouterr().err
    assert main(["expand", str(copy), str(work)]) == 2
    assert "is not empty" in capsys.readouterr().err
