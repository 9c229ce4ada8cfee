"""The round loop and the backends it runs on (ALGORITHMS.md §1.5); no Ray imports here.

The run loop (``run_fl`` and its helpers) is imported on first use: a client-worker process
needs the records, the worker and the server core, not the Parquet writer (pyarrow, pandas)."""

from .backend import Backend
from .local import LocalBackend
from .records import ClientError, ClientOutcome, RoundReport, RunSetup
from .round import play_round
from .sampling import select_clients, uniform_selection
from .server import ServerCore
from .worker import ClientWorker

_LOOP = ("RunHooks", "RunSummary", "make_backend", "make_setup", "prepare_data", "run_fl")


def __getattr__(name: str):
    if name in _LOOP:
        from . import loop

        return getattr(loop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Backend",
    "ClientError",
    "ClientOutcome",
    "ClientWorker",
    "LocalBackend",
    "RoundReport",
    "RunHooks",
    "RunSetup",
    "RunSummary",
    "ServerCore",
    "make_backend",
    "make_setup",
    "play_round",
    "prepare_data",
    "run_fl",
    "select_clients",
    "uniform_selection",
]
