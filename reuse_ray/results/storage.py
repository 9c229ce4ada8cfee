"""Where results live: a local folder or any pyarrow filesystem URI, and the default root.

A results location is a local path or a URI that :func:`pyarrow.fs.FileSystem.from_uri` reads
(``file://``, ``s3://``, ``gs://``, ``hdfs://``). A non-AWS S3 endpoint is reached the standard
ways: the URI's own query (``s3://bucket/path?endpoint_override=host:port&scheme=http``) or
``AWS_ENDPOINT_URL``, with credentials from the usual AWS variables.

Writes never expose half a file. On filesystems with an atomic rename (local disks, HDFS) a file
is written under a hidden name and renamed over its final name. Object stores have no atomic
rename, so there a file is written once under its final name (a PUT appears whole or not at
all) and work in progress goes to hidden names, which every reader skips.

Relative locations in config and sweep files are anchored at the results root:
``$REUSE_RAY_RESULTS`` or, unset, ``~/reuse_ray_results`` — never the working directory, which
under ``ray job submit`` is a package cache on the head node.
"""

from __future__ import annotations

import datetime as _dt
import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import UserError
from ..paths import user_path

# the write errors that are the filesystem's state, not a bug: full, over quota, read-only,
# file too large
FULL_OR_READ_ONLY = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)

ROOT_ENV = "REUSE_RAY_RESULTS"
DEFAULT_ROOT = "~/reuse_ray_results"
RENAMING = ("local", "hdfs")  # pyarrow filesystem type names whose move is an atomic rename


def is_uri(location: str | Path) -> bool:
    return "://" in str(location)


def split_query(location: str) -> tuple[str, str]:
    """(``scheme://bucket/path``, ``?query`` or "") of a URI."""
    base, sep, query = location.partition("?")
    return base, sep + query


def join(location: str | Path, *parts: str) -> str:
    """A location below another: a path joined on disk, or a URI joined before its query."""
    loc = str(location)
    parts = tuple(p.strip("/") for p in parts if p)
    if not is_uri(loc):
        return str(Path(loc, *parts))
    base, query = split_query(loc)
    return "/".join([base.rstrip("/"), *parts]) + query


def default_root() -> str:
    """The results root: ``$REUSE_RAY_RESULTS``, else ``~/reuse_ray_results``."""
    env = os.environ.get(ROOT_ENV, "").strip()
    if env:
        return env if is_uri(env) else str(user_path(env, f"${ROOT_ENV}").absolute())
    return str(user_path(DEFAULT_ROOT, "the default results root"))


def anchored(location: str | Path | None) -> tuple[str, bool]:
    """(absolute location, whether it was relative) of a config or sweep file's results_dir:
    URIs and absolute paths as given, relative ones (and "") below :func:`default_root`."""
    loc = str(location or "")
    if is_uri(loc):
        return loc, False
    p = user_path(loc, "results_dir")
    if p.is_absolute():
        return str(p), False
    return join(default_root(), loc) if loc else default_root(), True


def from_command_line(location: str) -> str:
    """A ``--results`` value: a URI as given, a path made absolute against the shell's cwd."""
    return location if is_uri(location) else str(user_path(location, "--results").absolute())


# the mark of a compacted copy (module ``results.compact``): where from, when; for reading only
COMPACTED_FILE = "compacted.json"


def display(location: str | Path) -> str:
    """The location as a user should see it: a URI as given, a path absolute."""
    loc = str(location)
    return loc if is_uri(loc) else str(Path(loc).expanduser().absolute())


