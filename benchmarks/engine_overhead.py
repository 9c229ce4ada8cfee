"""Engine overhead on workload W (shared performance protocol), all measured in one process run.

W: synthetic 20,000 x 1x28x28 images, 10 classes, 50 clients (Dirichlet 0.5), 10 clients a
round, 3 local epochs, batch 128, SGD 0.05 / momentum 0.9 / wd 1e-4, dense FedAvg; measured on
both networks: ``cnn_valid``, the classic unpadded MNIST CNN (1024 -> 512 -> 10, the network a
user compares against), and the project's padded ``cnn`` (hidden 128, about twice the
convolution work).

Measured, each as seconds per round (median of rounds 2-6):
  plain-1t  a plain single-process PyTorch loop doing the same local training, 1 thread
  plain-2t  the same loop with 2 threads (its best setting on a 2-core machine)
  local     reuse_ray's sequential local engine (client work at 1 thread)
  ray       reuse_ray's Ray engine (client-worker actors, 1 thread each)
and printed as ratios: local / plain-1t (same thread count) and ray / plain-2t.

    python benchmarks/engine_overhead.py [--rounds 7] [--samples 20000] [--models cnn_valid,cnn]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from torch import nn

from reuse_ray.config import RunConfig, from_dict
from reuse_ray.data import load_dataset, make_partition, to_tensor
from reuse_ray.engine import run_fl, uniform_selection
from reuse_ray.models import init_model
from reuse_ray.results import read_table

HIDDEN = {"cnn_valid": 512, "cnn": 128}


def workload(rounds: int, samples: int, backend: str, results: str,
             model: str = "cnn_valid") -> RunConfig:  # fmt: skip
    return from_dict(
        RunConfig,
        {
            "seed": 1,
            "data": {"name": "synthetic", "synthetic_samples": int(samples / 0.72),
                     "synthetic_shape": [1, 28, 28], "synthetic_classes": 10},
            "model": {"name": model, "hidden": HIDDEN[model]},
            "train": {"epochs": 3, "batch_size": 128, "lr": 0.05, "threads": 1},
            "fl": {"num_clients": 50, "clients_per_round": 10, "rounds": rounds,
                   "eval_every": 1000},
            "method": {"name": "fedavg", "topk_ratio": 1.0},
            "engine": {"backend": backend},
            "results_dir": results,
        },
    )  # fmt: skip


def plain_loop(cfg: RunConfig, threads: int) -> list[float]:
    """The reference: a plain PyTorch FedAvg loop, no framework, same data and clients."""
    torch.set_num_threads(threads)
    data = load_dataset(cfg.data)
    parts = make_partition(data.train.y, 50, "dirichlet", cfg.seed, 0.5, 10)
    model = init_model(cfg.model.name, (1, 28, 28), 10, cfg.seed, cfg.model.hidden)
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    times = []
    for t in range(1, cfg.fl.rounds + 1):
        t0 = time.perf_counter()
        selected = uniform_selection(cfg.seed, t, 50, 10)
        total = sum(len(parts[i]) for i in selected)
        new_state = {k: torch.zeros_like(v) for k, v in global_state.items()}
        for i in selected:
            model.load_state_dict(global_state)
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
            idx = parts[i]
            g = torch.Generator().manual_seed(t * 1000 + i)
            for _ in range(3):
                perm = torch.randperm(len(idx), generator=g).numpy()
                for s in range(0, len(idx), 128):
                    b = idx[perm[s : s + 128]]
                    x = to_tensor(data.train.x[b], data.info)
                    y = torch.from_numpy(data.train.y[b])
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()
            for k, v in model.state_dict().items():
                new_state[k] += v * (len(idx) / total)
        global_state = new_state
        times.append(time.perf_counter() - t0)
    return times


def engine_times(cfg: RunConfig) -> list[float]:
    run_fl(cfg)
    rounds = read_table(cfg.results_dir, "rounds").sort_values("round")
    return rounds["round_wall_s"].tolist()


def median_2_6(times: list[float]) -> float:
    return statistics.median(times[1:6])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--models", default="cnn_valid,cnn")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="engine-overhead-")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    for model in args.models.split(","):
        res: dict[str, float] = {}
        cfg = workload(args.rounds, args.samples, "local", f"{tmp}/{model}-local", model)
        n_train = len(load_dataset(cfg.data).train)
        print(f"workload W, {model} (hidden {HIDDEN[model]}): {n_train} training images, "
              f"50 clients, 10/round, 3 epochs, batch 128, {args.rounds} rounds")  # fmt: skip

        def record(name: str, times: list[float], res=res) -> None:
            res[name] = median_2_6(times)
            print(f"  {name:9s} {res[name]:7.3f} s/round (median of rounds 2-6)", flush=True)

        record("plain-1t", plain_loop(cfg, 1))
        record("plain-2t", plain_loop(cfg, 2))
        record("local", engine_times(cfg))
        ray_cfg = workload(args.rounds, args.samples, "ray", f"{tmp}/{model}-ray", model)
        record("ray", engine_times(ray_cfg))
        print(f"  {model}: local engine / plain loop (1 thread each): "
              f"{res['local'] / res['plain-1t']:.3f}   (goal <= 1.03)")  # fmt: skip
        print(f"  {model}: ray engine / plain loop (2 threads):       "
              f"{res['ray'] / res['plain-2t']:.3f}   (target <= 0.90)")  # fmt: skip
    ray.shutdown()


if __name__ == "__main__":
    main()
