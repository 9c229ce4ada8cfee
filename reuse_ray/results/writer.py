"""The one Parquet writer: rows are checked against the declared schema and never seen half
written.

Each table of a run is one file, rewritten whole at every flush (on local disks through a hidden
temporary file and an atomic rename; on object stores under a hidden attempt name, then once
under the final name), so a crash loses at most the rounds since the last flush. Hidden files
(leading ``.``) are skipped by every reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .schema import OPTIONAL_RUN_TABLES, PARTITION_COLUMN, RUN_TABLES, SCHEMAS
from .storage import Storage

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


COMPLETE = ("finished", "diverged")  # a run in these states is a result; never destroyed


class RunWriter:
    """Accumulates one run's rows and writes its files under a results location.

    Where the filesystem renames atomically (local disks), every flush replaces the run's
    visible files, so a running run can be watched. On object stores, flushes go to hidden
    attempt files (skipped by readers) and :meth:`finish` writes each final file once.

    When the location already holds a complete result of the same run id, a new attempt is
    staged under hidden names too, and :meth:`finish` puts its files in place only when it has
    finished, so the old rows are never lost to a crash.
    """

    def __init__(self, results_dir: str | Path, run_id: str, method: str):
        self.store = Storage.of(results_dir)
        self.run_id = run_id
        self.method = method
        self.rows: dict[str, list[dict[str, Any]]] = {t: [] for t in RUN_TABLES}
        self.staged = False  # a forced rerun beside a complete result

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows[table].append(row)

    def set_run_row(self, row: dict[str, Any]) -> None:
        self.rows["runs"] = [row]

    def final_path(self, table: str) -> str:
        """The file's path relative to the results location."""
        return f"{table}/{PARTITION_COLUMN}={self.method}/{self.run_id}.parquet"

    def attempt_path(self, table: str) -> str:
        return f"{table}/{PARTITION_COLUMN}={self.method}/.{self.run_id}.attempt.parquet"

    @property
    def hidden(self) -> bool:
        return self.staged or not self.store.renames

    def path(self, table: str) -> str:
        return self.attempt_path(table) if self.hidden else self.final_path(table)

    def previous_status(self) -> str | None:
        """The status in this run id's existing ``runs`` file, if there is one."""
        rel = self.final_path("runs")
        if not self.store.is_file(rel):
            return None
        try:
            with self.store.fs.open_input_file(self.store.path(rel)) as fh:
                # ParquetFile, not pq.read_table: that one loads pyarrow's dataset layer (and
                # pandas with it) into a run's driver
                status = pq.ParquetFile(fh).read(columns=["status"]).column("status").to_pylist()
        except Exception:  # noqa: BLE001 - an unreadable file is no finished result
            return None
        return status[0] if status else None

    def previous_result(self) -> dict[str, Any] | None:
        """This run id's existing ``runs`` row, when it is a complete result whose every table
        is in place (a run's files are written whole, the runs file last); else None."""
        if self.previous_status() not in COMPLETE:
            return None
        if not all(
            self.store.is_file(self.final_path(t))
            for t in RUN_TABLES
            if t not in OPTIONAL_RUN_TABLES
        ):
            return None
        with self.store.fs.open_input_file(self.store.path(self.final_path("runs"))) as fh:
            rows = pq.ParquetFile(fh).read().to_pylist()
        return rows[0] if rows else None

    def stage(self) -> None:
        """Write this attempt under hidden names until :meth:`finish`."""
        self.staged = True

    def finish(self, status: str) -> None:
        """The last write of an attempt: its final files, unless it is a staged rerun that did
        not finish (then the complete result it would replace stays)."""
        if not self.hidden or (self.staged and status not in COMPLETE):
            return
        for table in self._written():
            if self.store.renames:
                if self.store.is_file(self.attempt_path(table)):
                    self.store.fs.move(
                        self.store.path(self.attempt_path(table)),
                        self.store.path(self.final_path(table)),
                    )
            else:
                self.store.write_parquet(
                    self.final_path(table), rows_to_table(table, self.rows[table])
                )
                self.store.delete(self.attempt_path(table))
        self.staged = False

    def _written(self) -> list[str]:
        """The tables this run writes: every run table but an optional one it has no rows of."""
        return [t for t in RUN_TABLES if t not in OPTIONAL_RUN_TABLES or self.rows[t]]

    def flush(self, tables: tuple[str, ...] | None = None) -> None:
        for table in tables or self._written():
            if table in OPTIONAL_RUN_TABLES and not self.rows[table]:
                continue
            self.store.write_parquet(self.path(table), rows_to_table(table, self.rows[table]))

    def clear_previous(self) -> None:
        """Remove files an unfinished previous attempt of this run id left, so rows never mix.
        A complete result is never removed here (see :meth:`stage`)."""
        if self.previous_status() in COMPLETE:
            raise RuntimeError(f"refusing to remove the complete result of run {self.run_id}")
        for table in RUN_TABLES:
            self.store.delete(self.final_path(table))
            self.store.delete(self.attempt_path(table))


def mark_runs(
    results_dir: str | Path,
    runs: list[tuple[str, str]],
    status: str,
    why: str | None,
    left: tuple[str, ...],
) -> int:
    """Rewrite the runs row of each of ``runs`` whose status is one of ``left`` to ``status``
    (``why`` as its error); the other tables are left as they are. Returns how many."""
    store = Storage.of(results_dir)
    marked = 0
    for method, run_id in runs:
        w = RunWriter(results_dir, run_id, method)
        rel = next(
            (p for p in (w.final_path("runs"), w.attempt_path("runs")) if store.is_file(p)), None
        )
        if rel is None:
            continue
        with store.fs.open_input_file(store.path(rel)) as fh:
            rows = pq.ParquetFile(fh).read().to_pylist()
        if not rows or rows[0]["status"] not in left:
            continue
        rows[0].update(status=status, error=why)
        rows[0].pop(PARTITION_COLUMN, None)
        store.write_parquet(rel, rows_to_table("runs", rows))
        marked += 1
    return marked
