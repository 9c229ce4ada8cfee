"""benchmarks/gpu_throughput.py's dry run on the CPU: two trials sharing the CPUs a trial had
alone give every trial the same bits as running alone; the vectorized and graphed steps' updates
stay within the vectorized tolerance of the per-client loop's. Nothing here is timed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _dry_run(options: str) -> subprocess.CompletedProcess:
    """gpu_throughput.py on the CPU with ``options``."""
    command = [sys.executable, "benchmarks/gpu_throughput.py", "--device", "cpu"]
    return subprocess.run(
        command + options.split(), cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_packed_trials_are_bit_identical_to_trials_run_alone():
    out = _dry_run("--per-device 1,2 --trials 2 --rounds 2 --parts packing")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| ")]
    assert len(rows) == 3, out.stdout  # the header and one row per packing
    for row in rows[1:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "2" and cells[5] == "2 of 2", row  # both finished, both identical


def test_the_vectorized_part_reports_every_arm_within_tolerance():
    out = _dry_run("--parts vector --vector-clients 4 --vector-rounds 1 --vector-samples 2000")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| ")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows[1:]]
    assert [c[1] for c in cells] == ["loop", "vector", "graphed"], out.stdout
    for c in cells[1:]:
        assert float(c[5]) < 1e-4, c  # relative L2 from the loop's update
