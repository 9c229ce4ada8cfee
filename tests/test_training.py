"""Local training, FedProx, FedAdam, models and keyed randomness (methods; design: Keyed streams
and pairing)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

from reuse_ray.algorithms.fedadam import FedAdamState, fedadam_step
from reuse_ray.config import DataConfig
from reuse_ray.data import crop_flip, load_dataset
from reuse_ray.errors import UserError
from reuse_ray.models import build_model, head_parameter_names, init_model
from reuse_ray.rng import Purpose, generator, torch_generator
from reuse_ray.state import StateLayout, int_buffers
from reuse_ray.training import evaluate, local_update


@pytest.fixture(scope="module")
def digits():
    return load_dataset(DataConfig(name="digits"))


def _train(model, layout, w, data, idx, **kw):
    args = dict(
        seed=1,
        round_=1,
        client=0,
        epochs=1,
        batch_size=len(idx),
        lr=0.1,
        momentum=0.0,
        weight_decay=0.0,
    )
    args.update(kw)
    return local_update(model, layout, w, int_buffers(model), data.train, idx, data.info, **args)


def test_local_update_is_keyed_and_deterministic(digits):
    model = init_model("cnn", (1, 8, 8), 10, seed=0, hidden=16)
    layout = StateLayout.from_model(model)
    w = layout.flatten(model)
    idx = np.arange(50)
    a = _train(model, layout, w, digits, idx, batch_size=8, epochs=2, momentum=0.9)
    b = _train(model, layout, w, digits, idx, batch_size=8, epochs=2, momentum=0.9)
    c = _train(model, layout, w, digits, idx, batch_size=8, epochs=2, momentum=0.9, round_=2)
    assert torch.equal(a.delta, b.delta) and a.steps == 2 * 7 and a.finite
    assert not torch.equal(a.delta, c.delta)  # another round, another shuffle


def test_fedprox_gradient_includes_mu_times_distance(digits):
    model = init_model("cnn", (1, 8, 8), 10, seed=0, hidden=16)
    layout = StateLayout.from_model(model)
    w = layout.flatten(model)
    idx = np.arange(40)
    mu, lr = 0.5, 0.1
    one_plain = _train(model, layout, w, digits, idx, epochs=1, lr=lr)
    one_prox = _train(model, layout, w, digits, idx, epochs=1, lr=lr, mu=mu)
    assert torch.equal(one_plain.delta, one_prox.delta)  # zero at the first step (θ = θ_w)
    two_plain = _train(model, layout, w, digits, idx, epochs=2, lr=lr)
    two_prox = _train(model, layout, w, digits, idx, epochs=2, lr=lr, mu=mu)
    # second step: g + μ(θ1 − θ_w) = g + μΔ1  ⇒  Δ2_prox − Δ2_plain = −lr·μ·Δ1
    diff = two_prox.delta - two_plain.delta
    assert torch.allclose(diff, -lr * mu * one_plain.delta, atol=1e-6)
    assert diff.abs().max() > 1e-5


def test_correction_hook_is_added_to_gradients(digits):
    model = init_model("cnn", (1, 8, 8), 10, seed=0, hidden=16)
    layout = StateLayout.from_model(model)
    w = layout.flatten(model)
    idx = np.arange(40)
    plain = _train(model, layout, w, digits, idx, lr=0.1)
    corr = {n: torch.full_like(p, 0.5) for n, p in model.named_parameters()}
    corrected = _train(model, layout, w, digits, idx, lr=0.1, correction=corr)
    # one plain SGD step: Δ_corrected − Δ_plain = −lr · c
    assert torch.allclose(corrected.delta - plain.delta, torch.full_like(w, -0.05), atol=1e-6)


def test_fedadam_one_round_oracle():
    eta, b1, b2, tau, c = 0.01, 0.9, 0.99, 1e-3, 0.2
    d = 4
    mask = torch.tensor([True, True, True, False])
    state = FedAdamState(torch.zeros(3), torch.full((3,), tau * tau))
    w = torch.zeros(d)
    w_next, new = fedadam_step(w, torch.full((d,), c), mask, state, eta, b1, b2, tau)
    expect = eta * (1 - b1) * c / (np.sqrt((1 - b2) * c * c + b2 * tau * tau) + tau)
    assert torch.allclose(w_next[:3], torch.full((3,), expect, dtype=torch.float32))
    assert w_next[3].item() == pytest.approx(c)  # non-trainable float buffer: plain average
    assert torch.allclose(new.m, torch.full((3,), (1 - b1) * c))


def test_models_head_rule_and_shapes():
    cnn = build_model("cnn", (1, 8, 8), 10, hidden=32)
    assert head_parameter_names(cnn) == ["fc.weight", "fc.bias"]
    names = [n for n, _ in cnn.named_parameters()]
    assert not any(("fc" in n or "classifier" in n) for n in names if not n.startswith("fc."))
    assert cnn(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    rn = build_model("resnet18", (3, 32, 32), 10)
    assert head_parameter_names(rn) == ["fc.weight", "fc.bias"]
    layout = StateLayout.from_model(rn)
    assert "bn1.running_mean" in [s.name for s in layout.tensors]
    assert not any("num_batches_tracked" in s.name for s in layout.tensors)
    assert int(layout.trainable_mask().sum()) == sum(p.numel() for p in rn.parameters())


def test_the_unpadded_cnn_is_the_classic_mnist_network():
    m = build_model("cnn_valid", (1, 28, 28), 10, hidden=512)
    # conv 1x32x5x5 + 32, conv 32x64x5x5 + 64, 1024 -> 512, 512 -> 10: 582,026 parameters
    assert m.hidden.in_features == 64 * 4 * 4
    assert sum(p.numel() for p in m.parameters()) == 832 + 51_264 + 524_800 + 5_130
    assert head_parameter_names(m) == ["fc.weight", "fc.bias"]
    assert m(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    with pytest.raises(UserError, match="at least 12x12"):
        build_model("cnn_valid", (1, 8, 8), 10)
    # the padded network's layers, sizes and init are unchanged
    assert build_model("cnn", (1, 28, 28), 10, hidden=512).hidden.in_features == 64 * 7 * 7


def test_model_init_is_keyed():
    a = StateLayout.from_model(m := init_model("cnn", (1, 8, 8), 10, seed=5)).flatten(m)
    b = StateLayout.from_model(m := init_model("cnn", (1, 8, 8), 10, seed=5)).flatten(m)
    c = StateLayout.from_model(m := init_model("cnn", (1, 8, 8), 10, seed=6)).flatten(m)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_streams_are_independent_of_consumption_elsewhere():
    g1 = generator(9, Purpose.SELECT, 4)
    _ = generator(9, Purpose.TRAIN_SHUFFLE, 4, 2).random(1000)  # another purpose consumes
    g2 = generator(9, Purpose.SELECT, 4)
    assert np.array_equal(g1.random(5), g2.random(5))
    assert not np.array_equal(
        generator(9, Purpose.SELECT, 4).random(3), generator(9, Purpose.SELECT, 5).random(3)
    )


def test_crop_flip_is_keyed():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    a = crop_flip(x, torch_generator(1, Purpose.AUGMENT, 1, 0))
    b = crop_flip(x, torch_generator(1, Purpose.AUGMENT, 1, 0))
    c = crop_flip(x, torch_generator(1, Purpose.AUGMENT, 1, 1))
    assert torch.equal(a, b) and not torch.equal(a, c) and a.shape == x.shape


def test_evaluate_reports_accuracy_and_loss(digits):
    model = init_model("cnn", (1, 8, 8), 10, seed=0, hidden=16)
    layout = StateLayout.from_model(model)
    acc, loss = evaluate(model, layout, layout.flatten(model), digits.val, digits.info)
    assert 0.0 <= acc <= 0.35 and loss == pytest.approx(np.log(10), rel=0.2)


@pytest.mark.parametrize("name", ["cnn_valid", "cnn"])
def test_evaluate_in_chunks_gives_the_whole_batch_bits(name, monkeypatch):
    """On a CPU each evaluation batch runs its forward in chunks of EVAL_CHUNK samples;
    the (accuracy, loss) pair is the one the whole batch at once gives, bit for bit."""
    import reuse_ray.training as training
    from reuse_ray.data.registry import ArraySplit, DatasetInfo

    rng = np.random.default_rng(3)
    split = ArraySplit(
        rng.integers(0, 256, (600, 1, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, 600).astype(np.int64),
    )
    info = DatasetInfo("w", 10, (1, 28, 28), 1 / 255, (0.5,), (0.25,), "none")
    model = init_model(name, (1, 28, 28), 10, seed=0, hidden=64)
    layout = StateLayout.from_model(model)
    w = layout.flatten(model)
    chunked = evaluate(model, layout, w, split, info, batch_size=512)
    # batches evaluated apart (as the Ray engine's workers do) and added in order: same bits
    parts = [
        training.evaluate_batches(model, layout, w, split, info, 128, batches=range(a, b))
        for a, b in ((0, 1), (1, 4), (4, 5))
    ]
    whole = training.evaluate(model, layout, w, split, info, batch_size=128)
    assert training.combine_batches([x for p in parts for x in p], len(split)) == whole
    monkeypatch.setattr(training, "EVAL_CHUNK", 10**6)
    assert evaluate(model, layout, w, split, info, batch_size=512) == chunked


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_retained_memory_spares_the_page_faults_of_large_blocks():
    """A 40 MB block malloc'ed, written and freed twenty times: glibc maps it afresh each time (its
    adaptive threshold stops at 32 MB), faulting every page in again; with the memory kept,
    only the first time. REUSE_RAY_MALLOC=default leaves malloc alone."""
    import subprocess

    code = (
        "import ctypes, resource\n"
        "from reuse_ray.allocator import retain_freed_memory\n"
        "print(retain_freed_memory())\n"
        "libc = ctypes.CDLL('libc.so.6'); libc.malloc.restype = ctypes.c_void_p\n"
        "libc.free.argtypes = [ctypes.c_void_p]\n"
        "f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "for _ in range(20):\n"
        "    a = libc.malloc(40 << 20); ctypes.memset(a, 1, 40 << 20); libc.free(a)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)\n"
    )
    runs = {}
    for mode in ("default", "retain"):
        env = dict(os.environ, REUSE_RAY_MALLOC=mode)
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        ).stdout.split()
        runs[mode] = (out[0] == "True", int(out[1]))
    assert runs["default"][0] is False and runs["retain"][0] is True
    assert runs["default"][1] > 20 * 9000  # 10,240 pages a block
    assert runs["retain"][1] < runs["default"][1] / 5


@pytest.mark.slow  # a fresh interpreter importing torch: ~3 s
def test_determinism_switch_skips_the_compiler_stack():
    """A training process sets deterministic kernels (warn-only) without importing torch's
    compiler stack (dynamo, inductor, triton), which costs ~150 MB in every worker."""
    import subprocess
    import sys

    code = (
        "import sys, torch; from reuse_ray.training import configure_determinism; "
        "configure_determinism(1); "
        "print(torch.are_deterministic_algorithms_enabled(), "
        "torch.is_deterministic_algorithms_warn_only_enabled(), torch.get_num_threads(), "
        "sorted(m for m in ('torch._dynamo', 'torch._inductor', 'triton') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == "True True 1 []"


def test_heavy_ball_sgd_matches_torch_sgd_bit_for_bit():
    import torch

    from reuse_ray.training import HeavyBallSGD

    g = torch.Generator().manual_seed(0)
    for momentum, wd in ((0.9, 1e-4), (0.0, 0.0), (0.5, 0.0), (0.0, 5e-3)):
        ours = [torch.randn(5, 3, generator=g), torch.randn(7, generator=g), torch.randn(2)]
        ref = [p.clone() for p in ours]
        a, b = (
            HeavyBallSGD(ours, 0.05, momentum, wd),
            torch.optim.SGD(ref, lr=0.05, momentum=momentum, weight_decay=wd),
        )
        for step in range(6):
            a.zero_grad(set_to_none=True)
            b.zero_grad(set_to_none=True)
            for i, (p, q) in enumerate(zip(ours, ref, strict=True)):
                if i == 2 and step % 2:  # a parameter without a gradient this step
                    continue
                grad = torch.randn(p.shape, generator=g)
                p.grad, q.grad = grad.clone(), grad.clone()
            a.step()
            b.step()
            for p, q in zip(ours, ref, strict=True):
                assert torch.equal(p, q)


@pytest.mark.slow  # a fresh interpreter importing torch: ~3 s
def test_local_training_imports_no_compiler_stack():
    """A client worker trains, per client and vectorized, without importing torch's compiler
    stack."""
    import subprocess
    import sys

    code = """
