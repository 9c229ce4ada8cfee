"""A results folder compacted to share or ship: each run table's rows in one Parquet file per
method, instead of one file per run.

A run writes its own file of each run table (so that runs finish, fail and resume on their own,
design: Results). Each file carries a footer describing every column — the runs table has one
per config field, about 150 — and that footer, not the rows, is most of a study's bytes.
Compacted,
every table of the folder reads back with the same rows, columns and types
(:func:`~reuse_ray.results.reader.read_table` and ``analysis`` read it as they read the
original; checked before :func:`compact` returns). ``study.json`` and the trials tables are
copied as they are; Tune's state, TensorBoard logs and the report are left out (``reuse-ray
report`` writes the report again). A compacted folder is for reading, marked so
(``compacted.json``): a run, ``--resume`` or ``--final`` refuses to write into it
(:meth:`.storage.Storage.check_writable`).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..errors import UserError
from .reader import STUDY_FILE, is_results_root, read_arrow_if_any, table_files
from .schema import OPTIONAL_RUN_TABLES, PARTITION_COLUMN, RUN_TABLES
from .storage import COMPACTED_FILE, Storage, display
from .writer import rows_to_table

LEFT_OUT = ("_tune", "tensorboard", "report")


def compact(src: str | Path, dst: str | Path, say=print, update: bool = False) -> list[dict]:
    """Write ``src``'s results to the new folder ``dst``, each run table's rows in one file per
    method, and check that every table reads back the same; returns per table its rows and
    its files and bytes before and after. ``src`` is left as it was.

    ``update``: ``dst`` may be an earlier compacted copy of the same results (or new); only
    settled runs go in (:data:`SETTLED`: a run still running or interrupted is left for a later
    update), each update's new or changed runs as one more file per table and method, so a
    copy kept beside a study that is still computing grows by what the study added (a run whose
    rows changed since, e.g. a stopped search run computed again, is replaced; a run the
    copy holds is never removed). The copy then holds exactly the source's rows of its runs."""
    source, target = Storage.of(src), Storage.of(dst)
    if not is_results_root(src):
        raise UserError(f"compact: {display(src)} is not a results folder")
    held = _held(src, dst) if update else None
    if held is None and target.listdir():
        raise UserError(
            f"compact: {display(dst)} is not empty; allowed: a new or empty folder (nothing "
            "there is overwritten)"
            + ("" if update else ", or --update of an earlier compacted copy")
        )
    import datetime as dt
    import json

    if held is None:  # first: the folder is claimed
        marker = {"source": display(src), "compacted_at": dt.datetime.now(dt.timezone.utc)}
        marker["compacted_at"] = marker["compacted_at"].isoformat()
        target.write_bytes(COMPACTED_FILE, json.dumps(marker).encode())
    add, replace = _to_write(src, held or {}, update)
    report = [_table(src, dst, table, update, add | replace, replace) for table in RUN_TABLES]
    report = [r for r in report if r is not None]
    for rel in _copied(source):
        target.write_bytes(rel, source.read_bytes(rel))
    left = [e.base_name for e in source.listdir() if e.base_name in LEFT_OUT]
    if left:
        say(f"left out: {', '.join(left)} (Tune's state, TensorBoard logs, the report)")
    if update:
        say(f"update: {len(add)} runs added, {len(replace)} replaced (settled runs only)")
    return report


def _table(src, dst, table: str, update: bool, runs: set, replace: set) -> dict | None:
    """One run table of ``src`` written to ``dst``, one file per method (with ``update``, only
    ``runs``' rows, ``replace``'s earlier files dropped first), checked to read back the same;
    returns its rows and its files and bytes before and after (None: ``src`` has no such table)."""
    source, target = Storage.of(src), Storage.of(dst)
    rows = read_arrow_if_any(src, table)
    if rows is None:
        return None
    before = _files(source, table)
    if update:
        _drop_runs(target, table, replace)
        rows = _of_runs(rows, runs)
    for method in rows.column(PARTITION_COLUMN).unique().to_pylist():
        part = rows.filter(pa.compute.equal(rows[PARTITION_COLUMN], method))
        part = part.drop_columns([PARTITION_COLUMN])
        target.write_parquet(_part_name(target, table, method), part, compression="zstd")
    copied = read_arrow_if_any(dst, table)
    if update and copied is not None:  # the source's rows of the runs the copy holds
        rows = _of_runs(read_arrow_if_any(src, table), set(copied["run_id"].to_pylist()))
        rows, copied = _aligned(rows, copied)
    _same(rows, copied, table)
    after = _files(target, table)
    return {
        "table": table,
        "rows": rows.num_rows,
        "files before": len(before),
        "MB before": round(sum(before) / 1e6, 2),
        "files after": len(after),
        "MB after": round(sum(after) / 1e6, 2),
    }


