"""Vectorized clients (``engine.vectorize``) against the per-client loop and the plain loop.

The clients of rounds 1..R of workload W (``workload_w.py``: 10 a round, 3 local epochs,
batch 128, SGD 0.05 / 0.9 / 1e-4, the unpadded ``cnn_valid``) are trained from one global
state, round by round, by

  plain-2t   the plain PyTorch loop of W (2 threads), client by client; CPU only (W's loop is
             CPU code)
  loop       reuse_ray's per-client ClientUpdate (``training.local_update``), client by client
  vector     reuse_ray's vectorized ClientUpdate (``vectorized.local_update_many``), the round's
             clients in groups of ``--group`` (one batched pass over stacked parameters a step)
  graphed    with ``--graphs``: the same at the group's fixed shape (``engine.vectorize_graphs``:
             every row, full batches), on CUDA one captured CUDA graph replayed per step

all in this one process, interleaved round by round, on ``--device`` (cpu: ``--threads``
threads for loop and vector; cuda: AMP off, fp32 storage, TF32 as ``--tf32`` says). It
prints the training seconds per round of each arm (median over rounds), the ratios, and the
largest elementwise and relative (L2) difference between the loop's and the vectorized Δ; on
CUDA also the GPU utilisation while each vectorized arm runs (``torch.cuda.utilization``,
sampled every 0.1 s). :func:`measure` returns the same figures to ``gpu_throughput.py``.

    python benchmarks/vectorize.py [--device cpu|cuda] [--rounds 3] [--threads 2]
        [--group 10] [--per-round 10] [--epochs 3] [--tf32 default|on|off] [--fast-kernels]
        [--graphs] [--cpu-reference] [--profile]

On CUDA: ``--tf32 on``/``off`` turns TF32 on or off in both convolutions and matrix products
(``default`` leaves torch's settings, which reuse_ray keeps: on in cuDNN convolutions, off in
matrix products); ``--fast-kernels`` lets cuDNN pick non-deterministic kernels
and benchmark them (reuse_ray itself always asks for deterministic ones); ``--cpu-reference``
also trains round 1's clients with the per-client loop on the CPU and prints how far each CUDA
arm's Δ is from it; ``--profile`` prints torch.profiler's table of one vectorized round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--group", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=10, help="clients a round (W: 10)")
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--epochs", type=int, default=None, help="local epochs (W: 3)")
    ap.add_argument("--tf32", default="default", choices=["default", "on", "off"])
    ap.add_argument("--fast-kernels", action="store_true")
    ap.add_argument("--cpu-reference", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--graphs", action="store_true", help="add the graphed arm")
    return ap


def main() -> None:
    measure(parser().parse_args())


def measure(args: argparse.Namespace, say=print) -> dict:
    """Train the arms round by round as the module says; print each round and the medians
    (through ``say``) and return them: ``seconds`` (arm -> median s/round), ``busy`` (arm ->
    median GPU utilisation %, CUDA only), ``rel_l2`` (arm -> the largest relative L2 distance
    of a client's Δ from the per-client loop's), ``no_graph`` (why a CUDA graph could not be
    captured, where it could not: the graphed arm then ran without one)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _measure(args, say)
    no_graph = sorted({str(w.message) for w in caught if "vectorize_graphs" in str(w.message)})
    for line in no_graph:
        say(f"  {line}")
    return dict(out, no_graph=no_graph)


