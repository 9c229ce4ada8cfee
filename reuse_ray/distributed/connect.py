"""Connecting to Ray: a cluster's address (probed first, so a wrong one is one line, not a hang),
or a new local instance that listens on 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading

import ray

from ..config import RunConfig, ray_address_problem
from ..errors import UserError

CONNECT_TIMEOUT_S = 30.0  # $REUSE_RAY_CONNECT_TIMEOUT overrides it

CONNECT_HINT = (
    "check the address (engine.ray_address, --address or RAY_ADDRESS) and that the head node "
    "runs (`ray start --head`); with token authentication set RAY_AUTH_MODE=token and give the "
    "cluster's token (~/.ray/auth_token or RAY_AUTH_TOKEN)"
)


def _probe(address: str, timeout: float) -> None:
    """Fail fast, with one line, when nothing listens at host:port."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit():
        return  # a Ray Client address without its port: let Ray judge it
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise UserError(
            f"cannot reach a Ray cluster at {address} within {timeout:g} s "
            f"({err.strerror or err}) — {CONNECT_HINT}"
        ) from None


@contextlib.contextmanager
def loopback_only():
    """While inside, a Ray instance this process starts listens on 127.0.0.1 only.

    On Linux Ray gives a new local node its outward address (``_node_ip_address="127.0.0.1"``
    is rewritten to it) and its gRPC servers (GCS, raylet, workers) listen on every interface.
    Ray's single-machine mode — the one it uses on macOS and Windows — names the node
    127.0.0.1 and binds every server (GCS, raylet, agents, workers) there; it is switched by
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``, read by ``ray_constants`` at import and inherited by
    the processes Ray starts (so it is set only while they are started). Only for an instance
    started here: a cluster the user connects to keeps its own addresses."""
    # the one private import left, for want of a public switch: Ray reads its single-machine
    # mode from ray_constants at import, so only this attribute sets it for a later ray.init
    from ray._private import ray_constants

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    before_env, before = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[name] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before
        if before_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before_env


TOKEN_REFUSED = ("InvalidAuthToken", "Authentication token is missing or incorrect")


@contextlib.contextmanager
def _stderr_held(held: list[str]):
    """While inside, what this process (Ray's C++ core included) writes to its stderr goes to a
    file, read into ``held`` at the end: a cluster that refuses the token answers each of
    Ray's retries with a warning line, about twenty before it gives up."""
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            held.append(f.read().decode(errors="replace"))


def _refused(address: str, why: str) -> UserError:
    return UserError(
        f"Ray at {address} refused this process's token ({why}) — give the cluster's own token: "
        "RAY_AUTH_TOKEN, or the file ~/.ray/auth_token copied from the head node "
        "(`ray get-auth-token` prints it there), with RAY_AUTH_MODE=token"
    )


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to ``address`` (or $RAY_ADDRESS), else start a local Ray; no-op if connected.

    An unreachable address or a refused token is one clear line within a bounded time
    ($REUSE_RAY_CONNECT_TIMEOUT, default 30 s), never a hang."""
    if ray.is_initialized():
        return
    if not address and (env := os.environ.get("RAY_ADDRESS")):
        if problem := ray_address_problem(env):
            raise UserError(f"RAY_ADDRESS={problem}")
        address = env
    address = address or None
    kwargs: dict = {"include_dashboard": False} if address is None else {}
    if address is None and num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    if address not in (None, "auto", "local"):
        _probe(address, float(os.environ.get("REUSE_RAY_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S)))
    # ray.init installs Ray's own SIGTERM handler (it prints a stack and exits 1), replacing a
    # Python one this process set (the CLI's: SIGTERM ends a command as Ctrl-C does); that one
    # is put back after it
    term = signal.getsignal(signal.SIGTERM)
    held: list[str] = []  # Ray's stderr while joining a cluster: shown unless it refused us
    try:
        with loopback_only() if address is None else _stderr_held(held):
            # no address: a new local instance, as documented — not Ray's default of joining
            # the latest `ray start` instance on this machine (that is address "auto")
            ray.init(address=address or "local", log_to_driver=True, **kwargs)
        if callable(term) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, term)
    except ray.exceptions.AuthenticationError as err:
        held[:] = []  # refused: one line says so, not Ray's
        text = (getattr(err, "message", "") or str(err)).strip().splitlines()
        raise _refused(address or "a new local instance", text[0][:160] if text else "") from None
    except (ConnectionError, RuntimeError) as err:
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        said = "".join(held)
        if address is not None and any(k in said for k in TOKEN_REFUSED):
            held[:] = []
            raise _refused(address, "Authentication token is missing or incorrect") from None
        if address is None and not any(k in text.lower() for k in ("auth", "token")):
            raise
        raise UserError(
            f"cannot connect to Ray at {address or 'a new local instance'} "
            f"({text[:200]}) — {CONNECT_HINT}"
        ) from None
    finally:
        if held:
            os.write(2, held[0].encode())  # joined (or failed otherwise): Ray's lines as they were


def resolve_device(cfg: RunConfig, resources: dict[str, float]) -> str:
    if cfg.engine.device == "auto":
        return "cuda" if resources.get("GPU", 0.0) > 0 else "cpu"
    return cfg.engine.device
