"""GPU check: AMP on CUDA, four client workers sharing one GPU at 0.25 each, and vectorized
clients on the Ray engine.

Where CUDA is visible, this

1. runs the paper-preset DG-FedReuse on synthetic CIFAR-shaped data with ResNet-18 on the local
   engine, AMP on and off (same seed), and says whether both finish with finite losses; then
   AMP on with ``engine.channels_last`` (the layout tensor cores prefer), with its s/round;
2. starts Ray and runs the same with ``engine.gpu_fraction = 0.25`` and 4 workers, printing the
   GPU ids each worker actor was given and the run's outcome;
3. runs workload W (``workload_w.py``, FedAvg, ``cnn_valid``) on the Ray engine with 4
   quarter-GPU workers, ``engine.vectorize`` off and on (``--group`` clients a group), and prints
   the median round time (rounds 2..R) of each, their ratio, and the largest relative difference
   of the validation losses.

Without CUDA it says so and exits 0 (the CPU path is covered by the test suite);
``--device cpu`` runs steps 2 and 3 on the CPU instead (a dry run of the script itself).

    python benchmarks/gpu_check.py [--rounds 5] [--w-rounds 6] [--per-round 10] [--group 10]
        [--only-w]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--w-rounds", type=int, default=6)
    ap.add_argument("--per-round", type=int, default=10, help="W's clients a round (10)")
    ap.add_argument("--group", type=int, default=10)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--only-w", action="store_true", help="step 3 alone")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no GPU available: CUDA is not visible to torch on this machine")
        return
    if args.device == "cuda" and not args.only_w:
        amp_check(args.rounds)
    try:
        import ray
    except ImportError:
        print("Ray is not installed here: the fractional-GPU actor checks are skipped")
        return

    gpus = None if args.device == "cuda" else 1
    ray.init(address="local", include_dashboard=False, num_gpus=gpus)
    print(f"cluster resources: {ray.cluster_resources()}", flush=True)
    try:
        if not args.only_w:
            fractional_check(args.rounds, args.device)
        vectorize_check(args.w_rounds, args.per_round, args.group, args.device)
    finally:
        ray.shutdown()


def fractional_check(rounds: int, device: str) -> None:
    """DG-FedReuse with ResNet-18 on 4 Ray workers of a quarter GPU each."""
    import ray

    from reuse_ray.config import RunConfig
    from reuse_ray.configio import from_dict, load_config_dict
    from reuse_ray.distributed import RayBackend
    from reuse_ray.runner import run_fl

    base = load_config_dict("configs/dg_paper.yaml")
    base.update(
        data={"name": "synthetic", "synthetic_samples": 6000, "synthetic_shape": [3, 32, 32]},
        model={"name": "resnet18"},
        train=dict(base["train"], amp=True),
        engine={
            "backend": "ray",
            "device": device,
            "gpu_fraction": 0.25,
            "num_workers": 4,
            "cpu_per_worker": 0.5,
        },
        results_dir=tempfile.mkdtemp(prefix="gpu-check-"),
    )
    base["fl"] = dict(base["fl"], rounds=rounds, eval_every=rounds)
    cfg = from_dict(RunConfig, base)

    class Inspect(RayBackend):
        def start(self, setup=None):
            super().start(setup)
            ids = ray.get(
                [w.__ray_call__.remote(lambda s: ray.get_gpu_ids()) for w in self.workers]
            )
            print(f"{len(self.workers)} client workers, GPU ids per worker: {ids}", flush=True)

    t0 = time.perf_counter()
    summary = run_fl(cfg, backend=Inspect(cfg))
    print(
        f"DG-FedReuse, Ray engine, 4 x 0.25 GPU: status={summary.status}, "
        f"val_acc={summary.row['final_val_acc']}, "
        f"saving={summary.row['cum_saving_restricted']}, "
        f"{time.perf_counter() - t0:.1f} s in all",
        flush=True,
    )


def vectorize_check(rounds: int, per_round: int, group: int, device: str) -> None:
    """W (FedAvg, cnn_valid) on the Ray engine, 4 workers of a quarter GPU, vectorize off/on."""
    import statistics
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import workload_w as W

    from reuse_ray.config import RunConfig
    from reuse_ray.configio import from_dict
    from reuse_ray.results import read_table
    from reuse_ray.runner import run_fl

    out = {}
    for vec in (False, True):
        base = W.run_config("cnn_valid", rounds, 20000, "ray", tempfile.mkdtemp(prefix="w-gpu-"))
        base["fl"]["clients_per_round"] = per_round
        base["engine"] = {
            "backend": "ray",
            "device": device,
            "gpu_fraction": 0.25,
            "num_workers": 4,
            "cpu_per_worker": 0.5,
            "vectorize": vec,
            "vectorize_group": group,
        }
        base["train"]["amp"] = False
        cfg = from_dict(RunConfig, base)
        t0 = time.perf_counter()
        s = run_fl(cfg)
        rounds_t = read_table(cfg.results_dir, "rounds").sort_values("round")
        wall = rounds_t["round_wall_s"].tolist()
        out[vec] = (rounds_t["val_loss"].to_numpy(), statistics.median(wall[1:] or wall))
        print(
            f"W on the Ray engine, {per_round} clients a round, vectorize={vec}: "
            f"status={s.status}, val_acc={s.row['final_val_acc']:.4f}, round wall s "
            f"{[round(v, 3) for v in wall]}, median (rounds 2..) {out[vec][1]:.3f} s, "
            f"{time.perf_counter() - t0:.1f} s in all",
            flush=True,
        )
    (la, ta), (lb, tb) = out[False], out[True]
    rel = float(max(abs(a - b) / abs(a) for a, b in zip(la, lb, strict=True)))
    print(
        f"vectorized / per-client round time: {tb / ta:.3f} (speed-up {ta / tb:.2f}x); "
        f"largest relative validation-loss difference {rel:.2e}",
        flush=True,
    )


def amp_check(rounds: int) -> None:
    """The local engine on CUDA: DG-FedReuse with ResNet-18, AMP on and off, same seed; and AMP
    on with channels-last convolutions."""
    from reuse_ray.config import RunConfig
    from reuse_ray.configio import from_dict, load_config_dict
    from reuse_ray.results import read_table
    from reuse_ray.runner import run_fl

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    rows = {}
    for amp, cl in ((True, False), (False, False), (True, True)):
        base = load_config_dict("configs/dg_paper.yaml")
        base.update(
            data={"name": "synthetic", "synthetic_samples": 6000, "synthetic_shape": [3, 32, 32]},
            model={"name": "resnet18"},
            train=dict(base["train"], amp=amp),
            engine={"backend": "local", "device": "cuda", "channels_last": cl},
            results_dir=tempfile.mkdtemp(prefix="amp-check-"),
        )
        base["fl"] = dict(base["fl"], rounds=rounds, eval_every=rounds)
        cfg = from_dict(RunConfig, base)
        t0 = time.perf_counter()
        s = run_fl(cfg)
        ev = read_table(cfg.results_dir, "client_events")
        rows[amp, cl] = (s, ev)
        print(
            f"local engine on CUDA, amp={amp}, channels_last={cl}: status={s.status}, "
            f"val_acc={s.row['final_val_acc']:.4f}, test_acc={s.row['test_acc']:.4f}, "
            f"saving={s.row['cum_saving_restricted']:.5f}, "
            f"finite losses={bool(ev['train_loss'].dropna().map(float).notna().all())}, "
            f"{(time.perf_counter() - t0) / rounds:.2f} s/round"
        )
    ea, ef = rows[True, False][1], rows[False, False][1]
    keys = ["round", "client_id", "decision"]
    same_plan = ea[keys].equals(ef[keys])
    print(
        f"AMP vs fp32: same selections and decisions: {same_plan}; fresh uplink bytes equal: "
        f"{ea['up_restricted'].tolist() == ef['up_restricted'].tolist()}"
    )


if __name__ == "__main__":
    main()
