"""DG-FedReuse (methods: DG-FedReuse): its unit tests and the issue's guarantees."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_layout, method_env, received, small_config

from reuse_ray.accounting import restricted_bytes_of
from reuse_ray.algorithms import FRESH, REUSED, ClientTable, RoundPlan
from reuse_ray.algorithms.dg_fedreuse import (
    DGConfig,
    DGFedReuse,
    DGState,
    decay_factor,
    gate_distance,
    preliminary_active,
    promote,
    quota_count,
    tau_schedule,
)
from reuse_ray.algorithms.uplink import TopK
from reuse_ray.codecs import SparseUpdate, pack, restricted_update_bytes, topk_sparsify
from reuse_ray.results import read_table
from reuse_ray.runner import run_fl
from reuse_ray.state import StateLayout

PAPER = DGConfig()
RHO = PAPER.rho


def test_tau_schedule_values():
    tau = lambda t, kind="geometric": tau_schedule(t, PAPER.tau0, PAPER.tau_min, 0.01, kind)  # noqa: E731
    for t, v in [
        (1, 0.9116988),
        (2, 0.9025818),
        (5, 0.8757742),
        (10, 0.8328526),
        (12, 0.8162788),
        (13, 0.8134931),
        (90, 0.8134931),
    ]:
        assert tau(t) == pytest.approx(v, abs=5e-8)
    assert tau(10, "linear") > PAPER.tau_min and tau(11, "linear") == PAPER.tau_min
    assert tau(90, "exponential") == pytest.approx(0.8538218, abs=5e-8)
    factors = [decay_factor(RHO, a) for a in (1, 2, 3)]
    assert factors == pytest.approx([0.727964, 0.529931, 0.385770], abs=1e-6)
    assert decay_factor(RHO, 3, "constant") == RHO
    assert decay_factor(RHO, 1, "power_minus_one") == 1.0


def test_gate_distance_rules():
    h = torch.tensor([1.0, 2.0, -0.5])
    assert gate_distance(h, h) == pytest.approx(0.0, abs=1e-12)
    assert gate_distance(-h, h) == 1.0  # 1 − (−1) = 2, clipped to 1
    assert gate_distance(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 3.0])) == 1.0
    assert gate_distance(torch.zeros(3), h) == 1.0 and gate_distance(h, torch.zeros(3)) == 1.0
    assert gate_distance(-h, h, "half_cosine") == 1.0
    assert gate_distance(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 3.0]), "half_cosine") == 0.5


def test_age_cap_forces_a_fresh_round():
    # fresh at t = 5, selected at t = 9: a = 4 = S ⇒ active even with D = 0
    assert preliminary_active([7], {7: 0.0}, {7: 9 - 5}, tau=0.9, max_age=4) == [7]
    assert preliminary_active([7], {7: 0.0}, {7: 3}, tau=0.9, max_age=4) == []
    assert preliminary_active([7], {7: 1.0}, {7: None}, tau=0.9, max_age=4) == [7]  # cacheless


def test_quota_promotes_the_largest_distances_ties_to_lower_id():
    sel = list(range(10))
    scores = {i: 0.05 * i for i in sel}  # all below τ
    active = preliminary_active(sel, scores, {i: 1 for i in sel}, tau=0.8, max_age=4)
    assert active == []
    need = quota_count(0.30, 10) - len(active)
    assert need == 3 and promote(sel, active, scores, need) == [9, 8, 7]
    tied = {0: 0.5, 1: 0.2, 2: 0.5, 3: 0.1}
    assert promote([0, 1, 2, 3], [], tied, 1) == [0]
    assert promote([0, 1, 2, 3], [], tied, 2) == [0, 2]
    assert quota_count(0.3, 7) == 3 and quota_count(0.1, 10) == 1


def test_two_client_aggregate_fresh_plus_reused():
    layout = make_layout(1)
    algo = DGFedReuse(PAPER, method_env(layout), TopK(1.0))
    one = SparseUpdate(1, None, torch.tensor([1.0]))
    packed = pack(one, layout)
    state = DGState(ClientTable.from_values({1: packed}), {1: 4}, {})
    plan = RoundPlan((), {0: FRESH, 1: REUSED})
    res = algo.server_step(
        state, 5, torch.zeros(1), plan, {0: received(0, (one, None), 100)}, {0: 100, 1: 300}
    )
    assert res.w.item() == pytest.approx((100 + 300 * RHO) / 400, rel=1e-6)
    assert res.weights == {0: 0.25, 1: 0.75}
    assert res.state.last_fresh == {0: 5, 1: 4}  # reuse never updates r, cache or h
    assert res.state.cache[1] is state.cache[1]


def test_sparse_cache_holds_exactly_the_field_model_bytes():
    from reuse_ray.models import build_model

    layout = StateLayout.from_model(build_model("cnn", (1, 28, 28), 10))
    delta = torch.randn(layout.dim, generator=torch.Generator().manual_seed(0))
    upd = topk_sparsify(delta, layout, 0.2)
    packed = pack(upd, layout)
    assert packed.nbytes == restricted_bytes_of(upd, layout) == restricted_update_bytes(layout, 0.2)
    assert packed.nbytes < 0.24 * layout.dense_bytes
    assert isinstance(packed.payload, bytes)  # no tensor, let alone a dense-shaped one


@pytest.mark.slow  # an end-to-end run: the full suite keeps it
def test_ledger_of_a_round_with_7_fresh_and_3_reused(tmp_path):
    cfg = _dg(
        tmp_path,
        fl__rounds=20,
        fl__num_clients=10,
        fl__clients_per_round=10,
        method__dg__gate="random",
        method__dg__gate_prob=0.6,
    )
    run_fl(cfg)
    rounds = read_table(cfg.results_dir, "rounds").set_index("round")
    runs = read_table(cfg.results_dir, "runs").iloc[0]
    b0 = int(runs["dense_bytes"])
    per_fresh = int(rounds.loc[1, "up_restricted"]) // 10
    seen = rounds[(rounds.num_fresh == 7) & (rounds.num_reused == 3)]
    assert len(seen) > 0  # with this seed and gate, such rounds happen
    for _, r in seen.iterrows():
        assert r["up_restricted"] == 7 * per_fresh + 48
        assert r["down_sensitivity"] == 10 * b0
    # and every round obeys the same rule
    expect = rounds["num_fresh"] * per_fresh + 16 * rounds["num_reused"]
    assert (rounds["up_restricted"] == expect).all()


def _dg(tmp_path, **kw):
    base = {
        "method__name": "dg_fedreuse",
        "method__topk_ratio": 0.2,
        "fl__rounds": 8,
        "fl__eval_every": 4,
    }
    base.update(kw)
    return small_config(tmp_path, **base)


def test_paired_schedules_include_dg(tmp_path):
    scheds = {}
    for m in ("fedavg", "fedprox", "dg_fedreuse"):
        cfg = _dg(tmp_path, method__name=m, fl__rounds=5)
        run_fl(cfg)
    ev = read_table(tmp_path / "results", "client_events")
    for m in ("fedavg", "fedprox", "dg_fedreuse"):
        scheds[m] = (
            ev[ev.method == m]
            .sort_values(["round", "client_id"])[["round", "client_id"]]
            .to_numpy()
        )
    assert np.array_equal(scheds["fedavg"], scheds["dg_fedreuse"])
    assert np.array_equal(scheds["fedprox"], scheds["dg_fedreuse"])


@pytest.fixture(scope="module")
def dg_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dg")
    cfg = _dg(
        tmp,
        fl__rounds=14,
        fl__num_clients=10,
        fl__clients_per_round=6,
        method__dg__tau0=0.3,
        method__dg__tau_min=0.2,
        train__epochs=1,
    )
    summary = run_fl(cfg)
    return cfg, summary


@pytest.mark.xdist_group("dg_run")  # its module fixture built once
def test_dg_run_guarantees(dg_run):
    cfg, summary = dg_run
    assert summary.status == "finished"
    ev = read_table(cfg.results_dir, "client_events").sort_values(["round", "client_id"])
    per_round = ev.groupby("round")
    assert (per_round.apply(lambda g: (g.decision == "fresh").sum()) >= quota_count(0.3, 6)).all()
    reused = ev[ev.decision == "reused"]
    assert len(reused) > 0 and (ev.decision == "fresh").sum() > 0
    assert reused["age"].between(1, cfg.method.dg.max_age - 1).all()
    assert (reused["up_restricted"] == 16).all()
    fresh = ev[ev.decision == "fresh"].set_index(["client_id", "round"])["update_norm"]
    for _, r in reused.iterrows():
        cached = fresh.loc[(r.client_id, r["round"] - r.age)]
        assert r.update_norm <= RHO * cached * (1 + 1e-6)
        assert r.update_norm == pytest.approx(RHO**r.age * cached, rel=1e-5)
    # gate columns are filled: τ_t on every event, D on every gated (young cacheful) one
    assert ev["tau"].notna().all()
    young = ev[(ev.age.notna()) & (ev.age < cfg.method.dg.max_age)]
    assert young["gate_score"].between(0, 1).all() and young["gate_score"].notna().all()
    # reused events still download w_t and upload the gate proxy (measured ledger)
    assert (reused["down_measured"] > 0).all() and (reused["up_measured"] > 16).all()


@pytest.mark.xdist_group("dg_run")  # its module fixture built once
def test_cache_is_sparse_and_reported(dg_run):
    cfg, summary = dg_run
    runs = read_table(cfg.results_dir, "runs").iloc[0]
    ev = read_table(cfg.results_dir, "client_events")
    fresh = ev[ev.decision == "fresh"].sort_values("round").groupby("client_id").last()
    # the server holds, per client, its last fresh update at exactly its field-model size,
    # plus a head signature of 4 bytes per head value (fc: hidden → 10 classes)
    head = cfg.model.hidden * 10 + 10
    expect = int(fresh["up_restricted"].sum()) + len(fresh) * 4 * head
    assert int(runs["server_memory_bytes"]) == expect
    assert expect < 0.3 * len(fresh) * int(runs["dense_bytes"])


def test_gate_repeatability_same_stream_same_value_other_streams_spread():
    from reuse_ray.config import DataConfig
    from reuse_ray.data import load_dataset
    from reuse_ray.models import head_parameter_names, init_model
    from reuse_ray.rng import Purpose
    from reuse_ray.state import int_buffers
    from reuse_ray.training import head_proxy

    data = load_dataset(DataConfig(name="digits"))
    model = init_model("cnn", (1, 8, 8), 10, seed=0, hidden=16)
    layout = StateLayout.from_model(model)
    w = layout.flatten(model)
    heads = head_parameter_names(model)
    idx = np.arange(300)

    def proxy(round_, purpose=Purpose.PROXY_GATE):
        return head_proxy(
            model,
            layout,
            w,
            int_buffers(model),
            data.train,
            idx,
            data.info,
            heads,
            seed=3,
            round_=round_,
            client=1,
            purpose=purpose,
        )

    h = proxy(0, Purpose.PROXY_REFRESH)
    d1, d2 = gate_distance(proxy(1), h), gate_distance(proxy(1), h)
    assert d1 == d2  # same (w_t, client, stream) ⇒ same D
    spread = [gate_distance(proxy(r), h) for r in range(1, 9)]
    print(
        f"gate test-retest over 8 proxy_gate streams: D mean={np.mean(spread):.4f} "
        f"sd={np.std(spread):.4f} range=[{min(spread):.4f}, {max(spread):.4f}]"
    )
    assert np.std(spread) > 0 and all(0 <= d <= 1 for d in spread)
    assert torch.equal(layout.flatten(model), w)  # the proxy never touched the global state


@pytest.mark.slow
@pytest.mark.parametrize(("r", "lo", "hi"), [(0.2, 0.844, 0.864), (1.0, 0.35, 0.39)])
def test_structural_ceiling_gate_off_through_round_90(tmp_path, r, lo, hi):
    cfg = small_config(
        tmp_path,
        method__name="dg_fedreuse",
        method__topk_ratio=r,
        method__dg__gate="off",
        data__name="synthetic",
        data__synthetic_samples=1000,
        data__synthetic_shape=[1, 4, 4],
        model__hidden=8,
        fl__num_clients=50,
        fl__clients_per_round=10,
        fl__rounds=90,
        fl__eval_every=90,
        train__epochs=1,
        partition__min_size=8,
    )
    summary = run_fl(cfg)
    saving = summary.row["cum_saving_restricted"]
    print(f"gate off, r={r}: cumulative restricted saving through round 90 = {100 * saving:.2f}%")
    assert lo <= saving <= hi
    rounds = read_table(cfg.results_dir, "rounds")
    frac_fresh = rounds["num_fresh"].sum() / rounds["num_selected"].sum()
    assert 0.6 < frac_fresh < 0.66  # design: Ledgers: 0.630 ± 0.009


def test_gate_controls_run(tmp_path):
    for gate in ("off", "random"):
        cfg = _dg(tmp_path / gate, method__dg__gate=gate, method__dg__gate_prob=0.5)
        summary = run_fl(cfg)
        assert summary.status == "finished"
        ev = read_table(cfg.results_dir, "client_events")
        assert (ev.decision == "reused").any()
        if gate == "off":
            assert ev["gate_score"].isna().all()
        else:
            assert ev["gate_score"].between(0, 1).all()
        # no proxies without the real gate: a reused client sends nothing at all
        assert (ev[ev.decision == "reused"]["up_measured"] == 0).all()
        fresh = ev[ev.decision == "fresh"]
        assert (fresh["up_measured"] > fresh["up_restricted"]).all()


def test_reuse_only_r1_is_dense_on_fresh_events(tmp_path):
    cfg = _dg(tmp_path, method__topk_ratio=1.0, method__dg__gate="off")
    run_fl(cfg)
    ev = read_table(cfg.results_dir, "client_events")
    b0 = int(read_table(cfg.results_dir, "runs").iloc[0]["dense_bytes"])
    assert (ev[ev.decision == "fresh"]["up_restricted"] == b0).all()


def test_paper_preset_loads_the_frozen_values():
    from reuse_ray.configio import load_config_dict, load_run_config

    cfg = load_run_config("configs/dg_paper.yaml")
    d = cfg.method.dg
    assert (d.tau0, d.tau_min, d.gamma, d.max_age, d.rho, d.quota, d.mu) == (
        0.9116988,
        0.8134931,
        0.01,
        4,
        0.7279635,
        0.30,
        3.4156e-4,
    )
    assert cfg.method.topk_ratio == 0.2 and cfg.method.name == "dg_fedreuse"
    assert (cfg.fl.num_clients, cfg.fl.clients_per_round, cfg.partition.alpha) == (50, 10, 0.5)
    t = cfg.train
    assert (t.epochs, t.batch_size, t.lr, t.momentum, t.weight_decay) == (3, 128, 0.05, 0.9, 1e-4)
    # the preset states every frozen value itself instead of leaning on the defaults
    raw = load_config_dict("configs/dg_paper.yaml")["method"]["dg"]
    for key in ("tau0", "tau_min", "gamma", "max_age", "rho", "quota", "mu"):
        assert raw[key] == getattr(d, key)


@pytest.mark.slow
def test_dg_compute_benchmark_runs_and_reports_its_ratios():
    """benchmarks/dg_compute.py, 4 rounds on digits with the gate-off arm: every line it prints
    is consistent with the arms' definitions (Top-K FedAvg trains every selected client and
    saves exactly 76.88 %; DG arms train at most as many steps)."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "benchmarks/dg_compute.py", "--data", "digits", "--rounds", "4"]
    out = subprocess.run(
        [*cmd, "--gate-off"], cwd=root, capture_output=True, text=True, timeout=300, check=True
    ).stdout
    assert "data digits" in out and "round   4/4" in out
    fedavg = re.search(
        r"Top-K FedAvg +total .* fresh fraction ([\d.]+), cum\. restricted "
        r"saving ([\d.]+)%",
        out,
    )
    assert fedavg and float(fedavg.group(1)) == 1.0 and fedavg.group(2) == "76.88"
    for arm in ("DG-FedReuse", "DG gate=off"):
        wall = float(re.search(rf"{arm} / Top-K FedAvg round wall time: ([\d.]+)", out).group(1))
        steps = float(re.search(rf"{arm} / Top-K FedAvg client steps: +([\d.]+)", out).group(1))
        assert 0.0 < wall and 0.3 <= steps <= 1.0  # the quota keeps ≥ 3 of 10 fresh
