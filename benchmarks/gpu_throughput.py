"""Trials packed on one device: runs per hour of one sweep's trials at 1, 2, 4 and 8 trials per
GPU (each trial on the Ray engine with one client worker holding ``1/k`` of the GPU), the GPU's
busy share while they run, and whether every trial's metrics are bit-identical to the same trial
run alone (k = 1).

The workload is the Fashion-MNIST study's (``sweeps/study_fashionmnist.yaml``: 57,000 training
images, 50 clients, 10 a round, ``cnn_valid`` hidden 128, one local epoch at batch 32) for
``--rounds`` rounds, Top-K FedAvg at r = 0.1 over a grid of ``--trials`` learning rates, so every
packing runs the same trials. Before each packing the free GPU memory is checked against ``k``
times the most one trial used alone (nvidia-smi's peak over the k = 1 pass, above what was in use
before it); a packing that would not fit is skipped with a line saying so.

Then the vectorized clients (``vectorize.py``'s arms on workload W, 10 and 50 clients a round,
each round's clients in one group): seconds of local training per round of the per-client loop,
the vectorized step and the graphed one (``engine.vectorize_graphs``: one CUDA graph replayed a
step), their speed-up over the loop, the GPU's busy share while each runs, and how far each
client's update is from the loop's (relative L2).

``--device cpu`` is a dry run of the script on the CPU (digits, the client worker holding
``cpus / k`` of the CPUs), which the test suite does not time. Two tables at the end:

    python benchmarks/gpu_throughput.py [--device cuda|cpu] [--per-device 1,2,4,8]
        [--trials 8] [--rounds 4] [--parts packing,vector] [--vector-clients 10,50]
        [--vector-rounds 2] [--vector-samples 57000]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import tempfile
import threading
import time

import pandas as pd

from analysis.tables import markdown

METRICS = ["val_acc", "val_loss", "train_loss", "up_restricted", "up_measured", "update_norm"]


def _smi(query: str) -> list[float]:
    """nvidia-smi's reading of ``query`` per GPU (empty without nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [float(v) for v in out.split() if v.replace(".", "", 1).isdigit()]


class Sampler:
    """GPU utilisation and memory in use, sampled every 0.5 s while a packing runs."""

    def __init__(self):
        self.busy: list[float] = []
        self.used: list[float] = []
        self.running = threading.Event()

    def __enter__(self):
        self.running.set()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def _loop(self):
        while self.running.is_set():
            got = _smi("utilization.gpu,memory.used")
            if len(got) >= 2:
                self.busy.append(got[0])
                self.used.append(got[1])
            time.sleep(0.5)

    def __exit__(self, *exc):
        self.running.clear()
        self.thread.join()


def sweep_raw(device: str, k: int, trials: int, rounds: int, cpus: float, out: str) -> dict:
    """The sweep of one packing: ``trials`` learning rates, one trial's worker holding 1/k of
    the device."""
    if device == "cuda":
        data = {"name": "fashionmnist", "val_fraction": 0.05}
        model = {"name": "cnn_valid", "hidden": 128}
        trial = {"backend": "ray", "cpus": 0, "workers": 1, "gpu_fraction": 1.0 / k}
    else:  # the dry run: digits, CPU shares
        data = {"name": "digits", "val_fraction": 0.1}
        model = {"name": "cnn", "hidden": 16}
        trial = {"backend": "ray", "cpus": 0, "workers": 1, "cpu_per_worker": cpus / k}
    lrs = [round(0.02 + 0.01 * j, 4) for j in range(trials)]
    return {
        "name": f"pack{k}",
        "base": {
            "seed": 101,
            "data": data,
            "partition": {"kind": "dirichlet", "alpha": 0.5, "min_size": 10},
            "model": model,
            "train": {"epochs": 1, "batch_size": 32, "lr": 0.05, "momentum": 0.9},
            "fl": {"num_clients": 50, "clients_per_round": 10, "rounds": rounds, "eval_every": 1},
            "method": {"name": "fedavg", "topk_ratio": 0.1},
        },
        "search": {"searcher": "grid", "grid": {"train.lr": lrs}, "num_samples": 1},
        "trial": trial,
        "results_dir": out,
    }


