"""The one Parquet writer: rows are checked against the declared schema and written atomically.

Each table of a run is one file, rewritten whole at every flush through a hidden temporary file
and ``os.replace``, so a reader never sees a half-written file and a crash loses at most the
rounds since the last flush. Hidden files (leading ``.``) are ignored by pyarrow datasets.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .schema import PARTITION_COLUMN, RUN_TABLES, SCHEMAS


def table_path(results_dir: str | Path, table: str, method: str, run_id: str) -> Path:
    return Path(results_dir) / table / f"{PARTITION_COLUMN}={method}" / f"{run_id}.parquet"


def rows_to_table(table: str, rows: list[dict[str, Any]]) -> pa.Table:
    """Build an Arrow table of the declared schema; unknown columns are an error."""
    schema = SCHEMAS[table]
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


class RunWriter:
    """Accumulates one run's rows and writes its files under the results directory."""

    def __init__(self, results_dir: str | Path, run_id: str, method: str):
        self.results_dir = Path(results_dir)
        self.run_id = run_id
        self.method = method
        self.rows: dict[str, list[dict[str, Any]]] = {t: [] for t in RUN_TABLES}

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows[table].append(row)

    def set_run_row(self, row: dict[str, Any]) -> None:
        self.rows["runs"] = [row]

    def path(self, table: str) -> Path:
        return table_path(self.results_dir, table, self.method, self.run_id)

    def flush(self, tables: tuple[str, ...] | None = None) -> None:
        for table in tables or tuple(RUN_TABLES):
            write_atomic(self.path(table), rows_to_table(table, self.rows[table]))

    def clear_previous(self) -> None:
        """Remove files a previous attempt of this run id left, so rows never mix."""
        for table in RUN_TABLES:
            p = self.path(table)
            if p.exists():
                p.unlink()
