"""``engine.vectorize``: a group's local training in one vmap equals the per-client loop within
the documented float tolerance, on every path a method's client work can take."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import small_config

from reuse_ray.config import DataConfig, EngineConfig
from reuse_ray.data import load_dataset
from reuse_ray.engine import ClientError
from reuse_ray.engine.round import vector_groups
from reuse_ray.engine.worker import ClientWorker
from reuse_ray.errors import UserError
from reuse_ray.models import init_model
from reuse_ray.results import read_table
from reuse_ray.runner import run_fl
from reuse_ray.state import StateLayout
from reuse_ray.training import local_update
from reuse_ray.vectorized import TrainRequest, local_update_many

# the documented tolerance (methods: Vectorized clients): per element of Δ, after a
# few epochs of a shallow CNN; the batched kernels sum in another order
ATOL = 1e-5


def _vec(cfg, **engine):
    return dataclasses.replace(
        cfg, engine=dataclasses.replace(cfg.engine, vectorize=True, **engine)
    )


@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("forward", ["stacked", "vmap"])
@pytest.mark.parametrize("augment", ["none", "crop_flip"])
def test_vectorized_local_update_matches_the_per_client_loop(augment, forward, graphs):
    """Both batched forwards: the model's own stacked one and the generic vmap of forward; the
    step at the group's fixed shape (``graphs``: every row, full batches) as well."""
    data = load_dataset(DataConfig(name="digits"))
    model = init_model("cnn", data.info.shape, data.info.num_classes, seed=3, hidden=32)
    if forward == "vmap":
        model.forward_stacked = None  # as a model without a stacked forward
    layout = StateLayout.from_model(model)
    w0 = layout.flatten(model)
    g = torch.Generator().manual_seed(0)
    # uneven clients: 1, 17 (a ragged last batch), 40 and 75 samples; per-client w, μ, lr and
    # a SCAFFOLD-style correction on one client
    sizes = [1, 17, 40, 75]
    rng = np.random.default_rng(0)
    idx = [np.sort(rng.choice(len(data.train), n, replace=False)) for n in sizes]
    ws = [w0 + 0.01 * k * torch.randn(layout.dim, generator=g) for k in range(4)]
    mus = [0.0, 0.1, 0.0, 0.5]
    lrs = [0.05, 0.05, 0.02, 0.1]
    corr = {n: 0.01 * torch.randn(p.shape, generator=g) for n, p in model.named_parameters()}
    corrections = [None, None, corr, None]
    kw = dict(seed=11, epochs=2, batch_size=16, momentum=0.9, weight_decay=1e-3, augment=augment)
    requests = [TrainRequest(c, 4, ws[c], idx[c], lrs[c], mus[c], corrections[c]) for c in range(4)]
    vec = local_update_many(model, layout, requests, data.train, data.info, graphs=graphs, **kw)
    for c in range(4):
        ref = local_update(
            model,
            layout,
            ws[c],
            {},
            data.train,
            idx[c],
            data.info,
            round_=4,
            client=c,
            lr=lrs[c],
            mu=mus[c],
            correction=corrections[c],
            amp=False,
            **kw,
        )
        assert vec[c].steps == ref.steps == 2 * -(-sizes[c] // 16)
        assert vec[c].finite and ref.finite
        assert float(ref.delta.abs().max()) > 1e-3  # it trained
        assert torch.allclose(vec[c].delta, ref.delta, rtol=0, atol=ATOL), c
        assert vec[c].mean_loss == pytest.approx(ref.mean_loss, rel=1e-5)


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("name", ["cnn", "cnn_valid"])
def test_stacked_forward_is_each_models_forward(name, grouped):
    """Row a of forward_stacked is forward with the a-th parameters on the a-th batch (float64,
    three models with different weights, batches of 5)."""
    shape = (3, 28, 28) if name == "cnn_valid" else (2, 8, 8)
    models = [init_model(name, shape, 7, seed=s, hidden=12).double() for s in range(3)]
    p = {
        n: torch.stack([dict(m.named_parameters())[n] for m in models])
        for n, _ in models[0].named_parameters()
    }
    x = torch.randn(3, 5, *shape, dtype=torch.float64)
    out = models[0].forward_stacked(p, x, grouped=grouped)
    assert out.shape == (3, 5, 7)
    for a, m in enumerate(models):
        assert torch.allclose(out[a], m(x[a]), rtol=1e-12, atol=1e-12)


def test_vector_groups_are_fixed_by_the_tasks_alone():
    from reuse_ray.algorithms.api import ClientTask

    tasks = [ClientTask(c, 1) for c in (9, 2, 5, 7, 1)]
    groups = vector_groups(tasks[::-1], 2)
    assert [[t.client for t in g] for g in groups] == [[1, 2], [5, 7], [9]]
    assert vector_groups(tasks, 2) == groups


RUNS = {
    "fedavg_dense": {"method__topk_ratio": 1.0},
    "fedprox": {"method__name": "fedprox", "method__topk_ratio": 1.0},
    "scaffold": {"method__name": "scaffold"},
    "mifa": {"method__name": "mifa", "method__topk_ratio": 1.0},
    "dg_fedreuse": {
        "fl__rounds": 5,
        "method__name": "dg_fedreuse",
        "method__dg__tau0": 0.3,
        "method__dg__tau_min": 0.2,
    },
}
FAST = ("dg_fedreuse",)  # the one that also runs head proxies in the group's threads


@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in RUNS]
)
def test_a_vectorized_run_matches_the_per_client_run(tmp_path, name):
    ref = small_config(tmp_path / "loop", **RUNS[name])
    vec = _vec(small_config(tmp_path / "vec", **RUNS[name]), vectorize_group=3)
    assert vec.run_id != ref.run_id  # its numbers differ in the last bits: its own run id
    assert run_fl(ref).status == run_fl(vec).status == "finished"
    a = read_table(ref.results_dir, "client_events").sort_values(["round", "client_id"])
    b = read_table(vec.results_dir, "client_events").sort_values(["round", "client_id"])
    assert a["decision"].tolist() == b["decision"].tolist()
    assert a["local_steps"].tolist() == b["local_steps"].tolist()
    np.testing.assert_allclose(b["train_loss"], a["train_loss"], rtol=1e-4)
    np.testing.assert_allclose(b["update_norm"], a["update_norm"], rtol=1e-4)
    ra, rb = (read_table(c.results_dir, "rounds").sort_values("round") for c in (ref, vec))
    np.testing.assert_allclose(rb["val_loss"].dropna(), ra["val_loss"].dropna(), rtol=1e-4)
    if name == "dg_fedreuse":
        assert (b["decision"] == "reused").any()


