"""Golden digests on the Ray backend: the same Parquet metrics as the recorded local runs."""

from __future__ import annotations

import pytest
import ray
from golden.cases import CASES, expected_or_skip, run_case

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


# the cases that exercise every wire path: client-local state (Fed-EF e_i, SCAFFOLD c_i, LAQ's
# clock), probes and reuse (DG), outside-S_t work (FedSteer's oracle, MIFA's fill), lazy skips
RAY_CASES = ("fed_ef", "dg_proxy", "laq", "mifa_wait", "scaffold", "fedsteer_fidelity")


def test_golden_ray(tmp_path):
    assert set(RAY_CASES) <= set(CASES)
    want = expected_or_skip(RAY_CASES)
    digests = {name: run_case(name, tmp_path / name, "ray") for name in RAY_CASES}
    assert digests == want
