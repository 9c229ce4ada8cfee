"""Top-K and the field model (design: Ledgers) on hand-computed oracles."""

from __future__ import annotations

import pytest
import torch
from conftest import make_layout

from reuse_ray.accounting import restricted_bytes_of
from reuse_ray.codecs import (
    decode,
    encode,
    encode_model,
    field_bytes,
    restricted_update_bytes,
    topk_count,
    topk_select,
    topk_sparsify,
)
from reuse_ray.models import build_model
from reuse_ray.state import StateLayout


@pytest.mark.parametrize(
    ("d", "r", "k", "dense", "coo", "bitmap", "b"),
    [
        (1, 0.2, 1, 4, 8, 5, 4),
        (10, 0.2, 2, 40, 16, 10, 10),
        (64, 0.2, 12, 256, 96, 56, 56),
        (1000, 0.2, 200, 4000, 1600, 925, 925),
        (10**6, 0.01, 10**4, 4 * 10**6, 80_000, 165_000, 80_000),
        (1000, 1.0, 1000, 4000, 8000, 4125, 4000),
    ],
)
def test_field_model_table(d, r, k, dense, coo, bitmap, b):
    assert topk_count(d, r) == k
    assert field_bytes(d, k) == min(dense, coo, bitmap) == b


def test_exact_rational_k_avoids_float_pitfalls():
    assert topk_count(90, 0.7) == 63  # math.floor(0.7*90) == 62
    assert topk_count(180, 0.35) == 63  # math.floor(0.35*180) == 62
    assert topk_count(100, 0.55, rounding="ceil") == 55  # math.ceil(0.55*100) == 56
    assert topk_count(3, 0.01) == 1  # never zero


def test_topk_keeps_largest_magnitudes_ties_to_lower_index():
    x = torch.tensor([1.0, -3.0, 2.0, 3.0, -2.0, 0.5])
    assert topk_select(x, 1).tolist() == [1]  # |−3| ties |3|: lower index wins
    assert topk_select(x, 2).tolist() == [1, 3]
    assert topk_select(x, 3).tolist() == [1, 2, 3]  # 2 ties −2: index 2 before 4
    assert topk_select(x, 6).tolist() == [0, 1, 2, 3, 4, 5]
    assert topk_select(torch.zeros(5), 2).tolist() == [0, 1]


def test_topk_is_per_tensor_and_r1_is_identity():
    layout = make_layout(10, 5)
    delta = torch.arange(1, 16, dtype=torch.float32) * torch.tensor([1.0, -1.0] * 7 + [1.0])
    upd = topk_sparsify(delta, layout, 0.2)
    # tensor 0 keeps 2 of 10 (|10|, |9|), tensor 1 keeps 1 of 5 (|15|)
    assert upd.indices.tolist() == [8, 9, 14]
    assert upd.values.tolist() == [9.0, -10.0, 15.0]
    dense = topk_sparsify(delta, layout, 1.0)
    assert dense.is_dense and torch.equal(dense.to_dense(), delta)
    assert restricted_bytes_of(dense, layout) == layout.dense_bytes == 60
    assert restricted_bytes_of(upd, layout) == field_bytes(10, 2) + field_bytes(5, 1) == 10 + 5


def test_wire_roundtrip_and_measured_size():
    torch.manual_seed(0)
    layout = make_layout(1, 10, 64, 1000)
    delta = torch.randn(layout.dim)
    for r in (0.01, 0.2, 0.5, 0.99, 1.0):
        upd = topk_sparsify(delta, layout, r)
        blob = encode(upd, layout, round_=3, client=7, num_samples=42)
        dec = decode(blob, layout)
        assert (dec.round, dec.client, dec.num_samples) == (3, 7, 42)
        assert torch.equal(dec.update.to_dense(), upd.to_dense())
        # the payload is exactly the field model; headers are 18 B + 11 B per tensor
        assert len(blob) == restricted_bytes_of(upd, layout) + 18 + 11 * 4
    assert len(encode_model(delta, layout, 1)) == layout.dense_bytes + 18 + 11 * 4


def test_aggregate_oracle_two_clients():
    from reuse_ray.algorithms import fedavg_aggregate, sample_weights
    from reuse_ray.codecs import SparseUpdate

    updates = {
        0: SparseUpdate(1, None, torch.tensor([1.0])),
        1: SparseUpdate(1, None, torch.tensor([-1.0])),
    }
    weights = sample_weights([0, 1], {0: 1, 1: 3})
    w_next = fedavg_aggregate(torch.zeros(1), updates, weights, 1.0)
    assert weights == {0: 0.25, 1: 0.75}
    assert w_next.item() == pytest.approx(-0.5)
    assert fedavg_aggregate(torch.ones(1), {}, {}, 1.0).item() == 1.0


@pytest.mark.parametrize(
    ("name", "shape", "classes"),
    [
        ("cnn", (1, 28, 28), 10),
        ("cnn", (3, 28, 28), 9),
        ("resnet18", (3, 32, 32), 10),
        ("resnet18", (3, 32, 32), 100),
    ],
)
def test_topk_fedavg_saving_is_the_seeds_76_88(name, shape, classes):
    layout = StateLayout.from_model(build_model(name, shape, classes))
    if name == "resnet18" and classes == 10:
        assert layout.dense_bytes == 44_764_968  # B0 of design: Ledgers
    saving = 1 - restricted_update_bytes(layout, 0.2) / layout.dense_bytes
    assert 0.76875 <= saving < 0.76876
    ceil_saving = (
        1
        - sum(field_bytes(s.numel, topk_count(s.numel, 0.2, "ceil")) for s in layout.tensors)
        / layout.dense_bytes
    )
    assert ceil_saving < 0.76875  # the recorded alternative prints 76.87 %
