"""Golden digests: every method's short run reproduces its recorded Parquet metrics bit for bit
on the local backend (tests/golden/cases.py; the Ray backend in tests/distributed)."""

from __future__ import annotations

import pytest
from golden.cases import CASES, expected, run_case


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_local(name, tmp_path):
    assert run_case(name, tmp_path / name, "local") == expected()[name]
