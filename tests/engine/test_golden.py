"""Golden digests: every method's short run reproduces its recorded Parquet metrics bit for bit
on the local backend (tests/golden/cases.py; the Ray backend in tests/distributed). The digests
are this machine's record (a machine without one skips, saying so)."""

from __future__ import annotations

import pytest
from golden.cases import CASES, expected_or_skip, run_case


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_local(name, tmp_path):
    want = expected_or_skip([name])[name]
    assert run_case(name, tmp_path / name, "local") == want


def test_records_are_per_machine_and_a_numeric_change_drops_the_others(tmp_path, monkeypatch):
    import json

    from golden import cases

    here = cases.machine()
    other = {"cpu": "SomeVendor Other CPU"}
    path = tmp_path / "digests.json"
    path.write_text(json.dumps({"machines": [{"machine": other, "digests": {"a": "1"}}]}))
    monkeypatch.setattr(cases, "DIGESTS", path)
    assert cases.expected() is None  # another machine's record is not this one's
    cases.write({"a": "2"})  # a new machine: the other record stays
    assert cases.expected() == {"a": "2"}
    assert [r["machine"] for r in cases._records()] == [other, here]
    cases.write({"a": "2", "b": "3"})  # a new case, no digest changed: still kept
    assert len(cases._records()) == 2
    cases.write({"a": "4", "b": "3"})  # a changed digest: the other machine's is stale
    assert [r["machine"] for r in cases._records()] == [here]
    assert cases._matches({"machine": {"cpu": here["cpu"]}}, here)  # a record naming fewer fields
