"""The round loop and the backends it runs on (design: Runs); no Ray imports here.

Every name is imported on first use (see ``_WHERE``)."""

# every name is imported on first use: a client-worker process needs the records, the worker
# and the server core, not the Parquet writer (pyarrow, pandas); the driver of the Ray engine
# needs the loop and the records, not the local backend (torch)
_WHERE = {
    "Backend": "backend",
    "BackendBase": "backend",
    "LocalBackend": "local",
    "ServerCore": "server",
    "ClientWorker": "worker",
    "play_round": "round",
    "select_clients": "sampling",
    "uniform_selection": "sampling",
    "ClientError": "records",
    "ClientOutcome": "records",
    "RoundReport": "records",
    "RunSetup": "records",
    "make_setup": "setup",
    "Run": "run",
    "RunHooks": "run",
    "RunSummary": "run",
    "prepare_data": "run_parts",
    "play_run": "run",
}


def __getattr__(name: str):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Backend",
    "BackendBase",
    "ClientError",
    "ClientOutcome",
    "ClientWorker",
    "LocalBackend",
    "RoundReport",
    "Run",
    "RunHooks",
    "RunSetup",
    "RunSummary",
    "ServerCore",
    "make_setup",
    "play_round",
    "prepare_data",
    "play_run",
    "select_clients",
    "uniform_selection",
]
