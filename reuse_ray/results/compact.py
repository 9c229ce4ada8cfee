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
from .schema import PARTITION_COLUMN, RUN_TABLES
from .storage import COMPACTED_FILE, Storage, display

LEFT_OUT = ("_tune", "tensorboard", "report")


def compact(src: str | Path, dst: str | Path, say=print) -> list[dict]:
    """Write ``src``'s results to the new folder ``dst``, each run table's rows in one file per
    method, and check that every table reads back the same; returns per table its rows and
    its files and bytes before and after. ``src`` is left as it was."""
    source, target = Storage.of(src), Storage.of(dst)
    if not is_results_root(src):
        raise UserError(f"compact: {display(src)} is not a results folder")
    if target.listdir():
        raise UserError(
            f"compact: {display(dst)} is not empty; allowed: a new or empty folder (nothing "
            "there is overwritten)"
        )
    import datetime as dt
    import json

    marker = {"source": display(src), "compacted_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    target.write_bytes(COMPACTED_FILE, json.dumps(marker).encode())  # first: the folder is claimed
    report = []
    for table in RUN_TABLES:
        rows = read_arrow_if_any(src, table)
        if rows is None:
            continue
        before = _files(source, table)
        for method in rows.column(PARTITION_COLUMN).unique().to_pylist():
            part = rows.filter(pa.compute.equal(rows[PARTITION_COLUMN], method))
            part = part.drop_columns([PARTITION_COLUMN])
            name = f"{table}/{PARTITION_COLUMN}={method}/{method}.parquet"
            target.write_parquet(name, part, compression="zstd")
        _same(rows, read_arrow_if_any(dst, table), table)
        after = _files(target, table)
        report.append(
            {
                "table": table,
                "rows": rows.num_rows,
                "files before": len(before),
                "MB before": round(sum(before) / 1e6, 2),
                "files after": len(after),
                "MB after": round(sum(after) / 1e6, 2),
            }
        )
    for rel in _copied(source):
        target.write_bytes(rel, source.read_bytes(rel))
    left = [e.base_name for e in source.listdir() if e.base_name in LEFT_OUT]
    if left:
        say(f"left out: {', '.join(left)} (Tune's state, TensorBoard logs, the report)")
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
