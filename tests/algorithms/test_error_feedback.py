"""Top-K with error feedback, Fed-EF (methods: Fed-EF)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from conftest import make_layout, small_config

from reuse_ray.codecs import error_feedback_step, topk_sparsify
from reuse_ray.results import read_table
from reuse_ray.runner import run_fl


def test_compressed_plus_new_error_equals_update_plus_old_error_exactly():
    layout = make_layout(10, 7)
    g = torch.Generator().manual_seed(0)
    delta, e_old = torch.randn(17, generator=g), torch.randn(17, generator=g)
    c, e_new = error_feedback_step(delta, e_old, layout, 0.2)
    assert torch.equal(c.to_dense() + e_new, delta + e_old)
    assert torch.equal(c.indices, topk_sparsify(delta + e_old, layout, 0.2).indices)
    assert int((e_new != 0).sum()) == 17 - c.indices.numel()
    # first participation: e = 0
    c0, e0 = error_feedback_step(delta, None, layout, 0.2)
    assert torch.equal(c0.to_dense() + e0, delta)
    # r = 1: everything is sent and the error stays exactly zero
    c1, e1 = error_feedback_step(delta, e_old, layout, 1.0)
    assert c1.is_dense and torch.equal(c1.values, delta + e_old) and not e1.any()


def _frames(results_dir):
    r = read_table(results_dir, "rounds").sort_values("round")
    return r[["round", "val_acc", "val_loss", "up_restricted", "up_measured", "update_norm"]]


def test_ef_with_r1_is_plain_dense_fedavg(tmp_path):
    plain = small_config(tmp_path / "plain", method__topk_ratio=1.0)
    ef = small_config(tmp_path / "ef", method__topk_ratio=1.0, method__error_feedback=True)
    run_fl(plain)
    run_fl(ef)
    pd.testing.assert_frame_equal(
        _frames(plain.results_dir).reset_index(drop=True),
        _frames(ef.results_dir).reset_index(drop=True),
        check_exact=True,
    )


@pytest.mark.slow  # an end-to-end run: the full suite keeps it
def test_ef_topk_run_bytes_memory_and_learning(tmp_path):
    kw = {"fl__rounds": 8, "fl__eval_every": 4, "train__epochs": 2}
    topk = small_config(tmp_path / "topk", **kw)
    ef = small_config(tmp_path / "ef", method__error_feedback=True, **kw)
    a, b = run_fl(topk), run_fl(ef)
    ra, rb = _frames(topk.results_dir), _frames(ef.results_dir)
    # same bytes on the wire, different updates
    assert (ra["up_restricted"].to_numpy() == rb["up_restricted"].to_numpy()).all()
    assert not (ra["update_norm"].to_numpy()[1:] == rb["update_norm"].to_numpy()[1:]).all()
    # every client that has trained keeps a d-float error memory (client side, simulated)
    ev = read_table(ef.results_dir, "client_events")
    d = b.row["num_params"]
    assert b.row["client_memory_bytes"] == 4 * d * ev["client_id"].nunique()
    assert a.row["client_memory_bytes"] == 0
    assert a.row["server_memory_bytes"] == b.row["server_memory_bytes"] == 0
    assert b.row["final_val_acc"] > 0.2  # chance is 0.1


@pytest.mark.parametrize("method", ["fedprox", "dg_fedreuse"])
def test_ef_composes_with_other_methods(tmp_path, method):
    cfg = small_config(tmp_path, method__name=method, method__error_feedback=True, fl__rounds=6)
    assert run_fl(cfg).status == "finished"
