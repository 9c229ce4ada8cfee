"""Scale on the Ray engine: 1k / 10k / 100k clients at 1,000 a round, and per-client server
memories spilling through the object store. Each configuration runs as its own process with
its own local Ray (2 CPUs, 2 client workers).

Clients: about 20 synthetic 1×8×8 images each (IID), the shallow ``cnn`` (hidden 32), one
local epoch at batch 20. Per configuration it reports the round time (median of rounds 2 to
R-1, which evaluate nothing), the driver's peak PSS and peak RSS (RSS counts the object-store
pages the driver maps whole, PSS shares them with the workers that map them too) and the
dataset's bytes (the driver holds every split; the training split as a zero-copy view of the
object store, where the engine's loader task put it), and the ratio of each round time to the
10,000-client run's.

The spill part runs MIFA, whose server keeps a memory y_i (one model vector) per client that
ever took part, with the object store capped at ``--spill-store-mb``: the memories outgrow the
cap, Ray spills them to disk, and the run finishes with the server's heap bounded. It
reports the memories' bytes, what Ray spilled and restored, and the server process's peak private
memory (RssAnon: its heap, without the object store pages it maps).
It runs with ``engine.server_snapshot_every: 0``: a snapshot of the server copies every memory.

    python benchmarks/scale.py [--clients 1000,10000,100000] [--per-round 1000] [--rounds 5]
        [--methods fedavg,dg_fedreuse] [--spill-clients 3000] [--spill-per-round 200]
        [--spill-rounds 10] [--spill-store-mb 200]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from proctree import Peak, pss, rss, rss_anon

ROOT = Path(__file__).resolve().parent.parent


def config(
    clients: int, per_round: int, rounds: int, method: str, results: str, snapshot_every: int = 1
) -> dict:
    return {
        "seed": 1,
        "data": {
            "name": "synthetic",
            "synthetic_samples": int(20 * clients / 0.72),
            "synthetic_shape": [1, 8, 8],
            "synthetic_classes": 10,
        },
        "model": {"name": "cnn", "hidden": 32},
        "train": {"epochs": 1, "batch_size": 20, "lr": 0.05, "threads": 1},
        "fl": {
            "num_clients": clients,
            "clients_per_round": min(per_round, clients),
            "rounds": rounds,
            "eval_every": rounds,
        },
        "partition": {"kind": "iid"},
        "method": {"name": method, "topk_ratio": 0.2 if method == "dg_fedreuse" else 1.0},
        "engine": {"backend": "ray", "num_workers": 2, "server_snapshot_every": snapshot_every},
        "results_dir": results,
    }


def _spill_stats() -> dict:
    """Ray's spill counters, from its memory summary."""
    from ray._private.internal_api import memory_summary

    text = memory_summary(stats_only=True)
    out = {"spilled_mib": 0.0, "spilled_objects": 0, "restored_mib": 0.0, "restored_objects": 0}
    m = re.search(r"Spilled (\d+) MiB, (\d+) objects", text)
    if m:
        out["spilled_mib"], out["spilled_objects"] = float(m[1]), int(m[2])
    m = re.search(r"Restored (\d+) MiB, (\d+) objects", text)
    if m:
        out["restored_mib"], out["restored_objects"] = float(m[1]), int(m[2])
    return out


def child(args: argparse.Namespace) -> dict:
    import ray

    from reuse_ray.config import RunConfig
    from reuse_ray.configio import from_dict
    from reuse_ray.distributed.backend import loopback_only
    from reuse_ray.engine import RunHooks
    from reuse_ray.results import read_table
    from reuse_ray.runner import run_fl

    init: dict = {
        "address": "local",
        "num_cpus": 2,
        "include_dashboard": False,
        "log_to_driver": False,
    }
    if args.store_mb:
        init["object_store_memory"] = args.store_mb * 1024 * 1024
    spill_dir = tempfile.mkdtemp(prefix="scale-spill-")
    init["_system_config"] = {
        "object_spilling_config": json.dumps(
            {"type": "filesystem", "params": {"directory_path": spill_dir}}
        )
    }
    with loopback_only():
        ray.init(**init)
    baseline = pss()
    driver = Peak(pss)
    driver_rss = Peak(rss)
    server_rss = {"peak": 0}

    pids: dict[str, int] = {}

    def watch_server() -> None:
        """The RSS of the server's process (worker 0's, or its own actor's), found by name;
        its pid is asked once (a worker answers between its tasks)."""
        while not stop.is_set():
            for actor in ray.util.list_named_actors(all_namespaces=True):
                if actor["name"].endswith(("/server", "+server")):
                    try:
                        if actor["name"] not in pids:
                            handle = ray.get_actor(actor["name"], actor["namespace"])
                            pids[actor["name"]] = ray.get(handle.pid.remote(), timeout=30)
                        now = rss_anon(pids[actor["name"]])
                        server_rss.setdefault("first", now)
                        server_rss["peak"] = max(server_rss["peak"], now)
                    except Exception:  # noqa: BLE001 - it may be starting or gone
                        pass
            stop.wait(1.0)

    stop = threading.Event()
    watcher = threading.Thread(target=watch_server, daemon=True)
    watcher.start()
    results = tempfile.mkdtemp(prefix="scale-")
    cfg = from_dict(
        RunConfig,
        config(args.n, args.per_round, args.rounds, args.method, results, args.snapshot_every),
    )
    summary = run_fl(cfg, hooks=RunHooks(evaluate_test=False, tensorboard=False))
    stop.set()
    watcher.join()
    peak, peak_rss = driver.stop(), driver_rss.stop()
    rounds = read_table(results, "rounds").sort_values("round")
    walls = rounds["round_wall_s"].tolist()[1:-1]
    # clients that trained in those rounds (DG-FedReuse reuses the caches of clients seen
    # before, which are more frequent among 10,000 clients than among 100,000)
    events = read_table(results, "client_events")
    timed = events[events["round"].isin(rounds["round"].tolist()[1:-1])]
    trained = int(timed["local_steps"].gt(0).sum()) / max(len(walls), 1)
    # every split together: each sample's float32 image and int64 label
    d = cfg.data
    dataset = d.synthetic_samples * (4 * math.prod(d.synthetic_shape) + 8)
    out = {
        "round_s": statistics.median(walls),
        "status": summary.status,
        "trained": trained,
        "driver_peak_pss": peak,
        "driver_peak_rss": peak_rss,
        "driver_baseline_pss": baseline,
        "dataset_bytes": dataset,
        "server_memory_bytes": summary.row["server_memory_bytes"],
        "client_memory_bytes": summary.row["client_memory_bytes"],
        "server_peak_rss": server_rss["peak"],
        "server_first_rss": server_rss.get("first", 0),
        **_spill_stats(),
    }
    ray.shutdown()
    return out


