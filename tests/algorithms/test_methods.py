"""The comparison set (methods: Conventions, FedLUAR, LAQ): hand-computed oracles on tiny inputs,
the special-case identities, and end-to-end runs on digits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import method_env, received, shaped_layout, small_config

from reuse_ray.algorithms import FRESH, RoundPlan
from reuse_ray.algorithms.ef21 import EF21, ef21_step
from reuse_ray.algorithms.fedluar import (
    FedLUAR,
    candidate_layers,
    draw_recycle_set,
    recycle_probabilities,
)
from reuse_ray.algorithms.fedstale import FedStale, fedstale_direction
from reuse_ray.algorithms.fedsteer import (
    coreset_objective,
    coreset_search,
    fedsteer_direction,
    ridge_coordinates,
)
from reuse_ray.algorithms.laq import laq_dequantize, laq_quantize, laq_upload
from reuse_ray.algorithms.mifa import MIFA
from reuse_ray.algorithms.scaffold import (
    effective_steps,
    scaffold_correction,
    scaffold_new_control,
    scaffold_server_step,
)
from reuse_ray.algorithms.uplink import TopK
from reuse_ray.codecs import SparseUpdate, decode_laq, encode_laq, laq_payload_bytes
from reuse_ray.config import ConfigError, RunConfig
from reuse_ray.configio import from_dict
from reuse_ray.participation import (
    bernoulli_selection,
    group_probs,
    participation_probs,
    select_clients,
    two_group_probs,
)
from reuse_ray.results import read_table
from reuse_ray.runner import run_fl


def _fresh(i: int, vec, n: int = 1):
    return received(i, torch.as_tensor(vec, dtype=torch.float32), n)


def _plan(clients, decision=FRESH) -> RoundPlan:
    return RoundPlan((), {i: decision for i in clients})


# ------------------------------------------------------------- participation (methods: Conventions)


def test_two_group_law_matches_the_reference_numbers():
    p = two_group_probs(100, 10, 5.0)
    assert p[:50] == pytest.approx(60 / 350) and p[50:] == pytest.approx(10 / 350)
    assert p.sum() == pytest.approx(10.0)


def test_fedstale_groups_tile_contiguous_blocks():
    assert group_probs(4, (1.0, 0.5)).tolist() == [1.0, 1.0, 0.5, 0.5]
    assert group_probs(5, (1.0, 0.5)).tolist() == [1.0, 1.0, 1.0, 0.5, 0.5]


def test_bernoulli_rates_are_the_probabilities_and_rounds_can_be_empty():
    probs = np.array([0.9, 0.5, 0.1, 0.0])
    counts = np.zeros(4)
    empty = 0
    for t in range(1, 4001):
        s = bernoulli_selection(3, t, probs)
        assert s == sorted(s)
        counts[s] += 1
        empty += not s
    assert np.allclose(counts / 4000, probs, atol=0.025)
    assert empty > 0  # P(empty) = 0.1·0.5·0.9 = 0.045
    assert bernoulli_selection(3, 17, probs) == bernoulli_selection(3, 17, probs)


def test_participation_is_validated_and_known_to_every_model(tmp_path):
    with pytest.raises(ConfigError, match=r"fl.participation.*allowed: uniform, bernoulli"):
        from_dict(RunConfig, {"fl": {"participation": "markov"}})
    with pytest.raises(ConfigError, match=r"fl.group_probs.*\(0, 1\]"):
        from_dict(RunConfig, {"fl": {"group_probs": [1.0, 0.0]}})
    cfg = small_config(tmp_path, fl__participation="bernoulli")
    assert participation_probs(cfg).tolist() == [0.4] * 10
    uni = small_config(tmp_path)
    assert len(select_clients(uni, 5)) == 4


def test_methods_see_the_same_bernoulli_schedule(tmp_path):
    kw = {"fl__participation": "bernoulli", "fl__rounds": 4}
    a = small_config(tmp_path / "a", **kw)
    b = small_config(tmp_path / "b", method__name="fedstale", **kw)
    run_fl(a), run_fl(b)
    ea = read_table(a.results_dir, "client_events")[["round", "client_id"]]
    eb = read_table(b.results_dir, "client_events")[["round", "client_id"]]
    assert ea.reset_index(drop=True).equals(eb.reset_index(drop=True))


# --------------------------------------------------------------------------- FedLUAR


def _luar(delta=1):
    layout = shaped_layout([("a", (2, 2)), ("a_bias", (2,)), ("b", (1, 2)), ("c", (2, 1))])
    return layout, FedLUAR(method_env(layout, seed=5), TopK(1.0), delta=delta, weighting="samples")


def test_fedluar_candidates_round_one_and_recycling_oracle():
    layout, algo = _luar()
    assert candidate_layers(layout) == (0, 2, 3)  # rank >= 2; the bias is always aggregated
    st = algo.init_state(torch.zeros(layout.dim))
    plan = algo.plan(st, 1, [0, 1])
    assert st.recycle == () and all(t.work.skip == () for t in plan.tasks)  # R_1 = ∅
    w = torch.ones(layout.dim)
    u0 = torch.arange(1.0, 11.0)  # client 0, n=1
    u1 = -torch.arange(1.0, 11.0) * 3  # client 1, n=3
    res = algo.server_step(st, 1, w, plan, {0: _fresh(0, u0, 1), 1: _fresh(1, u1, 3)}, {0: 1, 1: 3})
    agg = 0.25 * u0 + 0.75 * u1
    assert torch.equal(res.w, w + agg)
    a = slice(0, 4)
    assert torch.equal(res.state.updates[0], agg[a])
    assert res.state.scores[0] == pytest.approx(float(agg[a].norm()) / (2.0 + 1e-6))
    # force layer 0 into the recycle set: it moves by exactly U[0], twice in two rounds
    st2 = type(res.state)(res.state.updates, res.state.scores, (0,))
    plan2 = algo.plan(st2, 2, [0])
    assert plan2.tasks[0].work.skip == (0,) and plan2.down_extra == 4
    upd = SparseUpdate(10, torch.arange(4, 10), torch.full((6,), 2.0))  # no entries in layer 0
    r2 = algo.server_step(st2, 2, res.w, plan2, {0: received(0, upd)}, {0: 1})
    assert torch.equal(r2.w[a], res.w[a] + agg[a])
    assert r2.state.scores[0] == res.state.scores[0]  # unchanged while recycled
    assert torch.equal(r2.w[4:], res.w[4:] + 2.0)
    st3 = type(r2.state)(r2.state.updates, r2.state.scores, (0,))
    r3 = algo.server_step(st3, 3, r2.w, plan2, {0: received(0, upd)}, {0: 1})
    assert torch.equal(r3.w[a], res.w[a] + agg[a] + agg[a])


@pytest.mark.slow  # an end-to-end run: the full suite keeps it
def test_fedluar_selection_frequency_matches_successive_sampling_law():
    scores = {0: 0.5, 2: 0.1, 3: 2.0, 5: 0.25}
    law = recycle_probabilities(scores, 2)
    assert sum(law.values()) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    n = 40_000
    counts: dict[frozenset, int] = {}
    for _ in range(n):
        key = frozenset(draw_recycle_set(scores, 2, rng))
        counts[key] = counts.get(key, 0) + 1
    for key, p in law.items():
        assert counts.get(key, 0) / n == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / n))
    # successive law by hand for {2, 5}: weights 1/s = 2, 10, 0.5, 4 (sum 16.5)
    hand = (10 / 16.5) * (4 / 6.5) + (4 / 16.5) * (10 / 12.5)
    assert law[frozenset({2, 5})] == pytest.approx(hand)


def test_fedluar_delta_must_leave_a_layer(tmp_path):
    layout = shaped_layout([("a", (2, 2)), ("b", (2, 2))])
    with pytest.raises(ValueError, match=r"method.fedluar.delta: 2 .*allowed: \[0, 1\]"):
        FedLUAR(method_env(layout), TopK(1.0), delta=2)


def test_fedluar_run_uploads_exactly_the_non_recycled_layers(tmp_path):
    cfg = small_config(tmp_path, method__name="fedluar", method__topk_ratio=1.0, fl__rounds=4)
    s = run_fl(cfg)
    assert s.status == "finished"
    ev = read_table(cfg.results_dir, "client_events")
    b0 = s.row["dense_bytes"]
    first = ev[ev["round"] == 1]["up_restricted"]
    assert (first == b0).all()  # R_1 = ∅
    later = ev[ev["round"] > 1]["up_restricted"].unique()
    # every later round recycles δ = 2 whole kernels: the uplink is B0 minus their bytes
    from reuse_ray.models import init_model
    from reuse_ray.state import StateLayout

    m = init_model("cnn", (1, 8, 8), 10, 7, 32)
    layout = StateLayout.from_model(m)
    kernels = [4 * layout.tensors[j].numel for j in candidate_layers(layout)]
    import itertools

    allowed = {b0 - sum(c) for c in itertools.combinations(kernels, 2)}
    assert set(later.tolist()) <= allowed
    assert s.row["server_memory_bytes"] == sum(kernels) + 8 * len(kernels)


# --------------------------------------------------------------------------- FedSteer


def test_ridge_projection_on_orthonormal_columns_is_q_transpose_g():
    q, _ = torch.linalg.qr(torch.randn(12, 3, dtype=torch.float64))
    g = torch.randn(12)
    s = ridge_coordinates(q.float(), g, 1e-9)
    assert torch.allclose(s, (q.T @ g.double()).float(), atol=1e-5)


def test_fedsteer_all_active_with_p_one_equals_sum_d_g():
    torch.manual_seed(0)
    q = torch.randn(6, 2)
    s = torch.randn(3, 2)
    d = torch.tensor([0.25, 0.25, 0.5])
    g = {i: torch.randn(6) for i in range(3)}
    v = fedsteer_direction(q, s, d, g, {i: s[i] for i in range(3)}, {i: 1.0 for i in range(3)})
    assert torch.allclose(v, sum(d[i] * g[i] for i in range(3)), atol=1e-6)


def test_fedsteer_correction_is_unbiased_over_bernoulli_draws():
    torch.manual_seed(1)
    q, s = torch.randn(5, 2), torch.randn(4, 2)
    d = torch.tensor([0.1, 0.2, 0.3, 0.4])
    p = {0: 0.2, 1: 0.5, 2: 0.7, 3: 0.9}
    g = {i: torch.randn(5) for i in range(4)}
    rng = np.random.default_rng(0)
    acc = torch.zeros(5, dtype=torch.float64)
    n = 20_000
    for _ in range(n):
        act = {i: g[i] for i in range(4) if rng.random() < p[i]}
        acc += fedsteer_direction(q, s, d, act, {i: s[i] for i in act}, p).double()
    assert torch.allclose((acc / n).float(), sum(d[i] * g[i] for i in range(4)), atol=0.03)


def test_coreset_search_never_increases_j_and_matches_the_direct_objective():
    torch.manual_seed(2)
    u, v = torch.randn(8, 5), torch.randn(8, 5)
    omega, lam_i = torch.rand(8).double() + 0.1, torch.rand(8).double() + 0.1
    x, _, hist = coreset_search(u, v, omega, lam_i, 0.5, 3, 5, np.random.default_rng(4))
    assert all(b <= a for a, b in zip(hist, hist[1:], strict=False)) and len(hist) >= 2
    un = u.double() / (u.double().norm(dim=1, keepdim=True) + 1e-8)
    vn = v.double() / (v.double().norm(dim=1, keepdim=True) + 1e-8)
    assert hist[-1] == pytest.approx(coreset_objective(un, vn, x, omega, lam_i, 0.5), rel=1e-9)


@pytest.mark.parametrize("mode", ["fidelity", "clean"])
def test_fedsteer_runs_and_holds_k_d_plus_n_k(tmp_path, mode):
    cfg = small_config(
        tmp_path,
        method__name="fedsteer",
        method__topk_ratio=1.0,
        method__fedsteer__core_size=3,
        method__fedsteer__warmup=2,
        method__fedsteer__mode=mode,
        fl__rounds=4,
    )
    s = run_fl(cfg)
    ev = read_table(cfg.results_dir, "client_events")
    d = s.row["num_params"]
    assert s.status == "finished"
    assert s.row["server_memory_bytes"] <= 4 * (3 * d + 10 * 3)
    oracle = ev[ev["decision"] == "oracle"]
    if mode == "fidelity":  # the warm-up trains all N clients, charged
        assert set(oracle["round"]) == {1, 2} and (oracle["up_restricted"] > 0).all()
        assert (ev.groupby("round").size()[[1, 2]] == 10).all()
    else:
        assert oracle.empty


# --------------------------------------------------------------------------- MIFA


def test_mifa_full_participation_equals_fedavg_and_absent_clients_keep_contributing():
    algo = MIFA(method_env(None, 2), TopK(1.0), weights="uniform")
    st = algo.init_state(torch.zeros(2))
    w = torch.zeros(2)
    for t, (a, b) in enumerate([([1.0, 2.0], [3.0, -2.0]), ([0.5, 0.25], [-1.0, 4.0])], 1):
        res = algo.server_step(
            st, t, w, _plan([0, 1]), {0: _fresh(0, a), 1: _fresh(1, b)}, {0: 5, 1: 9}
        )
        fedavg = w + 0.5 * (torch.tensor(a) + torch.tensor(b))
        assert torch.equal(res.w, fedavg)
        st, w = res.state, res.w
    # client 1 absent for 5 rounds: its last update (-1, 4) keeps contributing unchanged
    for t in range(3, 8):
        res = algo.server_step(st, t, w, _plan([0]), {0: _fresh(0, [0.0, 0.0])}, {0: 5, 1: 9})
        assert torch.equal(res.w, w + 0.5 * torch.tensor([-1.0, 4.0]))
        st, w = res.state, res.w
    # empty round: still moves by the memory average
    res = algo.server_step(st, 8, w, _plan([]), {}, {0: 5, 1: 9})
    assert torch.equal(res.w, w + 0.5 * torch.tensor([-1.0, 4.0]))


def test_mifa_zero_init_shrinks_by_seen_over_n():
    algo = MIFA(method_env(None, 4), TopK(1.0))
    st = algo.init_state(torch.zeros(1))
    res = algo.server_step(
        st, 1, torch.zeros(1), _plan([2]), {2: _fresh(2, [8.0])}, dict.fromkeys(range(4), 1)
    )
    assert res.w.item() == 2.0  # 8 / N


def test_mifa_wait_init_fills_every_client_once_all_were_seen(tmp_path):
    cfg = small_config(tmp_path, method__name="mifa", method__mifa__init="wait", fl__rounds=12)
    s = run_fl(cfg)
    ev = read_table(cfg.results_dir, "client_events")
    fill_round = ev.loc[ev["decision"] == "fill", "round"].unique()
    assert len(fill_round) == 1
    t0 = int(fill_round[0])
    assert (ev.loc[ev["round"] < t0, "decision"] == "waiting").all()
    assert (ev.loc[ev["round"] < t0, "up_restricted"] == 0).all()
    assert set(ev.loc[ev["round"] == t0, "client_id"]) == set(range(10))
    assert set(ev.loc[ev["round"] <= t0, "client_id"]) == set(range(10))
    rounds = read_table(cfg.results_dir, "rounds")
    assert (rounds.loc[rounds["round"] < t0, "update_norm"] == 0).all()
    assert s.status == "finished"


# -------------------------------------------------------------------- FedVARP and FedStale


def test_fedstale_beta_zero_is_importance_weighted_fedavg_and_one_is_fedvarp():
    fresh = {0: torch.tensor([1.0, 2.0]), 2: torch.tensor([-4.0, 0.5])}
    mem = {0: torch.tensor([0.5, 0.5]), 2: None}
    total = torch.tensor([0.25, -1.0])
    alpha, p = {0: 0.25, 2: 0.5}, {0: 0.5, 2: 0.25}
    v0 = fedstale_direction(fresh, mem, total, alpha, p, 0.0)
    assert torch.equal(v0, 0.5 * fresh[0] + 2.0 * fresh[2])  # Σ (α/p) Δ
    v1 = fedstale_direction(fresh, mem, total, alpha, p, 1.0)
    varp = total + 0.5 * (fresh[0] - mem[0]) + 2.0 * fresh[2]  # ȳ + Σ (α/p)(Δ − y)
    assert torch.equal(v1, varp)
    vh = fedstale_direction(fresh, mem, total, alpha, p, 0.5)
    assert torch.equal(vh, 0.5 * total + 0.5 * (fresh[0] - 0.5 * mem[0]) + 2.0 * fresh[2])


def test_fedvarp_full_participation_and_unbiasedness():
    algo = FedStale(method_env(None, 2), TopK(1.0), beta=1.0, weights="samples")
    st = algo.init_state(torch.zeros(2))
    ns = {0: 1, 1: 3}
    res = algo.server_step(
        st,
        1,
        torch.zeros(2),
        _plan([0, 1]),
        {0: _fresh(0, [4.0, 0.0]), 1: _fresh(1, [0.0, 8.0])},
        ns,
    )
    assert torch.equal(res.w, torch.tensor([1.0, 6.0]))  # Σ α_i Δ_i
    res2 = algo.server_step(
        res.state,
        2,
        res.w,
        _plan([0, 1]),
        {0: _fresh(0, [2.0, 2.0]), 1: _fresh(1, [-2.0, 0.0])},
        ns,
    )
    assert torch.equal(res2.w - res.w, torch.tensor([-1.0, 0.5]))
    # unbiased for fixed memories: E_S[v] = Σ α_i Δ_i under Bernoulli p
    rng = np.random.default_rng(0)
    y = {0: torch.tensor([1.0, -1.0]), 1: torch.tensor([0.5, 2.0]), 2: None}
    alpha, p = {0: 0.2, 1: 0.3, 2: 0.5}, {0: 0.3, 1: 0.6, 2: 0.8}
    total = 0.2 * y[0] + 0.3 * y[1]
    g = {0: torch.tensor([1.0, 1.0]), 1: torch.tensor([-2.0, 0.0]), 2: torch.tensor([0.0, 3.0])}
    acc = torch.zeros(2, dtype=torch.float64)
    for _ in range(20_000):
        s = {i: g[i] for i in range(3) if rng.random() < p[i]}
        acc += fedstale_direction(s, {i: y[i] for i in s}, total, alpha, p, 1.0).double()
    assert torch.allclose((acc / 20_000).float(), sum(alpha[i] * g[i] for i in g), atol=0.03)


def test_fedstale_estimated_probabilities():
    algo = FedStale(
        method_env(None, 1, probs=(0.5,)), TopK(1.0), beta=0.0, probs_from="estimated_counts"
    )
    st = algo.init_state(torch.zeros(1))
    assert algo.p_hat(st, 0, 4) == 0.25  # first participation at round 4: 1/4
    res = algo.server_step(st, 4, torch.zeros(1), _plan([0]), {0: _fresh(0, [1.0])}, {0: 1})
    assert res.w.item() == 4.0  # α/p̂ = 1/(1/4)
    assert algo.p_hat(res.state, 0, 6) == pytest.approx(2 / 6)


# --------------------------------------------------------------------------- SCAFFOLD


def test_scaffold_first_round_single_client_is_plain_local_sgd(tmp_path):
    kw = {
        "fl__num_clients": 1,
        "fl__clients_per_round": 1,
        "fl__rounds": 1,
        "method__topk_ratio": 1.0,
    }
    a = small_config(tmp_path / "a", **kw)
    b = small_config(tmp_path / "b", method__name="scaffold", **kw)
    ra, rb = run_fl(a), run_fl(b)
    assert ra.row["final_val_acc"] == rb.row["final_val_acc"]
    na = read_table(a.results_dir, "rounds")["update_norm"].iloc[0]
    nb = read_table(b.results_dir, "rounds")["update_norm"].iloc[0]
    assert na == nb
    # Δy and Δc up, w and c down: both directions carry twice the trainable parameters
    ev = read_table(b.results_dir, "client_events").iloc[0]
    d = rb.row["num_params"]
    assert ev["up_restricted"] == 2 * 4 * d
    assert ev["down_measured"] > 2 * 4 * d and ev["up_measured"] > 2 * 4 * d
    assert rb.row["client_memory_bytes"] == 4 * d and rb.row["server_memory_bytes"] == 4 * d


def test_scaffold_control_converges_to_the_common_gradient():
    # identical clients with a constant gradient g: one option-II round gives c_i = c = g
    g = torch.tensor([0.5, -1.0, 2.0])
    mask = torch.ones(3, dtype=torch.bool)
    n, k, lr = 4, 5, 0.1
    c, ci = torch.zeros(3), {i: None for i in range(n)}
    w = torch.zeros(3)
    for _ in range(3):
        dy, dc = {}, {}
        for i in range(n):
            corr = c if ci[i] is None else c - ci[i]
            delta = -k * lr * (g + corr)  # K plain SGD steps on the corrected gradient
            new = scaffold_new_control(c, ci[i], delta, mask, k, lr)
            dy[i] = delta
            dc[i] = new if ci[i] is None else new - ci[i]
            ci[i] = new
        w, c = scaffold_server_step(w, c, dy, dc, {i: 1 / n for i in range(n)}, n, 1.0)
        assert torch.allclose(c, g, atol=1e-6)
    assert effective_steps(5, 0.0) == 5
    assert effective_steps(2, 0.5) == pytest.approx(1 + 1.5)  # (1−β)/(1−β) + (1−β²)/(1−β)
    layout = shaped_layout([("a", (1, 2)), ("b", (1,))])
    corr = scaffold_correction(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.5, 0.5, 0.5]), layout)
    assert corr["a"].tolist() == [[0.5, 1.5]] and corr["b"].tolist() == [2.5]


# --------------------------------------------------------------------------- EF21


def test_ef21_step_and_server_mirror_agree():
    layout = shaped_layout([("a", (5,))])
    delta = torch.tensor([1.0, -3.0, 0.5, 2.0, 0.0])
    c, g = ef21_step(delta, None, layout, 0.4)  # k = 2: keeps -3 and 2
    assert c.indices.tolist() == [1, 3] and g.tolist() == [0.0, -3.0, 0.0, 2.0, 0.0]
    c2, g2 = ef21_step(delta, g, layout, 0.4)  # Δ − g = (1, 0, .5, 0, 0): keeps 1 and .5
    assert torch.equal(g2, g + c2.to_dense()) and g2.tolist() == [1.0, -3.0, 0.5, 2.0, 0.0]
    cd, gd = ef21_step(delta, None, layout, 0.4, dense_first=True)
    assert cd.is_dense and torch.equal(gd, delta)
    algo = EF21(method_env(layout, 2, topk_ratio=0.4), variant="pp")
    st = algo.init_state(torch.zeros(5))
    res = algo.server_step(st, 1, torch.zeros(5), _plan([0]), {0: received(0, c)}, {0: 1, 1: 1})
    assert torch.equal(res.state.get(0), g)  # the server's mirror equals the client's g
    assert torch.equal(res.w, 0.5 * g)  # PP: Σ_all α_j g_j, the absent client has g = 0
    s_algo = EF21(method_env(layout, 2, topk_ratio=0.4), variant="s")
    rs = s_algo.server_step(
        s_algo.init_state(torch.zeros(5)),
        1,
        torch.zeros(5),
        _plan([0]),
        {0: received(0, c)},
        {0: 1, 1: 1},
    )
    assert torch.equal(rs.w, g)


# --------------------------------------------------------------------------- LAQ


def test_laq_quantiser_by_hand_and_on_the_wire():
    delta = torch.tensor([0.3, -0.3, 0.1])
    radius, codes, q = laq_quantize(delta, None, 2)  # R = 0.3, δ = 0.1, levels -.3,-.1,.1,.3
    assert radius == pytest.approx(0.3) and codes.tolist() == [3, 0, 2]
    assert torch.allclose(q, delta, atol=1e-7)
    blob = encode_laq(radius, codes, 2, 1, 0, 5)
    r2, c2, b2 = decode_laq(blob, 3)
    assert (r2, c2.tolist(), b2) == (radius, [3, 0, 2], 2)
    assert torch.equal(laq_dequantize(torch.zeros(3), r2, c2, 2), q)  # server = client
    assert laq_payload_bytes(3, 2) == 4 + 1 and laq_payload_bytes(1000, 4) == 504
    # relative to the last upload; 13-bit codes survive the packing too
    r3, c3, q3 = laq_quantize(torch.tensor([1.0, 2.0, -7.0]), q, 13)
    assert torch.equal(
        laq_dequantize(q, *decode_laq(encode_laq(r3, c3, 13, 2, 0, 1), 3)[:2], 13), q3
    )


def test_laq_skip_rule():
    q_old = torch.tensor([1.0, 1.0])
    delta = torch.tensor([1.1, 1.0])
    q_new = torch.tensor([1.1, 1.0])
    up, eps = laq_upload(q_new, None, delta, 0.0, 1e9, 0, 10)
    assert up and eps == 0.0  # first visit always uploads
    up, _ = laq_upload(q_new, q_old, delta, 0.0, 0.005, 0, 10)
    assert up  # ‖ΔQ‖² = 0.01 ≥ 0.005
    up, _ = laq_upload(q_new, q_old, delta, 0.0, 0.02, 0, 10)
    assert not up
    up, _ = laq_upload(q_new, q_old, delta, 0.0, 0.02, 10, 10)
    assert up  # the clock forces an upload


def test_laq_run_charges_bits_and_skips(tmp_path):
    cfg = small_config(
        tmp_path, method__name="laq", method__topk_ratio=1.0, method__laq__bits=4, fl__rounds=6
    )
    s = run_fl(cfg)
    ev = read_table(cfg.results_dir, "client_events")
    d = s.row["num_params"]
    fresh, lazy = ev[ev["decision"] == "fresh"], ev[ev["decision"] == "lazy"]
    assert not lazy.empty and (fresh["up_restricted"] == 4 + math.ceil(4 * d / 8)).all()
    assert (lazy["up_restricted"] == 0).all() and (lazy["up_measured"] > 0).all()
    assert (lazy["local_steps"] > 0).all()  # lazy clients trained, then held the upload back
    assert s.row["server_memory_bytes"] == 4 * d * (ev["client_id"].nunique() + 1)


# --------------------------------------------------------------------------- every method


def test_laq_and_fedsteer_reject_top_k():
    for name in ("laq", "fedsteer"):
        with pytest.raises(ConfigError, match="method.topk_ratio.*allowed: 1.0"):
            from_dict(RunConfig, {"method": {"name": name, "topk_ratio": 0.2}})
    with pytest.raises(ConfigError, match="method.error_feedback.*allowed with"):
        from_dict(RunConfig, {"method": {"name": "scaffold", "error_feedback": True}})


ALL = ["fedluar", "fedsteer", "mifa", "fedvarp", "fedstale", "scaffold", "ef21", "laq"]


@pytest.mark.parametrize("method", ALL)
def test_every_method_handles_empty_rounds(tmp_path, method):
    kw = {"method__topk_ratio": 1.0} if method in ("laq", "fedsteer", "scaffold") else {}
    if method == "fedsteer":
        kw.update(
            method__fedsteer__core_size=2,
            method__fedsteer__mode="clean",
            method__fedsteer__warmup=1,
        )
    cfg = small_config(
        tmp_path,
        method__name=method,
        fl__participation="groups",
        fl__group_probs=[0.15],
        fl__rounds=6,
        fl__eval_every=1,
        **kw,
    )
    s = run_fl(cfg)
    assert s.status == "finished"
    rounds = read_table(cfg.results_dir, "rounds").sort_values("round").reset_index(drop=True)
    rounds["seen"] = rounds["num_selected"].cumsum() > 0
    empty = rounds[rounds["num_selected"] == 0]
    assert not empty.empty and (empty["up_restricted"] == 0).all()
    after = empty[empty["seen"]]
    assert not after.empty
    if method in ("mifa", "ef21", "laq"):  # the memory average moves w
        assert (after["update_norm"] > 0).all()
    elif method in ("fedluar", "scaffold", "fedvarp", "fedstale"):  # FedStale/FedVARP: the
        # authors' code skips an empty round (method.fedstale.empty_round = skip)
        assert (after["update_norm"] == 0).all()
    else:  # FedSteer steps by Q Σ_i d_i s_i. Here the only warm-up round (round 1) is empty,
        # so no core set was searched and Q has no columns: the empty rounds leave w unchanged
        assert method == "fedsteer"
        assert rounds.loc[rounds["round"] == 1, "num_selected"].item() == 0
        assert (after["update_norm"] == 0).all()


@pytest.mark.parametrize("method", ["fedavg", "fedprox", "fedadam", "dg_fedreuse", *ALL])
def test_every_method_has_a_search_space_that_yields_valid_configs(method):
    import optuna

    from reuse_ray.config import flatten
    from reuse_ray.configio import set_dotted
    from reuse_ray.tuning.spaces import load_space

    space = load_space(method)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        trial = study.ask()
        space(trial)
        data = {"method": {"name": method}}
        if method in ("laq", "fedsteer"):
            data["method"]["topk_ratio"] = 1.0
        for key, value in trial.params.items():
            set_dotted(data, key, value)
        flat = flatten(from_dict(RunConfig, data))
        for key, value in trial.params.items():  # every suggestion lands in the run config
            assert flat[key] == value, key
        study.tell(trial, 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("method", ALL)
def test_every_method_learns_digits(tmp_path, method):
    kw = {"method__topk_ratio": 1.0} if method in ("laq", "fedsteer") else {}
    cfg = small_config(tmp_path, method__name=method, fl__rounds=15, fl__eval_every=5, **kw)
    s = run_fl(cfg)
    assert s.status == "finished"
    assert s.row["final_val_acc"] > 0.3  # chance is 0.1; 15 rounds of 4 tiny clients
    assert s.row["cum_up_measured"] > 0 and s.row["cum_down_measured"] > 0
    assert s.row["server_memory_bytes"] > 0


def test_mifa_adversarial_availability_by_hand():
    from reuse_ray.participation import adversarial_probs

    labels = [np.array([5, 0, 5]), np.array([9]), np.array([3, 7, 3]), np.array([], dtype=int)]
    p = adversarial_probs(labels, 10, 0.1, 1.0)  # p_min + 0.9·min_label/9; empty client: p_min
    assert p.tolist() == pytest.approx([0.1, 1.0, 0.4, 0.1])
    assert adversarial_probs(labels, 10, 0.2, 0.2).tolist() == [0.2] * 4
    with pytest.raises(ConfigError, match=r"fl.avail_min"):
        from_dict(RunConfig, {"fl": {"participation": "adversarial", "avail_min": 0.0}})
    with pytest.raises(ConfigError, match=r"fl.avail_max"):
        from_dict(RunConfig, {"fl": {"avail_min": 0.5, "avail_max": 0.4}})
    cfg = from_dict(RunConfig, {"fl": {"participation": "adversarial"}})
    with pytest.raises(ValueError, match="fl.participation: 'adversarial' depends on"):
        participation_probs(cfg)


def test_adversarial_schedule_follows_the_clients_lowest_labels_end_to_end(tmp_path):
    """A FedStale run under MIFA's adversarial law: each round's participants are exactly the
    Bernoulli draws at p_i from the partition's lowest labels, and FedStale weights by them."""
    from reuse_ray.engine import prepare_data
    from reuse_ray.participation import adversarial_probs

    cfg = small_config(
        tmp_path,
        method__name="fedstale",
        method__topk_ratio=1.0,
        fl__participation="adversarial",
        fl__avail_min=0.2,
        fl__rounds=6,
        partition__alpha=0.05,
    )
    data, parts = prepare_data(cfg)
    probs = adversarial_probs([data.train.y[p] for p in parts], 10, 0.2, 1.0)
    assert len(set(probs.round(6).tolist())) > 1  # the law separates the clients here
    assert run_fl(cfg).status == "finished"
    ev = read_table(cfg.results_dir, "client_events")
    got = {t: sorted(g["client_id"].tolist()) for t, g in ev.groupby("round")}
    want = {t: s for t in range(1, 7) if (s := bernoulli_selection(cfg.seed, t, probs))}
    assert got == want
    # the server's FedStale divides by the same known p_i
    from reuse_ray.engine import ServerCore, make_setup

    setup, _ = make_setup(cfg, data, parts)
    assert ServerCore(setup).method.probs == tuple(probs.tolist())