import sys, numpy as np
from reuse_ray.data.registry import ArraySplit, DatasetInfo
from reuse_ray.models import init_model
from reuse_ray.state import StateLayout, int_buffers
from reuse_ray.training import configure_determinism, local_update
configure_determinism(1)
model = init_model("cnn", (1, 8, 8), 10, 0, 16)
layout = StateLayout.from_model(model)
data = ArraySplit(np.zeros((20, 1, 8, 8), np.float32), np.arange(20) % 10)
info = DatasetInfo("synthetic", 10, (1, 8, 8), 1.0, (0.0,), (1.0,), "none")
res = local_update(model, layout, layout.flatten(model), int_buffers(model), data, np.arange(20),
                   info, seed=0, round_=1, client=0, epochs=2, batch_size=8, lr=0.05,
                   momentum=0.9, weight_decay=1e-4)
assert res.steps == 6 and res.finite
from reuse_ray.vectorized import TrainRequest, local_update_many
reqs = [TrainRequest(c, 1, layout.flatten(model), np.arange(10 * c, 10 * c + 10), 0.05)
        for c in range(2)]
out = local_update_many(model, layout, reqs, data, info, seed=0, epochs=2, batch_size=8,
                        momentum=0.9, weight_decay=1e-4)
assert [r.steps for r in out] == [4, 4] and all(r.finite for r in out)
print(sorted(k for k in ("torch._dynamo", "triton") if k in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _crop_flip_loop(x, gen, pad=4):
    """The crop and flip written image by image: the reference for the one-gather version."""
    b, _, h, w = x.shape
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    offs = torch.randint(0, 2 * pad + 1, (b, 2), generator=gen)
    flips = torch.rand(b, generator=gen) < 0.5
    out = torch.empty_like(x)
    for j in range(b):
        oy, ox = int(offs[j, 0]), int(offs[j, 1])
        img = padded[j, :, oy : oy + h, ox : ox + w]
        out[j] = img.flip(-1) if bool(flips[j]) else img
    return out


def test_crop_flip_equals_the_image_by_image_crop():
    x = torch.randn(37, 3, 9, 7)
    for client in range(4):
        got = crop_flip(x, torch_generator(5, Purpose.AUGMENT, 2, client))
        want = _crop_flip_loop(x, torch_generator(5, Purpose.AUGMENT, 2, client))
        assert torch.equal(got, want)
    # a hand case: 1x1x2x2 image, pad 1 -> every crop is a shifted window of the padded 4x4
    img = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    gen = torch_generator(0, Purpose.AUGMENT, 0, 0)
    state = gen.get_state()
    oy, ox = (int(v) for v in torch.randint(0, 3, (1, 2), generator=gen)[0])
    flip = bool(torch.rand(1, generator=gen)[0] < 0.5)
    gen.set_state(state)
    padded = torch.zeros(4, 4)
    padded[1:3, 1:3] = img[0, 0]
    window = padded[oy : oy + 2, ox : ox + 2]
    assert torch.equal(crop_flip(img, gen, pad=1)[0, 0], window.flip(-1) if flip else window)


def test_batch_images_gathers_rows_or_a_slice():
    from reuse_ray.data.registry import ArraySplit, DatasetInfo
    from reuse_ray.data.transforms import batch_images

    info = DatasetInfo("t", 3, (1, 2, 2), mean=(0.5,), std=(0.25,), scale=1 / 255, augment="none")
    xs = np.arange(5 * 4, dtype=np.uint8).reshape(5, 1, 2, 2)
    split = ArraySplit(xs, np.array([0, 1, 2, 0, 1], dtype=np.int64))
    x, y = batch_images(split, np.array([3, 0]), info, torch.device("cpu"))
    assert y.tolist() == [0, 0]
    # (v / 255 - 0.5) / 0.25 for the stored values 12..15 and 0..3
    want = (torch.tensor([[12.0, 13, 14, 15], [0, 1, 2, 3]]) * (1 / 255) - 0.5) / 0.25
    assert torch.equal(x.view(2, 4), want.float())
    xs2, ys2 = batch_images(split, slice(1, 3), info, torch.device("cpu"))
    assert ys2.tolist() == [1, 2] and xs2.shape == (2, 1, 2, 2)


def test_accelerator_gather_equals_the_host_transform():
    """The accelerator path of batch_images (a copy of the stored array, gathered there, then
    normalised) gives the host transform's values; run here with the CPU as the 'device'."""
    import gc

    from reuse_ray.data.registry import DatasetInfo
    from reuse_ray.data.transforms import _ON_DEVICE, normalize, on_device, to_tensor

    info = DatasetInfo(
        "t", 3, (3, 4, 4), mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3), scale=1 / 255, augment="none"
    )
    xs = np.random.default_rng(0).integers(0, 256, (9, 3, 4, 4)).astype(np.uint8)
    idx = np.array([7, 0, 7, 3])
    cpu = torch.device("cpu")
    copy = on_device(xs, cpu)
    assert on_device(xs, cpu) is copy  # made once per array and device
    got = normalize(copy.index_select(0, torch.from_numpy(idx)), info)
    assert torch.equal(got, to_tensor(xs[idx], info))
    key = (id(xs), "cpu")
    assert key in _ON_DEVICE
    del xs, copy
    gc.collect()
    assert key not in _ON_DEVICE  # the entry leaves with its array