def _measure(args: argparse.Namespace, say) -> dict:
    import workload_w as W

    from reuse_ray.participation import uniform_selection
    from reuse_ray.state import StateLayout
    from reuse_ray.training import configure_determinism, local_update
    from reuse_ray.vectorized import TrainRequest, local_update_many

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not visible to torch on this machine")
    configure_determinism(args.threads)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        if args.tf32 != "default":
            torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
            torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"
        if args.fast_kernels:
            torch.use_deterministic_algorithms(False)
            torch.backends.cudnn.deterministic = False
            torch.backends.cudnn.benchmark = True
        print(
            f"CUDA: TF32 in convolutions {torch.backends.cudnn.allow_tf32}, in matrix "
            f"products {torch.backends.cuda.matmul.allow_tf32}; deterministic kernels "
            f"{not args.fast_kernels}"
        )
    w = W.load("cnn_valid", args.samples)
    info, train = w.data.info, w.data.train
    model = w.model()
    layout = StateLayout.from_model(model)
    w0 = layout.flatten(model)
    kw = dict(
        seed=W.SEED,
        epochs=args.epochs or W.EPOCHS,
        batch_size=W.BATCH,
        momentum=W.MOMENTUM,
        weight_decay=W.WEIGHT_DECAY,
    )
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {"plain-2t": [], "loop": [], "vector": []}
    if args.graphs:
        times["graphed"] = []
    diffs, rels = [], []
    util: dict[str, list[float]] = {"vector": [], "graphed": []}
    far: dict[str, float] = {"vector": 0.0, "graphed": 0.0}
    for t in range(1, args.rounds + 1):
        clients = uniform_selection(W.SEED, t, W.CLIENTS, args.per_round)
        if dev.type == "cpu":  # W's plain loop is CPU code: on CUDA it is not an arm
            torch.set_num_threads(2)
            start = time.perf_counter()
            for c in clients:
                layout.load(model, w0)
                W.train_client(model, w, c, t)
            times["plain-2t"].append(time.perf_counter() - start)
        torch.set_num_threads(args.threads)
        sync()
        start = time.perf_counter()
        loop = [
            local_update(
                model,
                layout,
                w0,
                {},
                train,
                w.parts[c],
                info,
                round_=t,
                client=c,
                lr=W.LR,
                amp=False,
                device=dev,
                **kw,
            )
            for c in clients
        ]
        sync()
        times["loop"].append(time.perf_counter() - start)
        ordered = sorted(clients)
        requests = [TrainRequest(c, t, w0, w.parts[c], W.LR) for c in ordered]
        outs = {}
        for arm in [a for a in ("vector", "graphed") if a in times]:
            sampling = threading.Event()
            if dev.type == "cuda":
                sampling.set()
                threading.Thread(target=_sample, args=(util[arm], sampling), daemon=True).start()
            start = time.perf_counter()
            got = []
            for k in range(0, len(requests), args.group):
                got += local_update_many(
                    model,
                    layout,
                    requests[k : k + args.group],
                    train,
                    info,
                    device=dev,
                    graphs=arm == "graphed",
                    **kw,
                )
            sync()
            times[arm].append(time.perf_counter() - start)
            sampling.clear()
            outs[arm] = dict(zip(ordered, got, strict=True))
            for c, r in zip(clients, loop, strict=True):
                d = float((outs[arm][c].delta - r.delta).norm() / r.delta.norm())
                far[arm] = max(far[arm], d)
        by_client = outs["vector"]
        if args.cpu_reference and t == 1 and dev.type == "cuda":
            ref = [
                local_update(
                    model,
                    layout,
                    w0,
                    {},
                    train,
                    w.parts[c],
                    info,
                    round_=t,
                    client=c,
                    lr=W.LR,
                    amp=False,
                    device="cpu",
                    **kw,
                ).delta
                for c in clients
            ]
            for name, arm in (
                ("loop", [r.delta for r in loop]),
                ("vector", [by_client[c].delta for c in clients]),
            ):
                worst = max(float((a - r).norm() / r.norm()) for a, r in zip(arm, ref, strict=True))
                print(f"round 1, CUDA {name} vs the CPU per-client loop: max rel L2 {worst:.2e}")
        if args.profile and t == args.rounds and dev.type == "cuda":
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for k in range(0, len(requests), args.group):
                    local_update_many(
                        model, layout, requests[k : k + args.group], train, info, device=dev, **kw
                    )
                sync()
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15))
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
        pairs = [(r.delta, by_client[c].delta) for c, r in zip(clients, loop, strict=True)]
        diffs.append(max(float((a - b).abs().max()) for a, b in pairs))
        rels.append(max(float((a - b).norm() / a.norm()) for a, b in pairs))
        say(
            f"round {t}: "
            + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items() if v)
            + f", max |dDelta| {diffs[-1]:.2e}, max rel L2 {rels[-1]:.2e}"
        )
    med = {k: statistics.median(v) for k, v in times.items() if v}
    say(
        f"\ndevice {args.device}, threads {args.threads}, {args.per_round} clients a round, "
        f"groups of {args.group}, {args.rounds} rounds (median s/round of training):"
    )
    for k, v in med.items():
        say(f"  {k:9s} {v:7.2f} s")
    say(
        f"  vector / loop     {med['vector'] / med['loop']:.3f}  "
        f"(speed-up {med['loop'] / med['vector']:.2f}x)"
    )
    if "plain-2t" in med:
        say(f"  vector / plain-2t {med['vector'] / med['plain-2t']:.3f}")
        say(f"  loop / plain-2t   {med['loop'] / med['plain-2t']:.3f}")
    say(
        f"  max |Delta_loop - Delta_vector| over all clients: {max(diffs):.2e}, "
        f"max ||Delta_loop - Delta_vector|| / ||Delta_loop||: {max(rels):.2e}"
    )
    if "graphed" in med:
        say(
            f"  graphed / loop    {med['graphed'] / med['loop']:.3f}  "
            f"(speed-up {med['loop'] / med['graphed']:.2f}x), max rel L2 from the loop "
            f"{far['graphed']:.2e}"
        )
    busy = {arm: statistics.median(v) for arm, v in util.items() if v}
    for arm, v in busy.items():
        say(f"  GPU utilisation while {arm}: median {v:.0f} %")
    return {"seconds": med, "busy": busy, "rel_l2": far}


def _sample(out: list, running: threading.Event) -> None:
    while running.is_set():
        try:
            out.append(float(torch.cuda.utilization()))
        except Exception:  # noqa: BLE001 - no NVML: no figure
            return
        time.sleep(0.1)


if __name__ == "__main__":
    main()