def digests(folder: str) -> dict[str, str]:
    """Per run (by its learning rate): a digest of its per-round metrics."""
    from reuse_ray.results import read_table

    runs, rounds = read_table(folder, "runs"), read_table(folder, "rounds")
    out = {}
    for _, r in runs.iterrows():
        x = rounds[rounds["run_id"] == r["run_id"]].sort_values("round")[METRICS]
        key = f"{r['cfg.train.lr']:.4f}"
        h = hashlib.sha256()
        for c in METRICS:  # every bit of every value
            h.update(x[c].to_numpy(dtype="float64", na_value=float("nan")).tobytes())
        out[key] = h.hexdigest()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--per-device", default="1,2,4,8")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--parts", default="packing,vector")
    ap.add_argument("--vector-clients", default="10,50")
    ap.add_argument("--vector-rounds", type=int, default=2)
    ap.add_argument("--vector-samples", type=int, default=57000)
    args = ap.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no GPU available: CUDA is not visible to torch on this machine")
        return
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    parts = args.parts.split(",")
    if "packing" in parts:
        table, cpus = packing(args)
        where = name if args.device == "cuda" else f"CPU ({cpus:g} cores)"
        print(f"\n{where}, {args.rounds} rounds a run, torch {torch.__version__}")
        print(markdown(table) if len(table) else "no packing ran")
    if "vector" in parts:
        table = vectorized(args)
        print(f"\n{name}, vectorized clients (workload W), torch {torch.__version__}")
        print(markdown(table))


def vectorized(args) -> pd.DataFrame:
    """``vectorize.py``'s arms at each ``--vector-clients`` count, the round's clients in one
    group: a row per arm with its median seconds a round, speed-up, busy share, distance."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import vectorize

    rows = []
    for n in (int(v) for v in args.vector_clients.split(",")):
        opts = ["--device", args.device, "--rounds", str(args.vector_rounds), "--graphs"]
        opts += ["--per-round", str(n), "--group", str(n)]
        opts += ["--samples", str(args.vector_samples)]
        got = vectorize.measure(vectorize.parser().parse_args(opts), say=lambda m: None)
        loop = got["seconds"]["loop"]
        graph = (
            ""
            if args.device != "cuda"
            else ("no: " + got["no_graph"][0])
            if got["no_graph"]
            else "yes"
        )
        for arm in ("loop", "vector", "graphed"):
            rows.append(
                {
                    "clients a round": n,
                    "arm": arm,
                    "s/round": round(got["seconds"][arm], 3),
                    "× the loop": round(loop / got["seconds"][arm], 2),
                    "busy % (median)": round(got["busy"][arm]) if arm in got["busy"] else "",
                    "max rel L2 vs the loop": "" if arm == "loop" else f"{got['rel_l2'][arm]:.1e}",
                    "CUDA graph": graph if arm == "graphed" else "",
                }
            )
        print(rows[-2], rows[-1], flush=True)
    return pd.DataFrame(rows)


def packing(args) -> tuple[pd.DataFrame, float]:
    """Runs per hour at each ``--per-device`` packing; (the table, the cluster's CPUs)."""
    import ray
    import torch

    from reuse_ray.tuning import parse_experiment, run_sweep

    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    cpus = float(ray.cluster_resources().get("CPU", 1))
    rows, alone, per_trial_mb = [], None, None
    for k in (int(v) for v in args.per_device.split(",")):
        if args.device == "cuda" and per_trial_mb is not None:
            free_mb = (torch.cuda.mem_get_info()[0]) / 2**20
            if k * per_trial_mb > 0.9 * free_mb:
                print(f"{k} per GPU: skipped, {k} x {per_trial_mb:.0f} MB > 90 % of free")
                continue
        out = tempfile.mkdtemp(prefix=f"pack{k}-")
        spec = parse_experiment(sweep_raw(args.device, k, args.trials, args.rounds, cpus, out))
        before = max(_smi("memory.used") or [0.0])
        t0 = time.perf_counter()
        with Sampler() as s:
            res = run_sweep(spec, say=lambda m: None)
        wall = time.perf_counter() - t0
        done = int((res.trials["status"] == "finished").sum())
        if k == 1 and s.used:
            per_trial_mb = max(s.used) - before
        got = digests(out)
        alone = got if alone is None else alone
        same = sum(got.get(lr) == d for lr, d in alone.items())
        busy = pd.Series(s.busy)
        rows.append(
            {
                "trials per device": k,
                "runs": done,
                "wall s": round(wall, 1),
                "runs/hour": round(done / wall * 3600, 1),
                "busy % (median)": round(float(busy.median()), 1) if len(busy) else "",
                "bit-identical to alone": f"{same} of {len(alone)}",
            }
        )
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    if len(table):
        table["× one per device"] = (table["runs/hour"] / table["runs/hour"].iloc[0]).round(2)
    ray.shutdown()
    return table, cpus


if __name__ == "__main__":
    main()