# a run in these states changes no more unless it is computed again (a search resumed without
# its Tune state); ``running`` and ``interrupted`` runs are left for a later update
SETTLED = ("finished", "diverged", "failed", "stopped")


def _held(src: str | Path, dst: str | Path) -> dict[str, dict] | None:
    """An earlier compacted copy's runs rows by run id (None: ``dst`` is new or empty); a
    folder that is no compacted copy, or one of another study, refuses the update."""
    target = Storage.of(dst)
    if not target.is_dir() or not target.listdir():
        return None
    if not target.is_file(COMPACTED_FILE):
        raise UserError(
            f"compact --update: {display(dst)} is not a compacted copy (no {COMPACTED_FILE}); "
            "allowed: a new or empty folder, or an earlier compacted copy of the same results"
        )
    ours, theirs = _study_name(Storage.of(src)), _study_name(target)
    if ours != theirs:
        raise UserError(
            f"compact --update: {display(dst)} holds study {theirs!r}, not {ours!r}; allowed: "
            "an earlier compacted copy of the same results"
        )
    runs = read_arrow_if_any(dst, "runs")
    return {} if runs is None else _by_run(runs)


def _study_name(store: Storage) -> str | None:
    import json

    if not store.is_file(STUDY_FILE):
        return None
    return json.loads(store.read_bytes(STUDY_FILE)).get("name")


def _by_run(runs: pa.Table) -> dict[str, dict]:
    """Runs rows by run id, their empty fields left out (a column another method's runs
    bring is empty here) and a NaN (a diverged run's loss) as a string, so that two equal rows
    compare equal."""
    out = {}
    for row in runs.to_pylist():
        out[row["run_id"]] = {k: "nan" if v != v else v for k, v in row.items() if v is not None}
    return out


def _to_write(src, held: dict[str, dict], update: bool) -> tuple[set[str], set[str]]:
    """The run ids to add (settled, not in the copy) and to replace (in the copy, their runs
    row changed since); without ``update``, every run is added."""
    runs = read_arrow_if_any(src, "runs")
    mine = _by_run(runs) if runs is not None else {}
    if not update:
        return set(mine), set()
    settled = {rid for rid, row in mine.items() if row["status"] in SETTLED}
    add = settled - set(held)
    replace = {rid for rid in settled & set(held) if mine[rid] != held[rid]}
    return add, replace


