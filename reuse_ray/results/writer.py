"""The one Parquet writer: rows are checked against the declared schema and written atomically.

Each table of a run is one file, rewritten whole at every flush through a hidden temporary file
and ``os.replace``, so a reader never sees a half-written file and a crash loses at most the
rounds since the last flush. Hidden files (leading ``.``) are ignored by pyarrow datasets.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .schema import PARTITION_COLUMN, RUN_TABLES, SCHEMAS


def table_path(results_dir: str | Path, table: str, method: str, run_id: str) -> Path:
    return Path(results_dir) / table / f"{PARTITION_COLUMN}={method}" / f"{run_id}.parquet"


PARAM_PREFIX = "param."  # trials: one column per searched parameter (param.<dotted name>)


def _param_fields(rows: list[dict[str, Any]]) -> list[pa.Field]:
    """The ``param.*`` columns of a trials table: float64 when every value is a number, else a
    string (JSON for lists)."""
    names = sorted({k for row in rows for k in row if k.startswith(PARAM_PREFIX)})
    fields = []
    for name in names:
        values = [row.get(name) for row in rows if row.get(name) is not None]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        fields.append(pa.field(name, pa.float64() if numeric else pa.string()))
        if not numeric:
            for row in rows:
                v = row.get(name)
                if v is not None and not isinstance(v, str):
                    row[name] = json.dumps(v)
    return fields


def rows_to_table(table: str, rows: list[dict[str, Any]]) -> pa.Table:
    """Build an Arrow table of the declared schema; unknown columns are an error (the trials
    table's ``param.*`` columns are typed from their values)."""
    schema = SCHEMAS[table]
    if table == "trials":
        rows = [dict(r) for r in rows]
        for field in _param_fields(rows):
            schema = schema.append(field)
    names = set(schema.names)
    for row in rows:
        extra = set(row) - names
        if extra:
            raise KeyError(
                f"table {table!r} has no column(s) {sorted(extra)}; see results/schema.py"
            )
    return pa.Table.from_pylist(rows, schema=schema)


def write_atomic(path: Path, table: pa.Table) -> None:
    """Write to a hidden temporary file in the same folder, then rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


COMPLETE = ("finished", "diverged")  # a run in these states is a result; never destroyed


class RunWriter:
    """Accumulates one run's rows and writes its files under the results directory.

    When the results directory already holds a complete result of the same run id, a new
    attempt writes beside it under hidden names (which readers skip) and :meth:`commit` puts
    its files in place only when it has finished, so the old rows are never lost to a crash.
    """

    def __init__(self, results_dir: str | Path, run_id: str, method: str):
        self.results_dir = Path(results_dir)
        self.run_id = run_id
        self.method = method
        self.rows: dict[str, list[dict[str, Any]]] = {t: [] for t in RUN_TABLES}
        self.staged = False

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows[table].append(row)

    def set_run_row(self, row: dict[str, Any]) -> None:
        self.rows["runs"] = [row]

    def final_path(self, table: str) -> Path:
        return table_path(self.results_dir, table, self.method, self.run_id)

    def path(self, table: str) -> Path:
        p = self.final_path(table)
        return p.with_name(f".{p.stem}.attempt.parquet") if self.staged else p

    def previous_status(self) -> str | None:
        """The status in this run id's existing ``runs`` file, if there is one."""
        p = self.final_path("runs")
        if not p.exists():
            return None
        try:
            status = pq.read_table(p, columns=["status"]).column("status").to_pylist()
        except Exception:  # noqa: BLE001 - an unreadable file is no finished result
            return None
        return status[0] if status else None

    def stage(self) -> None:
        """Write this attempt under hidden names until :meth:`commit`."""
        self.staged = True

    def commit(self) -> None:
        """Put a staged attempt's files in place of the previous ones (one rename each)."""
        if not self.staged:
            return
        for table in RUN_TABLES:
            staged = self.path(table)
            if staged.exists():
                os.replace(staged, self.final_path(table))
        self.staged = False

    def flush(self, tables: tuple[str, ...] | None = None) -> None:
        for table in tables or tuple(RUN_TABLES):
            write_atomic(self.path(table), rows_to_table(table, self.rows[table]))

    def clear_previous(self) -> None:
        """Remove files an unfinished previous attempt of this run id left, so rows never mix.
        A complete result is never removed here (see :meth:`stage`)."""
        if self.previous_status() in COMPLETE:
            raise RuntimeError(f"refusing to remove the complete result of run {self.run_id}")
        for table in RUN_TABLES:
            p = self.final_path(table)
            if p.exists():
                p.unlink()
