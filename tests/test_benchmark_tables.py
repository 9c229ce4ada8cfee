"""The engine benchmark's tables: process roles, the memory row, the start-up CPU (no timing)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import engine_overhead as E  # noqa: E402


def test_process_names_and_roles():
    assert E._label(b"ray::ClientWorkerActor\0") == "ray::ClientWorkerActor"
    assert E._label(b"ray::DashboardAgent extra\0") == "ray::DashboardAgent"
    assert (
        E._label(b"/usr/bin/python\0-u\0/x/ray/autoscaler/_private/monitor.py\0--a\0")
        == "monitor.py"
    )
    assert E._label(b"/x/ray/core/src/ray/gcs/gcs_server\0--log_dir=/tmp\0") == "gcs_server"
    assert E._label(b"") == "?"
    assert (
        E._label(b"/usr/bin/python\0-m\0ray.util.client.server\0--port=1\0")
        == "ray.util.client.server"
    )
    assert E._role(7, 7, b"python") == "driver"
    assert E._role(8, 7, b"ray::ClientWorkerActor.validate") == "worker"
    assert E._role(9, 7, b"ray::ServerActor") == "server"
    assert E._role(9, 7, b"ray::ServingWorkerActor.step") == "worker"  # hosts the server
    assert E._role(10, 7, b"ray::RuntimeEnvAgent") == "ray"


def test_the_memory_row_sums_by_role_and_names_the_largest_others():
    gb, mb = 10**9, 10**6
    at_peak = {
        1: ("driver", "python", gb // 2, 4 * gb // 10),
        2: ("worker", "ray::ClientWorkerActor", 6 * gb // 10, 45 * gb // 100),
        3: ("worker", "ray::ClientWorkerActor", 5 * gb // 10, 44 * gb // 100),
        4: ("server", "ray::ServerActor", 49 * gb // 100, 4 * gb // 10),
        5: ("ray", "gcs_server", 45 * mb, 28 * mb),
        6: ("ray", "ray::DashboardAgent", 90 * mb, 75 * mb),
    }
    row = E.memory_line("ray", at_peak)
    assert row == (
        "  | ray | 0.50 (0.40) | 0.60 (0.45) + 0.50 (0.44) | 0.49 (0.40) | "
        "0.14 (0.10): ray::DashboardAgent 90, gcs_server 45 MB | 2.23 |"
    )
    assert (
        E.memory_line("plain-2t", {1: ("driver", "python", gb, gb // 2)})
        == "  | plain-2t | 1.00 (0.50) | – | – | – | 1.00 |"
    )
    assert E.memory_line("flower", {}) == "  | flower | – | – | – | – | – |"


def test_startup_cpu_sums_every_process_and_its_reaped_children_before_round_one():
    # (time, {pid: (role, user s, kernel s, minor faults, reaped children's s)})
    samples = [
        (0.5, {1: ("driver", 0.4, 0.1, 10, 0.0)}),
        (3.0, {1: ("driver", 2.0, 0.5, 10, 0.0), 2: ("ray", 1.0, 0.2, 0, 0.0)}),
        # a helper of 2 has exited and been reaped: its 0.7 s are 2's reaped time
        (
            6.0,
            {
                1: ("driver", 2.5, 0.5, 10, 0.0),
                2: ("ray", 1.5, 0.3, 0, 0.7),
                3: ("worker", 1.8, 0.2, 5, 0.0),
                4: ("worker", 1.6, 0.2, 5, 0.0),
                5: ("ray", 0.6, 0.1, 0, 0.0),
            },
        ),
        # the loader task (5) exited unreaped (the raylet ignores SIGCHLD): counted as last seen
        (
            6.5,
            {
                1: ("driver", 2.5, 0.5, 10, 0.0),
                2: ("ray", 1.5, 0.3, 0, 0.7),
                3: ("worker", 1.8, 0.2, 5, 0.0),
                4: ("worker", 1.6, 0.2, 5, 0.0),
            },
        ),
        (9.0, {1: ("driver", 9.0, 0.5, 10, 0.0)}),  # after round 1 began: not counted
    ]
    cpu = E.startup_cpu(samples, start1=7.0)
    assert cpu == pytest.approx({"driver": 3.0, "ray": 3.2, "worker": 3.8})
    assert E.startup_cpu(samples, start1=0.1) == {}
    cores = os.cpu_count() or 1
    assert E.startup_line("ray", 8.6, cpu) == (
        f"  | ray | 8.6 | 3.0 | 3.8 | – | 3.2 | 10.0 | {10.0 / cores:.1f} |"
    )
    assert E.startup_line("flower", 15.0, {}) == "  | flower | 15.0 | – | – | – | – | – | – |"
    # the window of rounds 2–5 reads the same 5-field samples
    window = E.cpu_window(samples, 3.0, 6.0)
    assert window["cores"]["driver"] == [pytest.approx(0.5 / 3)]


def test_an_attached_arm_counts_its_clusters_processes_from_the_launch_on():
    # the cluster's raylet (2) ran before the launch: only what it spent after counts; the
    # worker (3) started after the launch, under the cluster, so all of it counts
    base = {2: ("ray", 4.0, 1.0, 0, 0.5), 9: ("driver", 1.0, 0.0, 0, 0.0)}
    samples = [
        (
            5.0,
            {
                1: ("driver", 1.0, 0.2, 0, 0.0),
                2: ("ray", 4.5, 1.1, 0, 0.5),
                3: ("worker", 2.0, 0.3, 0, 0.0),
            },
        )
    ]
    cpu = E.startup_cpu(samples, start1=6.0, base=base)
    assert cpu == pytest.approx({"driver": 1.2, "ray": 0.6, "worker": 2.3})
    assert E.startup_cpu(samples, start1=6.0)["ray"] == pytest.approx(6.1)


def test_the_tree_takes_the_clusters_descendants_but_not_its_starter(monkeypatch):
    # 1 the arm (child 2); 10 `ray start` (children 11, 12; 12's child 13)
    import proctree

    kids = {1: [2], 10: [11, 12], 12: [13]}
    monkeypatch.setattr(proctree, "children", lambda: kids)
    assert sorted(proctree.tree(1)) == [1, 2]
    assert sorted(proctree.tree(1, 10)) == [1, 2, 11, 12, 13]
