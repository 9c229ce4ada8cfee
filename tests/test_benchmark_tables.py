"""The engine benchmark's memory table: process names and the row it prints (no timing)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import engine_overhead as E  # noqa: E402


def test_process_names_and_roles():
    assert E._label(b"ray::ClientWorkerActor\0") == "ray::ClientWorkerActor"
    assert E._label(b"ray::DashboardAgent extra\0") == "ray::DashboardAgent"
    assert E._label(b"/usr/bin/python\0-u\0/x/ray/autoscaler/_private/monitor.py\0--a\0") == \
        "monitor.py"  # fmt: skip
    assert E._label(b"/x/ray/core/src/ray/gcs/gcs_server\0--log_dir=/tmp\0") == "gcs_server"
    assert E._label(b"") == "?"
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
    assert row == ("  | ray | 0.50 (0.40) | 0.60 (0.45) + 0.50 (0.44) | 0.49 (0.40) | "
                   "0.14 (0.10): ray::DashboardAgent 90, gcs_server 45 MB | 2.23 |")  # fmt: skip
    assert E.memory_line("plain-2t", {1: ("driver", "python", gb, gb // 2)}) == \
        "  | plain-2t | 1.00 (0.50) | – | – | – | 1.00 |"  # fmt: skip
    assert E.memory_line("flower", {}) == "  | flower | – | – | – | – | – |"
