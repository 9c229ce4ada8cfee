"""Each method against its authors' code (docs/methods.md), by hand, through the real server
path: ServerCore.plan → the method's client encoder → ServerCore.step, with local training
replaced by given updates."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import make_layout, small_config

from reuse_ray.algorithms import MethodEnv, build_method
from reuse_ray.algorithms.fedsteer import remap_coords
from reuse_ray.config import RunConfig
from reuse_ray.configio import from_dict
from reuse_ray.engine.local import LocalPool, LocalServer
from reuse_ray.engine.records import ClientOutcome, RunSetup
from reuse_ray.engine.round import play_round
from reuse_ray.results import read_table
from reuse_ray.runner import run_fl
from reuse_ray.training import LocalResult


class ScriptedWorker:
    """A client worker whose local training returns given updates: delta(t, client, lr)."""

    def __init__(self, method, sizes, delta):
        self.method, self.sizes, self.delta = method, sizes, delta
        self.lrs: dict[tuple[int, int], float | None] = {}

    def num_samples(self, client: int) -> int:
        return self.sizes[client]

    def train(self, task, w, *, mu=0.0, correction=None, lr=None):
        self.lrs[(task.round, task.client)] = lr
        d = torch.as_tensor(self.delta(task.round, task.client, lr), dtype=torch.float32)
        return LocalResult(d.clone(), 0.0, 1, True)

    def head_proxy(self, *a, **k):  # pragma: no cover - no method here asks for one
        raise AssertionError("unexpected proxy")

    def run(self, task, w) -> ClientOutcome:
        res = self.method.client_work(self, task, w)
        return ClientOutcome(
            task.client,
            task.round,
            self.sizes[task.client],
            res.messages,
            res.mean_loss,
            res.steps,
            res.finite,
            0.0,
            res.local,
        )


def harness(method_block: dict, sizes: list[int], w0, delta, *, probs=None, lr=0.1):
    """(server, pool, worker) of a method on a flat 1-tensor model of len(w0) entries."""
    w0 = torch.as_tensor(w0, dtype=torch.float32)
    layout = make_layout(w0.numel())
    n = len(sizes)
    cfg = from_dict(
        RunConfig,
        {
            "method": method_block,
            "train": {"lr": lr},
            "fl": {"num_clients": n, "clients_per_round": 1},
        },
    )
    env = MethodEnv.from_config(cfg, layout, [], probs if probs is not None else [1.0] * n)
    method = build_method(cfg, env)
    parts = tuple(np.arange(s) for s in sizes)
    setup = RunSetup(cfg, None, None, parts, "flat", layout, w0, env.probs, method)
    worker = ScriptedWorker(method, sizes, delta)
    return LocalServer(setup), LocalPool(worker), worker


def const(table):
    return lambda t, i, lr: table[i]


# --------------------------------------------------------------------------- FedVARP / FedStale


@pytest.mark.parametrize("mode", ["skip", "apply"])
def test_fedvarp_empty_round_skip_leaves_x_and_history_unchanged(mode):
    deltas = {0: [4.0, 0.0], 1: [0.0, 8.0]}
    server, pool, _ = harness(
        {"name": "fedvarp", "fedstale": {"empty_round": mode}}, [1, 3], [1.0, 2.0], const(deltas)
    )
    play_round(server, pool, 1, [0, 1])
    w1 = server.w.clone()
    assert w1.tolist() == [1.0 + 0.25 * 4, 2.0 + 0.75 * 8]  # Σ α_i Δ_i, p = 1, y = 0
    state1 = server.state
    report = play_round(server, pool, 2, [])
    if mode == "skip":  # the authors' code returns early
        assert torch.equal(server.w, w1) and server.state is state1
        assert report.update_norm == 0.0
    else:  # the paper's formula: w += β Σ_j α_j y_j with β = 1
        assert server.w.tolist() == [2.0 + 1.0, 8.0 + 6.0]


def test_fedstale_server_weight_decay_is_formed_before_the_history_term():
    deltas = {0: [4.0, 0.0], 1: [0.0, 8.0]}
    lam = 0.5
    server, pool, _ = harness(
        {"name": "fedstale", "fedstale": {"beta": 0.5, "server_weight_decay": lam}},
        [1, 3],
        [1.0, 2.0],
        const(deltas),
    )
    play_round(server, pool, 1, [0, 1])
    # d_p = G + λ x_t, then the (empty) history term; x ← x − d_p with G = −Σ α_i Δ_i
    assert server.w.tolist() == pytest.approx([1.0 + 1.0 - lam * 1.0, 2.0 + 6.0 - lam * 2.0])


def test_fedstale_estimates_p_from_the_intervals_between_participations():
    # client 0 takes part in rounds 1, 4 and 6; client 1 in round 6 only
    server, pool, _ = harness(
        {"name": "fedstale", "fedstale": {"probs": "estimated", "beta": 0.0, "weights": "uniform"}},
        [1, 1],
        [0.0],
        const({0: [1.0], 1: [1.0]}),
    )
    weights = {}
    for t in range(1, 7):
        sel = [i for i, rounds in ((0, {1, 4, 6}), (1, {6})) if t in rounds]
        report = play_round(server, pool, t, sel)
        weights[t] = {c.client: c.weight for c in report.clients}
    # weight α_i / p̂_i with α = 1/2: 1/p̂ = 1 before any interval closed (round 1, and client
    # 1's first visit), then the mean closed interval: (1) at round 4, (1 + 3)/2 at round 6
    assert weights[1] == {0: 0.5}
    assert weights[4] == {0: 0.5 * 1.0}
    assert weights[6] == {0: 0.5 * 2.0, 1: 0.5 * 1.0}
    intervals = server.state.intervals
    assert intervals[0] == (3, (1 + 3 + 2) / 3, 6) and intervals[1] == (1, 6.0, 6)


# --------------------------------------------------------------------------- MIFA


def test_mifa_wait_fills_the_table_without_moving_the_model():
    deltas = {0: [2.0], 1: [4.0]}
    server, pool, _ = harness(
        {"name": "mifa", "mifa": {"init": "wait"}}, [1, 1], [1.0], const(deltas)
    )
    play_round(server, pool, 1, [0])  # waiting: client 1 never seen
    assert server.w.tolist() == [1.0]
    report = play_round(server, pool, 2, [1])  # everyone seen: all train, table filled
    assert {c.client: c.decision.name for c in report.clients} == {0: "fill", 1: "fresh"}
    assert server.w.tolist() == [1.0]  # the fill iteration does not move the model
    play_round(server, pool, 3, [0])
    assert server.w.tolist() == [1.0 + (2.0 + 4.0) / 2]  # updates start the round after


def test_mifa_inverse_schedule_holds_what_the_authors_table_holds():
    # Δ = −lr · 10 (one gradient step of gradient 10): G_i = Δ_i/η_k = −10 whatever the round
    server, pool, worker = harness(
        {"name": "mifa", "mifa": {"lr_schedule": "inverse"}},
        [1, 1],
        [0.0],
        lambda t, i, lr: [-10.0 * lr],
        lr=0.5,
    )
    play_round(server, pool, 1, [0])
    play_round(server, pool, 2, [1])
    play_round(server, pool, 3, [])
    assert [worker.lrs[(1, 0)], worker.lrs[(2, 1)]] == [0.5, 0.25]  # η_k = η_0/(k + 1)
    assert server.state.bank.get(0).tolist() == [-10.0] == server.state.bank.get(1).tolist()
    # w moves by η_k · mean_j G_j: 0.5·(−10/2), 0.25·(−10), then (0.5/3)·(−10)
    assert server.w.item() == pytest.approx(-2.5 - 2.5 - 10 / 6)


# --------------------------------------------------------------------------- LAQ


def test_laq_authors_sums_over_workers_and_skips_up_to_100_times():
    server, pool, _ = harness(
        {"name": "laq", "laq": {"variant": "authors"}},
        [1, 3],
        [0.0, 0.0],
        const({0: [1.0, -1.0], 1: [0.5, 0.5]}),
    )
    play_round(server, pool, 1, [0, 1])
    # first uploads decided by the rule against Q_i = 0; 8-bit codes of ±R are exact
    assert server.w.tolist() == [1.0 + 0.5, -1.0 + 0.5]  # Σ_m Q_m, not a weighted mean
    lazy = 0
    for t in range(2, 103):
        report = play_round(server, pool, t, [0])
        decision = report.clients[0].decision.name
        if decision == "lazy":
            lazy += 1
        else:
            break
    assert lazy == 100 and decision == "fresh" and t == 102  # C = 100 skips, then an upload


def test_laq_fl_variant_still_forces_the_first_upload_and_averages():
    server, pool, _ = harness(
        {"name": "laq"}, [1, 3], [0.0, 0.0], const({0: [1.0, -1.0], 1: [0.5, 0.5]})
    )
    play_round(server, pool, 1, [0, 1])
    assert server.w.tolist() == [0.25 * 1.0 + 0.75 * 0.5, -0.25 + 0.75 * 0.5]


# --------------------------------------------------------------------------- FedLUAR


def test_fedluar_default_is_the_authors_plain_mean():
    server, pool, _ = harness(
        {"name": "fedluar", "fedluar": {"delta": 0}},
        [1, 3],
        [0.0, 0.0],
        const({0: [2.0, 0.0], 1: [0.0, 4.0]}),
    )
    play_round(server, pool, 1, [0, 1])
    assert server.w.tolist() == [1.0, 2.0]  # (Δ_0 + Δ_1)/2, sample sizes ignored


# --------------------------------------------------------------------------- FedSteer


def test_fedsteer_fidelity_saving_counts_the_selected_clients_only(tmp_path):
    cfg = small_config(
        tmp_path,
        method__name="fedsteer",
        method__topk_ratio=1.0,
        method__fedsteer__warmup=2,
        method__fedsteer__core_size=3,
        fl__rounds=3,
    )
    assert run_fl(cfg).status == "finished"
    runs = read_table(cfg.results_dir, "runs").iloc[0]
    b0 = int(runs["dense_bytes"])
    # rounds 1–2 train all N = 10 clients (4 selected + 6 oracle), round 3 the 4 selected:
    # uplink (10 + 10 + 4)·B0 against a reference of 3·4·B0
    assert runs["cum_up_restricted"] == 24 * b0 and runs["cum_dense_reference"] == 12 * b0
    assert runs["cum_saving_restricted"] == pytest.approx(1 - 24 / 12) == -1.0
    rounds = read_table(cfg.results_dir, "rounds").sort_values("round")
    assert rounds["num_selected"].tolist() == [4, 4, 4]
    assert rounds["dense_reference"].tolist() == [4 * b0] * 3


def test_remap_coords_by_hand():
    coords = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = remap_coords(coords, (5, 7), (7, 9))  # 7 stays (column 1 → 0), 9 is new
    assert out.tolist() == [[2.0, 0.0], [4.0, 0.0]]
    assert remap_coords(coords, (), (1, 2)).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_fedsteer_clean_mode_keeps_stale_coordinates_on_their_core_clients():
    rng = np.random.default_rng(3)
    table = {i: rng.normal(size=6).tolist() for i in range(6)}
    server, pool, _ = harness(
        {
            "name": "fedsteer",
            "fedsteer": {"mode": "clean", "core_size": 2, "warmup": 4, "swaps": 2},
        },
        [5] * 6,
        [0.0] * 6,
        lambda t, i, lr: [v * (1 + 0.3 * t) for v in table[i]],
        probs=[0.5] * 6,
    )
    changes = 0
    for t, sel in enumerate([[0, 1, 2], [3, 4], [1, 5], [0, 2, 4]], 1):
        before, core_before = server.state.coords.clone(), server.state.core
        play_round(server, pool, t, sel)
        after, core = server.state.coords, server.state.core
        if core != core_before and core_before:
            changes += 1
            stale = [i for i in range(6) if i not in sel]
            want = remap_coords(before, core_before, core)
            assert torch.equal(after[stale], want[stale])
    assert changes >= 1  # the core set moved at least once during the warm-up


# --------------------------------------------------------------------------- DG-FedReuse


@pytest.mark.slow  # an end-to-end run: the full suite keeps it
def test_dg_proxy_forced_compute_scores_and_charges_forced_clients(tmp_path):
    runs = {}
    for mode in ("skip", "compute"):
        cfg = small_config(
            tmp_path / mode,
            method__name="dg_fedreuse",
            fl__rounds=6,
            fl__num_clients=5,
            method__dg__max_age=2,
            method__dg__tau0=0.3,
            method__dg__tau_min=0.2,
            method__dg__proxy_forced=mode,
        )
        assert run_fl(cfg).status == "finished"
        ev = read_table(cfg.results_dir, "client_events").sort_values(["round", "client_id"])
        runs[mode] = ev.reset_index(drop=True)
    skip, comp = runs["skip"], runs["compute"]
    assert skip["decision"].tolist() == comp["decision"].tolist()  # the decision is unchanged
    forced = skip["age"].notna() & (skip["age"] >= 2)
    assert forced.any()
    assert skip.loc[forced, "gate_score"].isna().all()
    assert comp.loc[forced, "gate_score"].notna().all()
    assert (comp.loc[forced, "up_measured"] > skip.loc[forced, "up_measured"]).all()
    assert comp.loc[forced, "up_restricted"].tolist() == skip.loc[forced, "up_restricted"].tolist()
    assert not math.isnan(comp.loc[forced, "gate_score"].iloc[0])
