"""The one reader: a results root (a local path or a pyarrow filesystem URI) into pandas, with
clear errors for missing or corrupt files. ``analysis`` reads through it too."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import UserError
from .schema import PARTITION_COLUMN, SCHEMAS
from .storage import Storage

if TYPE_CHECKING:  # pandas comes when a table is read, not with this module (a run's driver)
    import pandas as pd


class ResultsError(UserError):
    """A results directory or file is missing or unreadable."""


def is_results_root(location: str | Path) -> bool:
    """Whether the location is a folder (on an object store: any object lies below it)."""
    store = Storage.of(location)
    try:
        return store.is_dir() or bool(store.listdir())
    except (OSError, ValueError):
        return False


def table_files(fs, base: str) -> list[str]:
    """The table's Parquet files below ``base`` (none without the folder), hidden ones left."""
    if fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    return [
        f.path
        for f in fs.get_file_info(pafs.FileSelector(base, recursive=True))
        if f.type == pafs.FileType.File
        and f.path.endswith(".parquet")
        and not Path(f.path).name.startswith((".", "_"))
    ]


class _Vanished(Exception):
    """A file listed a moment ago is gone: a live writer replaced or cleared it."""


def read_table_if_any(location: str | Path, table: str) -> pd.DataFrame | None:
    """All rows of one table (every run, every method), or None when the table has no file.

    Hidden files (leading ``.`` or ``_``: a writer's attempt in progress) are skipped; a file
    that is not valid Parquet raises :class:`ResultsError` naming it. Results a sweep is still
    writing read too: a file that disappears between the listing and the read (a run restarted
    from round 1 clears its unfinished attempt's files) is not corrupt, and the table is listed
    and read again."""
    got = read_arrow_if_any(location, table)
    return None if got is None else got.to_pandas()


def read_arrow_if_any(location: str | Path, table: str) -> pa.Table | None:
    """:func:`read_table_if_any` as an Arrow table: every file's columns in one schema (the
    method partition a column), the types as written."""
    if table not in SCHEMAS:
        raise ValueError(f"unknown table {table!r}; allowed: {', '.join(SCHEMAS)}")
    for _ in range(4):
        try:
            return _read_once(location, table)
        except _Vanished:
            continue
    return _read_once(location, table, live=False)


def _read_once(location: str | Path, table: str, live: bool = True) -> pa.Table | None:
    """One listing of ``table``'s files and one read of them (``live``: a file gone since the
    listing raises :class:`_Vanished` instead of being named as corrupt)."""
    store = Storage.of(location)
    fs, base = store.fs, f"{store.root}/{table}"
    files = table_files(fs, base)

    def failed(path: str, err: Exception) -> Exception:
        if live and fs.get_file_info(path).type == pafs.FileType.NotFound:
            return _Vanished(path)
        return ResultsError(f"corrupt Parquet file {path}: {err}")

    schemas = []
    for path in files:
        try:
            with fs.open_input_file(path) as fh:
                schemas.append(pq.read_metadata(fh).schema.to_arrow_schema())
        except Exception as err:  # noqa: BLE001 - any reader failure means a corrupt file
            raise failed(path, err) from None
    if not files:
        return None
    import pyarrow.dataset as ds  # pandas comes with to_pandas

    # every file's columns, not the first file's: files written before a config field or a
    # method existed lack its columns, which read as nulls there
    unified = pa.unify_schemas(schemas, promote_options="permissive")
    if PARTITION_COLUMN not in unified.names:
        unified = unified.append(pa.field(PARTITION_COLUMN, pa.string()))
    partitioning = ds.partitioning(
        pa.schema([pa.field(PARTITION_COLUMN, pa.string())]), flavor="hive"
    )
    try:
        # the dataset checks every file is there (FileNotFoundError: one went since its footer
        # was read), then reads them
        dataset = ds.dataset(
            files,
            schema=unified,
            filesystem=fs,
            format="parquet",
            partitioning=partitioning,
            partition_base_dir=base,
        )
        return dataset.to_table()
    except (pa.ArrowException, OSError) as err:  # a file gone, or whose footer reads but not data
        for path in files:
            try:
                with fs.open_input_file(path) as fh:
                    pq.ParquetFile(fh).read()
            except Exception as bad:  # noqa: BLE001 - the damaged one, named
                raise failed(path, bad) from None
        if live:  # every file reads on its own now: one was replaced while it was read
            raise _Vanished(base) from None
        raise ResultsError(
            f"the {table!r} table under {location!s} cannot be read: {err}"
        ) from None


def read_table(location: str | Path, table: str) -> pd.DataFrame:
    """All rows of one table of a results root; :class:`ResultsError` when there is none."""
    df = read_table_if_any(location, table)
    if df is None:
        raise ResultsError(f"no {table!r} table under {location!s} (expected folder {table}/)")
    return df


STUDY_FILE = "study.json"  # a study's budget, machine, dates and wall time (JSON)


def read_metadata(location: str | Path) -> dict | None:
    """A study's ``study.json``, or None where the results are not a study's."""
    import json

    store = Storage.of(location)
    if not store.is_file(STUDY_FILE):
        return None
    return json.loads(store.read_bytes(STUDY_FILE))
