"""Client compute saved by DG-FedReuse against Top-K FedAvg, same workload and seed, one run.

Both methods run on the local engine (one process, client work at 1 thread) at the paper's
frozen DG configuration (configs/dg_paper.yaml values, its 90 rounds) with r = 0.2, on workload
W's data (20,000 synthetic 1x28x28 images, 50 clients with Dirichlet 0.5, 10 per round,
3 epochs, batch 128). The two runs are **interleaved round by round** (the order alternates every
round), so the machine's speed drift — ±30 % between identical rounds on a shared 2-core
machine — hits both alike instead of whichever phase it happens to fall in. Printed, as
measured in this run:
  * DG round wall time / Top-K FedAvg round wall time (sum over all rounds; gate and refresh
    proxies included: they run inside the round)
  * DG client training steps / Top-K FedAvg client training steps
plus each method's fresh fraction, cumulative restricted uplink saving and final validation
accuracy.

    python benchmarks/dg_compute.py [--rounds 90] [--samples 20000]
"""

from __future__ import annotations

import argparse
import time

from reuse_ray.accounting import saving
from reuse_ray.config import RunConfig, from_dict, load_config_dict
from reuse_ray.engine import LocalBackend, RunSetup, prepare_data, select_clients
from reuse_ray.models import init_model, resolve_model_name
from reuse_ray.state import StateLayout
from reuse_ray.training import configure_determinism, evaluate


def config(method: str, rounds: int, samples: int, results: str) -> RunConfig:
    base = load_config_dict("configs/dg_paper.yaml")
    base.update(
        data={"name": "synthetic", "synthetic_samples": int(samples / 0.72),
              "synthetic_shape": [1, 28, 28]},
        model={"name": "cnn", "hidden": 128},
        engine={"backend": "local"},
        results_dir=results,
    )  # fmt: skip
    base["fl"] = dict(base["fl"], rounds=rounds, eval_every=rounds)
    base["method"] = dict(base["method"], name=method)
    return from_dict(RunConfig, base)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=90)
    ap.add_argument("--samples", type=int, default=20000)
    args = ap.parse_args()
    names = ("fedavg", "dg_fedreuse")
    cfgs = {m: config(m, args.rounds, args.samples, "unused") for m in names}
    configure_determinism(cfgs["fedavg"].train.threads)
    data, parts = prepare_data(cfgs["fedavg"])  # same seed and data: same partitions for both
    model_name = resolve_model_name("cnn", data.info.name)
    backends = {}
    for m in names:
        backends[m] = LocalBackend()
        backends[m].start(RunSetup(cfgs[m], data.info, data.train, tuple(parts), model_name))
    stats = {m: {"wall": 0.0, "steps": 0, "fresh": 0, "selected": 0, "up": 0, "ref": 0}
             for m in names}  # fmt: skip
    for t in range(1, args.rounds + 1):
        order = names if t % 2 else names[::-1]
        line = []
        for m in order:
            selected = select_clients(cfgs[m], t)
            t0 = time.perf_counter()
            report = backends[m].run_round(t, selected)
            wall = time.perf_counter() - t0
            s = stats[m]
            s["wall"] += wall
            s["steps"] += sum(c.local_steps for c in report.clients)
            s["fresh"] += sum(c.decision == "fresh" for c in report.clients)
            s["selected"] += len(report.clients)
            s["up"] += sum(c.up_restricted for c in report.clients)
            s["ref"] += report.dense_bytes * len(report.clients)
            line.append(f"{m} {wall:.2f}s")
        print(f"round {t:>3}/{args.rounds}: " + ", ".join(line), flush=True)
    model = init_model(model_name, data.info.shape, data.info.num_classes, cfgs["fedavg"].seed,
                       cfgs["fedavg"].model.hidden)  # fmt: skip
    layout = StateLayout.from_model(model)
    a, d = stats["fedavg"], stats["dg_fedreuse"]
    for label, m in (("Top-K FedAvg", "fedavg"), ("DG-FedReuse", "dg_fedreuse")):
        s = stats[m]
        val = evaluate(model, layout, backends[m].weights(), data.val, data.info)[0]
        print(f"{label:13s} total round time {s['wall']:.1f} s ({s['wall'] / args.rounds:.2f} "
              f"s/round), client steps {s['steps']}, fresh fraction "
              f"{s['fresh'] / s['selected']:.3f}, cum. restricted saving "
              f"{100 * saving(s['up'], s['ref']):.2f}%, final val acc {val:.4f}")  # fmt: skip
    print(f"DG / Top-K FedAvg round wall time: {d['wall'] / a['wall']:.3f}  (goal <= 0.75)")
    print(f"DG / Top-K FedAvg client steps:    {d['steps'] / a['steps']:.3f}")


if __name__ == "__main__":
    main()