def _aligned(a: pa.Table, b: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Both tables with their columns in one order, the source's columns that are empty in
    every row the copy holds left out (a method whose runs are all unsettled adds columns to
    the source only): an updated copy's files were written at different times."""
    extra = [c for c in a.column_names if c not in b.column_names and a[c].null_count == len(a)]
    a = a.drop_columns(extra)
    names = sorted(a.column_names)
    return a.select(names), b.select([n for n in names if n in b.column_names])


def _of_runs(rows: pa.Table, run_ids: set[str]) -> pa.Table:
    return rows.filter(pa.compute.is_in(rows["run_id"], pa.array(sorted(run_ids), pa.string())))


def _part_name(store: Storage, table: str, method: str) -> str:
    """``<table>/method=<m>/<m>.parquet``, then ``<m>.2.parquet``, … for later updates."""
    folder = f"{table}/{PARTITION_COLUMN}={method}"
    k = 1
    while store.is_file(name := f"{folder}/{method}{'' if k == 1 else f'.{k}'}.parquet"):
        k += 1
    return name


def _drop_runs(store: Storage, table: str, run_ids: set[str]) -> None:
    """Rewrite the copy's files of ``table`` without the rows of ``run_ids`` (their new rows
    are written next); a file left with no row is removed."""
    if not run_ids:
        return
    import pyarrow.parquet as pq

    for path in table_files(store.fs, f"{store.root}/{table}"):
        with store.fs.open_input_file(path) as fh:
            rows = pq.ParquetFile(fh).read()
        keep = rows.filter(
            pa.compute.invert(pa.compute.is_in(rows["run_id"], pa.array(sorted(run_ids))))
        )
        if keep.num_rows == rows.num_rows:
            continue
        rel = path[len(store.root) + 1 :]
        if keep.num_rows:
            store.write_parquet(rel, keep, compression="zstd")
        else:
            store.delete(rel)


def _one_file_per_run(store: Storage, table: str, rows: pa.Table) -> set[str]:
    """Each run's rows of ``table`` in its own file, named as a run names it; returns the run
    ids written."""
    ordered = rows.take(pa.compute.sort_indices(rows, [("run_id", "ascending")]))  # stable
    ids, methods = ordered["run_id"].to_pylist(), ordered[PARTITION_COLUMN].to_pylist()
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[start]:
            one = ordered.slice(start, i - start).drop_columns([PARTITION_COLUMN])
            rel = f"{table}/{PARTITION_COLUMN}={methods[start]}/{ids[start]}.parquet"
            store.write_parquet(rel, one)
            start = i
    return set(ids)


def expand(src: str | Path, dst: str | Path) -> list[dict]:
    """The reverse of :func:`compact`: the compacted copy ``src`` as a working results folder
    ``dst`` (new or empty), each run's rows in its own files as a run writes them, the record
    and trials copied, no compacted mark — so ``sweep --resume`` continues a study there (its
    finished runs kept, the rest computed). Every table is checked to read back the same;
    returns per table its rows and files."""
    source, target = Storage.of(src), Storage.of(dst)
    if not source.is_file(COMPACTED_FILE):
        raise UserError(
            f"expand: {display(src)} is not a compacted copy (no {COMPACTED_FILE}); a results "
            "folder is resumed where it is"
        )
    if target.listdir():
        raise UserError(
            f"expand: {display(dst)} is not empty; allowed: a new or empty folder (nothing "
            "there is overwritten)"
        )
    runs = read_arrow_if_any(src, "runs")
    of_run = (
        {}
        if runs is None
        else dict(zip(*(runs[c].to_pylist() for c in ("run_id", PARTITION_COLUMN)), strict=True))
    )
    report = []
    for table in RUN_TABLES:
        rows = read_arrow_if_any(src, table)
        written = _one_file_per_run(target, table, rows) if rows is not None else set()
        if table not in OPTIONAL_RUN_TABLES:  # a run with no row of the table: its empty file
            for run_id in sorted(set(of_run) - written):
                rel = f"{table}/{PARTITION_COLUMN}={of_run[run_id]}/{run_id}.parquet"
                target.write_parquet(rel, rows_to_table(table, []))
        if rows is None:
            continue
        _same(rows, read_arrow_if_any(dst, table), table)
        report.append({"table": table, "rows": rows.num_rows, "runs": len(written)})
    for rel in _copied(source):
        target.write_bytes(rel, source.read_bytes(rel))
    return report


def _copied(store: Storage) -> list[str]:
    """The files copied as they are: the study's record and every trials table."""
    out = [STUDY_FILE] if store.is_file(STUDY_FILE) else []
    return out + [
        f"trials/{e.base_name}"
        for e in store.listdir("trials")
        if e.base_name.endswith(".parquet") and not e.base_name.startswith((".", "_"))
    ]


def _files(store: Storage, table: str) -> list[int]:
    """The sizes of a table's Parquet files (the ones the reader reads)."""
    paths = table_files(store.fs, f"{store.root}/{table}")
    return [f.size for f in store.fs.get_file_info(paths)]


def _same(a: pa.Table, b: pa.Table | None, table: str) -> None:
    """The compacted table holds the same rows (in any order), columns and types."""
    if b is not None and a.schema.equals(b.schema) and a.num_rows == b.num_rows:
        keys = [
            (f.name, "ascending")
            for f in a.schema
            if not pa.types.is_nested(f.type) and not pa.types.is_null(f.type)
        ]
        a, b = a.sort_by(keys), b.sort_by(keys)
        if all(_same_column(a[c], b[c]) for c in a.column_names):
            return
    raise UserError(f"compact: the {table!r} table did not read back the same; nothing was lost")


def _same_column(x: pa.ChunkedArray, y: pa.ChunkedArray) -> bool:
    """Equal values, a NaN (a diverged run's loss) equal to a NaN in the same row."""
    if x.equals(y):
        return True
    if not pa.types.is_floating(x.type):
        return False
    pc = pa.compute
    nan_x, nan_y = pc.is_nan(x), pc.is_nan(y)
    return nan_x.equals(nan_y) and pc.if_else(nan_x, 0.0, x).equals(pc.if_else(nan_y, 0.0, y))
