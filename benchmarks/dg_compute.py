"""Client compute saved by DG-FedReuse against Top-K FedAvg, same workload and seed, one run.

Both methods run on the local engine (one process, client work at 1 thread) at the paper's
frozen DG configuration (configs/dg_paper.yaml values) with r = 0.2, on workload W's data
(20,000 synthetic 1x28x28 images, 50 clients with Dirichlet 0.5, 10 per round, 3 epochs, batch
128). Printed, as measured in this run:
  * DG round wall time / Top-K FedAvg round wall time (mean over all rounds; proxies included)
  * DG client training steps / Top-K FedAvg client training steps
plus each method's cumulative restricted uplink saving and final validation accuracy.

    python benchmarks/dg_compute.py [--rounds 20] [--samples 20000]
"""

from __future__ import annotations

import argparse
import tempfile

from reuse_ray.config import RunConfig, from_dict, load_config_dict
from reuse_ray.engine import run_fl
from reuse_ray.results import read_table


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
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--samples", type=int, default=20000)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dg-compute-")
    out = {}
    for method in ("fedavg", "dg_fedreuse"):
        cfg = config(method, args.rounds, args.samples, f"{tmp}/{method}")
        summary = run_fl(cfg, progress=lambda m: print("  " + m, flush=True))
        rounds = read_table(cfg.results_dir, "rounds")
        out[method] = {
            "wall": rounds["round_wall_s"].mean(),
            "steps": int(rounds["client_steps"].sum()),
            "saving": summary.row["cum_saving_restricted"],
            "val": summary.row["final_val_acc"],
            "fresh": rounds["num_fresh"].sum() / rounds["num_selected"].sum(),
        }
    a, d = out["fedavg"], out["dg_fedreuse"]
    for name, m in (("Top-K FedAvg", a), ("DG-FedReuse", d)):
        print(f"{name:13s} mean round {m['wall']:.3f} s, client steps {m['steps']}, fresh "
              f"fraction {m['fresh']:.3f}, cum. restricted saving {100 * m['saving']:.2f}%, "
              f"final val acc {m['val']:.4f}")  # fmt: skip
    print(f"DG / Top-K FedAvg round wall time: {d['wall'] / a['wall']:.3f}  (goal <= 0.75)")
    print(f"DG / Top-K FedAvg client steps:    {d['steps'] / a['steps']:.3f}")


if __name__ == "__main__":
    main()
