"""Client compute saved by DG-FedReuse against Top-K FedAvg, same workload and seed, one run.

Both methods run on the local engine (one process, client work at 1 thread) at the paper's
frozen DG configuration (configs/dg_paper.yaml values, its 90 rounds) with r = 0.2, on one of
two datasets: ``--data w`` (default), workload W's data (20,000 synthetic 1x28x28 images, the
shallow CNN), or ``--data digits``, the preset's own embedded digits data (1,797 real 8x8 images,
about 26 training samples per client); both with 50 clients, Dirichlet 0.5, 10 per round,
3 epochs, batch 128. ``--gate-off`` adds a third arm, DG-FedReuse with ``gate: off`` (age cap,
quota and first-visit rule only, no proxies), which separates what the schedule saves from what
the gate costs. The runs are **interleaved round by round** (the order alternates every
round), so the machine's speed drift — ±30 % between identical rounds on a shared 2-core
machine — hits both alike instead of whichever phase it happens to fall in. Printed, as
measured in this run:
  * DG round wall time / Top-K FedAvg round wall time (sum over all rounds; gate and refresh
    proxies included: they run inside the round)
  * DG client training steps / Top-K FedAvg client training steps
plus each method's fresh fraction, cumulative restricted uplink saving and final validation
accuracy.

    python benchmarks/dg_compute.py [--data w|digits] [--rounds 90] [--samples 20000] [--gate-off]
"""

from __future__ import annotations

import argparse
import time

from reuse_ray.accounting import saving
from reuse_ray.config import RunConfig
from reuse_ray.configio import from_dict, load_config_dict
from reuse_ray.engine import LocalBackend, make_setup, prepare_data, select_clients
from reuse_ray.models import init_model, resolve_model_name
from reuse_ray.state import StateLayout
from reuse_ray.training import configure_determinism, evaluate

ARMS = {  # label -> (method.name, gate)
    "Top-K FedAvg": ("fedavg", None),
    "DG-FedReuse": ("dg_fedreuse", "proxy"),
    "DG gate=off": ("dg_fedreuse", "off"),
}


def config(arm: str, data: str, rounds: int, samples: int, results: str) -> RunConfig:
    """The preset with one arm's method, on W's synthetic data or the preset's digits."""
    base = load_config_dict("configs/dg_paper.yaml")
    if data == "w":
        base.update(
            data={
                "name": "synthetic",
                "synthetic_samples": int(samples / 0.72),
                "synthetic_shape": [1, 28, 28],
            },
            model={"name": "cnn", "hidden": 128},
        )
    base.update(engine={"backend": "local"}, results_dir=results)
    base["fl"] = dict(base["fl"], rounds=rounds, eval_every=rounds)
    method, gate = ARMS[arm]
    base["method"] = dict(base["method"], name=method)
    if gate is not None:
        base["method"]["dg"] = dict(base["method"]["dg"], gate=gate)
    else:  # the preset's DG block belongs to the DG arms only
        base["method"].pop("dg", None)
    return from_dict(RunConfig, base)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("w", "digits"), default="w")
    ap.add_argument("--rounds", type=int, default=90)
    ap.add_argument("--samples", type=int, default=20000, help="W's training samples")
    ap.add_argument("--gate-off", action="store_true", help="add the DG gate=off arm")
    args = ap.parse_args()
    names = list(ARMS)[: 3 if args.gate_off else 2]
    cfgs = {m: config(m, args.data, args.rounds, args.samples, "unused") for m in names}
    ref = cfgs[names[0]]
    configure_determinism(ref.train.threads)
    data, parts = prepare_data(ref)  # same seed and data: same partitions for every arm
    model_name = resolve_model_name(ref.model.name, data.info.name)
    backends = {}
    for m in names:
        backends[m] = LocalBackend()
        backends[m].start(make_setup(cfgs[m], data, parts)[0])
    stats = {
        m: {"wall": 0.0, "steps": 0, "fresh": 0, "selected": 0, "up": 0, "ref": 0} for m in names
    }
    print(
        f"data {data.info.name}: {len(data.train)} training samples over {len(parts)} clients, "
        f"model {model_name}, {args.rounds} rounds, arms interleaved",
        flush=True,
    )
    for t in range(1, args.rounds + 1):
        k = (t - 1) % len(names)
        order = names[k:] + names[:k]  # rotate who runs first, so drift hits every arm alike
        line = []
        for m in order:
            selected = select_clients(cfgs[m], t)
            t0 = time.perf_counter()
            report = backends[m].run_round(t, selected)
            wall = time.perf_counter() - t0
            s = stats[m]
            s["wall"] += wall
            s["steps"] += sum(c.local_steps for c in report.clients)
            s["fresh"] += sum(c.decision.fresh for c in report.clients)
            s["selected"] += len(report.clients)
            s["up"] += sum(c.up_restricted for c in report.clients)
            s["ref"] += report.dense_bytes * len(report.clients)
            line.append(f"{m} {wall:.2f}s")
        print(f"round {t:>3}/{args.rounds}: " + ", ".join(line), flush=True)
    model = init_model(
        model_name, data.info.shape, data.info.num_classes, ref.seed, ref.model.hidden
    )
    layout = StateLayout.from_model(model)
    for m in names:
        s = stats[m]
        val = evaluate(model, layout, backends[m].weights(), data.val, data.info)[0]
        print(
            f"{m:13s} total round time {s['wall']:.1f} s ({s['wall'] / args.rounds:.3f} "
            f"s/round), client steps {s['steps']}, fresh fraction "
            f"{s['fresh'] / s['selected']:.3f}, cum. restricted saving "
            f"{100 * saving(s['up'], s['ref']):.2f}%, final val acc {val:.4f}"
        )
    a = stats["Top-K FedAvg"]
    for m in names[1:]:
        d = stats[m]
        goal = "  (goal <= 0.75)" if m == "DG-FedReuse" else ""
        print(f"{m} / Top-K FedAvg round wall time: {d['wall'] / a['wall']:.3f}{goal}")
        print(f"{m} / Top-K FedAvg client steps:    {d['steps'] / a['steps']:.3f}")


if __name__ == "__main__":
    main()