@dataclass(frozen=True)
class Storage:
    """A results location opened: its filesystem and the root path inside it."""

    fs: pafs.FileSystem
    root: str
    location: str

    @classmethod
    def of(cls, location: str | Path) -> Storage:
        loc = str(location)
        if is_uri(loc):
            try:
                fs, root = pafs.FileSystem.from_uri(loc)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as err:
                raise UserError(
                    f"results location {loc!r}: {err} — allowed: a local path or a "
                    "file://, s3://, gs:// or hdfs:// URI"
                ) from None
            return cls(fs, root.rstrip("/") or root, loc)
        root = str(user_path(loc, "results location").absolute())
        return cls(pafs.LocalFileSystem(), root, loc)

    @property
    def renames(self) -> bool:
        """Whether a move is an atomic rename here (else files are written once)."""
        return self.fs.type_name in RENAMING

    @property
    def local_path(self) -> Path | None:
        """The root as a local folder, or None on a remote filesystem."""
        return Path(self.root) if self.fs.type_name == "local" else None

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *(p.strip("/") for p in parts if p)])

    def info(self, *parts: str) -> pafs.FileInfo:
        return self.fs.get_file_info(self.path(*parts))

    def is_file(self, *parts: str) -> bool:
        return self.info(*parts).type == pafs.FileType.File

    def is_dir(self, *parts: str) -> bool:
        return self.info(*parts).type == pafs.FileType.Directory

    def listdir(self, *parts: str) -> list[pafs.FileInfo]:
        """The entries directly below a folder (none when it does not exist)."""
        sel = pafs.FileSelector(self.path(*parts), allow_not_found=True, recursive=False)
        return self.fs.get_file_info(sel)

    def _mkdirs(self, path: str) -> None:
        if self.fs.type_name in RENAMING:  # object stores have no folders to make
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)

    def write_parquet(self, rel: str, table: pa.Table, **options) -> None:
        """Write a Parquet file so that no reader ever sees half of it (see the module doc);
        ``options`` go to ``pyarrow.parquet.write_table`` (e.g. its compression)."""
        self._write(rel, lambda out: pq.write_table(table, out, **options))

    def write_bytes(self, rel: str, data: bytes) -> None:
        self._write(rel, lambda out: out.write(data))

    def _write(self, rel: str, fill) -> None:
        """Write then rename (or write once where renaming is not atomic). A full or read-only
        disk is one line naming the file: what was written before stays as it was."""
        try:
            self._write_whole(rel, fill)
        except OSError as err:
            if err.errno not in FULL_OR_READ_ONLY:
                raise
            why = os.strerror(err.errno)
            raise UserError(
                f"results: cannot write {display(self.path(rel))} ({why}) — the "
                f"rows written before it are kept; free space on that filesystem "
                f"(or give another --results) and run again"
            ) from None

    def _write_whole(self, rel: str, fill) -> None:
        final = self.path(rel)
        self._mkdirs(final)
        if not self.renames:
            with self.fs.open_output_stream(final) as out:
                fill(out)
            return
        head, _, name = final.rpartition("/")
        tmp = f"{head}/.{name}.{os.getpid()}.tmp"
        try:
            with self.fs.open_output_stream(tmp) as out:
                fill(out)
            self.fs.move(tmp, final)
        finally:
            if self.fs.get_file_info(tmp).type == pafs.FileType.File:
                self.fs.delete_file(tmp)

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.path(rel)) as fh:
            return fh.read()

    def delete(self, rel: str) -> None:
        if self.is_file(rel):
            self.fs.delete_file(self.path(rel))

    def delete_dir(self, *parts: str) -> None:
        """A folder and everything below it (Tune's spent checkpoints, never a result)."""
        if self.is_dir(*parts):
            self.fs.delete_dir(self.path(*parts))

    def check_writable(self, what: str = "results_dir", keep: bool = False) -> None:
        """Write and remove a hidden probe file: one line naming the location when it fails.
        Folders the probe had to create are removed again (unless ``keep``: a sweep's dated
        folder, claimed once its cluster answers), so a run that stops before it starts (a
        cluster that does not answer) leaves no empty results folder behind."""
        if self.is_file(COMPACTED_FILE):
            raise UserError(
                f"{what}: {display(self.location)} is a compacted copy for reading (reuse-ray "
                "compact); nothing is written into it — run, --resume or --final on the "
                "folder it was copied from, or give another --results"
            )
        probe = f".write-check-{os.getpid()}"
        local = self.local_path
        missing: list[Path] = []
        if local is not None and not keep:
            folder = Path(local)
            while not folder.exists() and folder != folder.parent:
                missing.append(folder)
                folder = folder.parent
        try:
            self.write_bytes(probe, b"")
            self.delete(probe)
        except (OSError, pa.ArrowException) as err:
            msg = getattr(err, "strerror", None) or str(err).splitlines()[0]
            raise UserError(
                f"{what}: cannot write to {self.location!r} ({msg}) — give a "
                "writable folder or bucket (--results); S3 credentials come from "
                "the AWS_* variables"
            ) from None
        finally:
            for folder in missing:  # deepest first; only the empty ones this probe made
                try:
                    folder.rmdir()
                except OSError:
                    break


STAMP = re.compile(r"^\d{8}-\d{6}(-\d+)?$")


def dated_folder(base: str) -> str:
    """A fresh folder ``base/YYYYMMDD-HHMMSS`` (UTC; ``-2``, ``-3``… if that one exists)."""
    store = Storage.of(base)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    name, k = stamp, 1
    while store.info(name).type != pafs.FileType.NotFound:
        k += 1
        name = f"{stamp}-{k}"
    return join(base, name)


def latest_dated(base: str) -> str | None:
    """The newest dated folder below ``base``, or None."""
    names = [
        Path(i.path).name for i in Storage.of(base).listdir() if i.type == pafs.FileType.Directory
    ]
    dated = sorted((n for n in names if STAMP.match(n)), key=_stamp_key)
    return join(base, dated[-1]) if dated else None


def _stamp_key(name: str) -> tuple[str, int]:
    return name[:15], int(name[16:] or 1)


__all__ = [
    "ROOT_ENV",
    "Storage",
    "anchored",
    "dated_folder",
    "default_root",
    "display",
    "from_command_line",
    "is_uri",
    "join",
    "latest_dated",
]