def test_a_vectorized_run_is_deterministic(tmp_path):
    a = _vec(small_config(tmp_path / "a"), vectorize_group=3)
    b = _vec(small_config(tmp_path / "b"), vectorize_group=3)
    run_fl(a), run_fl(b)
    ea, eb = (
        read_table(c.results_dir, "client_events").sort_values(["round", "client_id"])
        for c in (a, b)
    )
    cols = ["train_loss", "update_norm", "up_measured"]
    pd.testing.assert_frame_equal(
        ea[cols].reset_index(drop=True), eb[cols].reset_index(drop=True), check_exact=True
    )


def test_a_failing_group_names_its_first_client(tmp_path, monkeypatch):
    def broken(self, requests):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(ClientWorker, "train_many", broken)
    cfg = _vec(small_config(tmp_path))
    with pytest.raises(ClientError, match="failed in round 1 during local training"):
        run_fl(cfg)


def test_models_with_batchnorm_are_refused_in_one_line(tmp_path):
    cfg = _vec(small_config(tmp_path, model__name="resnet18"))
    with pytest.raises(UserError, match="engine.vectorize: model 'resnet18' cannot be"):
        run_fl(cfg)


def test_vectorize_group_must_be_positive():
    with pytest.raises(UserError, match="vectorize_group"):
        EngineConfig(vectorize=True, vectorize_group=0)


def test_the_fixed_shape_step_is_a_run_of_its_own_close_to_the_unpadded_one(tmp_path):
    """``engine.vectorize_graphs`` (on the CPU: the fixed-shape step run as it is): its own run
    id, the same decisions and steps, losses within the vectorized tolerance; refused without
    ``engine.vectorize``."""
    vec = _vec(small_config(tmp_path / "vec"), vectorize_group=3)
    fixed = _vec(small_config(tmp_path / "fixed"), vectorize_group=3, vectorize_graphs=True)
    assert fixed.run_id != vec.run_id
    assert run_fl(vec).status == run_fl(fixed).status == "finished"
    a, b = (
        read_table(c.results_dir, "client_events").sort_values(["round", "client_id"])
        for c in (vec, fixed)
    )
    assert a["local_steps"].tolist() == b["local_steps"].tolist()
    np.testing.assert_allclose(b["train_loss"], a["train_loss"], rtol=1e-4)
    np.testing.assert_allclose(b["update_norm"], a["update_norm"], rtol=1e-4)
    with pytest.raises(UserError, match="vectorize_graphs.*engine.vectorize: true only"):
        EngineConfig(vectorize_graphs=True)


@pytest.mark.parametrize("graphs", [False, True])
def test_a_diverging_client_is_flagged_alone(graphs):
    data = load_dataset(DataConfig(name="digits"))
    model = init_model("cnn", data.info.shape, data.info.num_classes, seed=3, hidden=32)
    layout = StateLayout.from_model(model)
    w0 = layout.flatten(model)
    requests = [
        TrainRequest(0, 1, w0, np.arange(40), 0.05),
        TrainRequest(1, 1, w0, np.arange(40, 80), 1e30),
    ]
    out = local_update_many(
        model,
        layout,
        requests,
        data.train,
        data.info,
        seed=0,
        epochs=2,
        batch_size=16,
        momentum=0.9,
        weight_decay=0.0,
        graphs=graphs,
    )
    ref = local_update(
        model,
        layout,
        w0,
        {},
        data.train,
        np.arange(40, 80),
        data.info,
        seed=0,
        round_=1,
        client=1,
        epochs=2,
        batch_size=16,
        lr=1e30,
        momentum=0.9,
        weight_decay=0.0,
        amp=False,
    )
    assert out[0].finite and not out[1].finite and not ref.finite
    assert torch.isfinite(out[0].delta).all()


