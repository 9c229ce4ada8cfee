"""Damaged results, found before a resume keeps them (design: Interrupting and resuming).

``sweep --resume`` keeps every run that finished; a file of one that cannot be read (truncated
by a full disk, cut short by a copy, edited by hand) would silently drop its rows from every
reader. Before a resume, :func:`find_damaged` reads every table file whole; each damaged run's
files — all its tables, the readable ones too, so no half of a run is kept — move to
``RESULTS/_damaged/<UTC stamp>/`` (never deleted), and the run is recomputed: the sweep's
stages rerun a trial whose run is missing (:func:`reuse_ray.tuning.launch.recompute_missing`).
A damaged trials table moves aside too; the search writes it again.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .schema import RUN_TABLES, TABLES
from .storage import Storage, join

DAMAGED = "_damaged"  # below the results root; hidden from every reader (leading "_")


@dataclass(frozen=True)
class Damaged:
    """One table file that cannot be read whole: its path below the root and why."""

    rel: str
    error: str

    @property
    def run(self) -> tuple[str, str] | None:
        """(method, run_id) of a run's table file; None for a trials table."""
        parts = self.rel.split("/")
        if len(parts) != 3 or parts[0] not in RUN_TABLES or not parts[1].startswith("method="):
            return None
        return parts[1].removeprefix("method="), Path(parts[2]).stem


def _table_files(store: Storage, table: str) -> list[str]:
    base = store.path(table)
    if store.fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    sel = pafs.FileSelector(base, recursive=True)
    return sorted(
        f.path[len(store.root.rstrip("/")) + 1 :]
        for f in store.fs.get_file_info(sel)
        if f.type == pafs.FileType.File
        and f.path.endswith(".parquet")
        and not Path(f.path).name.startswith((".", "_"))
    )


def find_damaged(location: str | Path) -> list[Damaged]:
    """Every visible table file under ``location`` that cannot be read whole."""
    store = Storage.of(location)
    found = []
    for table in TABLES:
        for rel in _table_files(store, table):
            try:
                with store.fs.open_input_file(store.path(rel)) as fh:
                    pq.ParquetFile(fh).read()
            except Exception as err:  # noqa: BLE001 - any reader failure: the file is damaged
                text = str(err).splitlines()[0][:200] if str(err) else ""
                found.append(Damaged(rel, f"{type(err).__name__}: {text}"))
    return found


def set_aside(location: str | Path, damaged: list[Damaged]) -> tuple[str, list[str]]:
    """Move each damaged file, and every table file of a damaged run, below
    ``_damaged/<stamp>/`` (same relative paths); returns (that folder, the run ids moved)."""
    store = Storage.of(location)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    rels = {d.rel for d in damaged}
    runs = sorted({d.run for d in damaged if d.run is not None})
    for method, run_id in runs:
        rels |= {f"{t}/method={method}/{run_id}.parquet" for t in RUN_TABLES}
    for rel in sorted(rels):
        if not store.is_file(rel):
            continue
        dest = f"{DAMAGED}/{stamp}/{rel}"
        store.write_bytes(dest, store.read_bytes(rel))  # copied whole, then the original goes
        store.delete(rel)
    return join(str(location), f"{DAMAGED}/{stamp}"), [r for _, r in runs]


__all__ = ["DAMAGED", "Damaged", "find_damaged", "set_aside"]
