"""The server survives its actor: snapshots it after every round (``engine.server_snapshot_every``)
as objects the driver owns, and on a lost server starts a new one from the last snapshot and
replays the rounds since. Every draw is keyed and client work is recomputed bit for bit, so a
recovered run's numbers are those of an undisturbed one."""

from __future__ import annotations

import ray

from .actors import ServerActor
from .proxy import _server_gone

SERVER_RESTARTS = 3  # server actor deaths survived in one call before the run fails


class ServerRecovery:
    """The Ray backend's recovery, as a mixin: it uses the backend's ``server`` handle, its
    ``_setup_box`` (the setup's object), ``hosted``, ``cfg``, ``_named`` and ``_play``."""

    restarts = 0
    _snap_ref = None
    _snap_round = 0

    def _take_snapshot(self, t: int, selected: list[int] | None = None) -> None:
        """Keep the server's state after round t as an object the driver owns, so it outlives
        the server actor; the rounds played since are replayed after a restart. A server that
        dies before the snapshot is taken leaves the last good one in place (and round t joins
        the rounds to replay)."""
        snap_ref, ok_ref = self.server.snapshot_checked.remote()
        try:
            ray.get(ok_ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
            if self._snap_ref is None or not _server_gone(err):
                raise  # another failure, or no earlier snapshot to fall back on
            self._since.append((t, selected or []))
            return
        self._snap_ref = snap_ref
        self._snap_round = t
        self._since: list[tuple[int, list[int]]] = []

    def _recover(self) -> None:
        """A new server from the last snapshot, then the rounds since, replayed: every draw
        is keyed and client work is recomputed bit for bit, so nothing changes. A server of
        its own is a new actor; one hosted by worker 0 is rebuilt in the process Ray
        restarted that worker in (its calls wait there until the restart is done)."""
        self.restarts += 1
        if self.hosted:
            ray.get(self.server.load_server.remote(self._setup_box[0]))
        else:
            try:
                ray.kill(self.server, no_restart=True)
            except Exception:  # noqa: BLE001 - it is already gone
                pass
            self.server = ServerActor.options(**self._named(f"server-{self.restarts}")).remote(
                self._setup_box[0]
            )
        ray.get(self.server.restore.remote(self._snap_ref))
        for t, selected in self._since:
            self._play(t, selected)

    def _survive(self, call):
        """``call()``, restarting the server from its snapshot when its actor died (or the
        worker hosting it restarted without it)."""
        every = self.cfg.engine.server_snapshot_every
        for attempt in range(SERVER_RESTARTS + 1):
            try:
                return call()
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
                if (
                    not _server_gone(err)
                    or every <= 0
                    or attempt == SERVER_RESTARTS
                    or not self._server_dead()
                ):
                    raise
                self._recover()
        raise AssertionError("unreachable")  # pragma: no cover

    def _server_dead(self) -> bool:
        """Whether the server's state is gone: its actor does not answer, or (hosted by a
        worker) the worker's restarted process holds none."""
        try:
            return not ray.get(self.server.has_server.remote(), timeout=30)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return True
