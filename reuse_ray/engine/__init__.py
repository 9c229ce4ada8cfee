"""The round loop and the backends it runs on (ALGORITHMS.md §1.5); no Ray imports here."""

from .backend import Backend
from .local import LocalBackend
from .loop import RunHooks, RunSummary, make_backend, make_setup, prepare_data, run_fl
from .records import ClientError, ClientOutcome, RoundReport, RunSetup
from .round import play_round
from .sampling import select_clients, uniform_selection
from .server import ServerCore
from .worker import ClientWorker

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
