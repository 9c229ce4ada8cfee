"""A Ray instance the tool starts listens on 127.0.0.1 only (gcs, raylet, agents, workers)."""

from __future__ import annotations

import ipaddress
import os
import signal
import time

import pytest
import ray

from reuse_ray.distributed.backend import ensure_ray

pytestmark = pytest.mark.ray


def _descendants(root: int) -> dict[int, str]:
    """{pid: name} of every process below ``root`` (from /proc)."""
    parent, names = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        names[int(entry)] = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    out, frontier = {}, {root}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in out}
        out.update({p: names[p] for p in frontier})
    return out


def _listening() -> dict[int, str]:
    """{socket inode: local ip} of every listening TCP socket on this machine."""
    out = {}
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] != "0A":  # TCP_LISTEN
                    continue
                raw = bytes.fromhex(cols[1].split(":")[0])
                # the kernel prints each 32-bit word in host (little-endian) order
                ip = b"".join(raw[i : i + 4][::-1] for i in range(0, size, 4))
                out[int(cols[9])] = str(ipaddress.ip_address(ip))
    return out


def _is_loopback(ip: str) -> bool:
    a = ipaddress.ip_address(ip)
    return (getattr(a, "ipv4_mapped", None) or a).is_loopback


def test_a_local_ray_started_by_the_tool_listens_on_loopback_only():
    assert not ray.is_initialized()
    got: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, _frame: got.append(signum))
    ensure_ray(num_cpus=1)
    try:
        # ray.init's own SIGTERM handler (a stack dump, then exit) did not replace this
        # process's Python one (the CLI's: SIGTERM ends a command as Ctrl-C does)
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):
            if got:
                break
            time.sleep(0.01)
        assert got == [signal.SIGTERM]
        assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1"]

        @ray.remote
        def pid() -> int:
            return os.getpid()

        worker = ray.get(pid.remote())
        ours = _descendants(os.getpid())
        assert worker in ours
        sockets = _listening()
        seen = []
        for p, name in ours.items():
            try:
                fds = os.listdir(f"/proc/{p}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    link = os.readlink(f"/proc/{p}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:[") and int(link[8:-1]) in sockets:
                    seen.append((name, sockets[int(link[8:-1])]))
        assert {"gcs_server", "raylet"} <= {name for name, _ in seen}  # the servers were seen
        assert [x for x in seen if not _is_loopback(x[1])] == []
        # the switch is not left behind for Ray instances started later by this process
        assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ
    finally:
        ray.shutdown()
        signal.signal(signal.SIGTERM, before)