def test_the_batcher_trains_every_round_of_waiting_calls_together():
    """Tasks that train twice, once, or not at all: each batch holds every call that was
    waiting when no task could go on, and every task gets its own result back."""
    import threading

    from reuse_ray.engine.worker import _Batcher

    batches: list[list[int]] = []

    class Stub:
        def train_many(self, requests):
            batches.append([r.client for r in requests])
            return [f"{r.client}@{r.round}" for r in requests]

    plans = {0: 2, 1: 1, 2: 0, 3: 2}  # client -> how many ctx.train calls its work makes
    batcher = _Batcher(Stub(), len(plans))
    got: dict[int, list] = {c: [] for c in plans}

    def work(c: int) -> None:
        try:
            for k in range(plans[c]):
                request = TrainRequest(c, k, torch.zeros(1), np.arange(1), 0.1)
                got[c].append(batcher.train(c, request))
        finally:
            batcher.done()

    threads = [threading.Thread(target=work, args=(c,)) for c in plans]
    for th in threads:
        th.start()
    batcher.serve()
    for th in threads:
        th.join()
    assert batches == [[0, 1, 3], [0, 3]]
    assert got == {0: ["0@0", "0@1"], 1: ["1@0"], 2: [], 3: ["3@0", "3@1"]}


def test_a_parameter_the_loss_does_not_use_is_left_alone():
    from torch import nn

    class WithSpare(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(64, 10)
            self.spare = nn.Linear(3, 3)  # never called

        def forward(self, x):
            return self.body(x.flatten(1))

    data = load_dataset(DataConfig(name="digits"))
    torch.manual_seed(0)
    model = WithSpare()
    layout = StateLayout.from_model(model)
    w0 = layout.flatten(model)
    kw = dict(seed=0, epochs=1, batch_size=16, momentum=0.9, weight_decay=1e-2)
    vec = local_update_many(
        model, layout, [TrainRequest(0, 1, w0, np.arange(40), 0.1)], data.train, data.info, **kw
    )
    ref = local_update(
        model,
        layout,
        w0,
        {},
        data.train,
        np.arange(40),
        data.info,
        round_=1,
        client=0,
        lr=0.1,
        amp=False,
        **kw,
    )
    spare = layout.index("spare.weight")
    assert not vec[0].delta[spare.offset : spare.offset + spare.numel].any()
    assert torch.allclose(vec[0].delta, ref.delta, rtol=0, atol=ATOL)


def test_float_buffers_and_frozen_parameters_are_refused():
    from torch import nn

    from reuse_ray.vectorized import check_vectorizable

    buffered = nn.Linear(2, 2)
    buffered.register_buffer("scale", torch.ones(2))
    frozen = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    frozen[0].weight.requires_grad_(False)
    for model in (buffered, frozen):
        with pytest.raises(ValueError, match="not exactly its trainable parameters"):
            check_vectorizable(model)
    check_vectorizable(nn.Linear(2, 2))  # plain parameters pass


def test_a_clients_result_does_not_depend_on_its_row():
    """The stack is ordered by step count with ties in request order: the same clients asked
    for in another order get the same bits each (1 thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _same_bits_in_any_row()
    finally:
        torch.set_num_threads(threads)


def _same_bits_in_any_row():
    digits = load_dataset(DataConfig(name="digits"))
    model = init_model("cnn", digits.info.shape, digits.info.num_classes, seed=0, hidden=16)
    layout = StateLayout.from_model(model)
    w0 = layout.flatten(model)
    rng = np.random.default_rng(0)
    reqs = [
        TrainRequest(c, 1, w0, rng.choice(len(digits.train), n, replace=False), 0.05)
        for c, n in enumerate([30, 30, 7, 64, 0, 30])
    ]
    kw = dict(seed=3, epochs=2, batch_size=16, momentum=0.9, weight_decay=1e-4)
    a = local_update_many(model, layout, reqs, digits.train, digits.info, **kw)
    perm = [3, 5, 0, 4, 2, 1]
    b = local_update_many(model, layout, [reqs[i] for i in perm], digits.train, digits.info, **kw)
    for j, i in enumerate(perm):
        assert torch.equal(a[i].delta, b[j].delta) and a[i].steps == b[j].steps
        assert a[i].mean_loss == b[j].mean_loss
    assert [r.steps for r in a] == [4, 4, 2, 8, 0, 4]
