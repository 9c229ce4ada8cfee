"""The round loop and the backends it runs on (ALGORITHMS.md §1.5); no Ray imports here."""

from .backend import Backend, ClientError, ClientOutcome, ClientWorker, RunSetup
from .local import LocalBackend
from .loop import RunHooks, RunSummary, make_backend, prepare_data, run_fl
from .sampling import select_clients, uniform_selection

__all__ = [
    "Backend",
    "ClientError",
    "ClientOutcome",
    "ClientWorker",
    "LocalBackend",
    "RunHooks",
    "RunSetup",
    "make_backend",
    "RunSummary",
    "prepare_data",
    "run_fl",
    "select_clients",
    "uniform_selection",
]
