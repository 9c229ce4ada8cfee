"""Read a results directory back into pandas, with clear errors for missing or corrupt files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from .schema import SCHEMAS


class ResultsError(RuntimeError):
    """A results directory or file is missing or unreadable."""


def read_table(results_dir: str | Path, table: str) -> pd.DataFrame:
    """All rows of one table of a results directory (every run, every method)."""
    if table not in SCHEMAS:
        raise ValueError(f"unknown table {table!r}; allowed: {', '.join(SCHEMAS)}")
    root = Path(results_dir) / table
    if not root.is_dir():
        raise ResultsError(f"no {table!r} table under {results_dir!s} (expected folder {root})")
    files = sorted(p for p in root.rglob("*.parquet") if not p.name.startswith((".", "_")))
    for f in files:
        try:
            pq.read_metadata(f)
        except Exception as err:  # noqa: BLE001 - any reader failure means a corrupt file
            raise ResultsError(f"corrupt Parquet file {f}: {err}") from None
    dataset = ds.dataset(str(root), format="parquet", partitioning="hive")
    return dataset.to_table().to_pandas()