def launch(
    n: int,
    method: str,
    args: argparse.Namespace,
    store_mb: int = 0,
    snapshot_every: int = 1,
    per_round: int = 0,
    rounds: int = 0,
) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--n",
        str(n),
        "--method",
        method,
        "--per-round",
        str(per_round or args.per_round),
        "--rounds",
        str(rounds or args.rounds),
        "--store-mb",
        str(store_mb),
        "--snapshot-every",
        str(snapshot_every),
    ]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    env.pop("RAY_ADDRESS", None)
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(
            f"{method} with {n} clients failed (exit {proc.returncode}):\n"
            + (proc.stdout + proc.stderr)[-3000:]
        )
    out = json.loads(lines[-1][len("RESULT ") :])
    out["wall"] = time.time() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1000,10000,100000")
    ap.add_argument("--per-round", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--methods", default="fedavg,dg_fedreuse")
    ap.add_argument("--spill-clients", type=int, default=3000, help="0: no spill part")
    ap.add_argument("--spill-per-round", type=int, default=200)
    ap.add_argument("--spill-rounds", type=int, default=10)
    ap.add_argument("--spill-store-mb", type=int, default=200)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--store-mb", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--snapshot-every", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return
    if args.rounds < 3:
        raise SystemExit("--rounds: at least 3 (the round time skips the first and last)")
    sizes = [int(x) for x in args.clients.split(",") if x]
    gb = 1e9
    print(
        f"{args.per_round} clients a round, ~20 synthetic 1x8x8 images each, cnn (hidden 32), "
        f"1 epoch at batch 20, Ray engine with 2 workers, {args.rounds} rounds",
        flush=True,
    )
    for method in args.methods.split(","):
        res = {}
        for n in sizes:
            r = res[n] = launch(n, method, args)
            print(
                f"  {method:12s} {n:>7,} clients: {r['round_s']:6.2f} s/round "
                f"({r['trained']:.0f} clients trained a round), driver peak PSS "
                f"{r['driver_peak_pss'] / gb:.2f} GB (dataset {r['dataset_bytes'] / gb:.2f} GB, "
                f"beyond it {(r['driver_peak_pss'] - r['dataset_bytes']) / gb:.2f} GB; "
                f"peak RSS {r['driver_peak_rss'] / gb:.2f} GB, beyond the dataset "
                f"{(r['driver_peak_rss'] - r['dataset_bytes']) / gb:.2f} GB), "
                f"run {r['status']} in {r['wall']:.0f} s",
                flush=True,
            )
        if 10000 in res:
            ref = res[10000]["round_s"]
            ratios = ", ".join(f"{n:,}: {res[n]['round_s'] / ref:.3f}" for n in sizes)
            print(
                f"  {method}: round time / the 10,000-client run's: {ratios}  (goal: 100,000 "
                f"<= 1.1)",
                flush=True,
            )
    if args.spill_clients:
        n, cap = args.spill_clients, args.spill_store_mb
        # a server snapshot copies every memory, so server survival is off here
        r = launch(
            n,
            "mifa",
            args,
            store_mb=cap,
            snapshot_every=0,
            per_round=args.spill_per_round,
            rounds=args.spill_rounds,
        )
        mem = (r["server_memory_bytes"] or 0) / 1e6
        print(
            f"  mifa {n:,} clients, {args.spill_per_round} a round, {args.spill_rounds} rounds, "
            f"object store capped at {cap} MiB: memories y_i "
            f"{mem:.0f} MB at the end; Ray spilled {r['spilled_mib']:.0f} MiB "
            f"({r['spilled_objects']} objects) and restored {r['restored_mib']:.0f} MiB; "
            "the server process's private memory (RssAnon) "
            f"{r['server_first_rss'] / 1e6:.0f} MB when "
            f"first seen, {r['server_peak_rss'] / 1e6:.0f} MB at its peak; "
            f"{r['round_s']:.2f} s/round; run {r['status']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
