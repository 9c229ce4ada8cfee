"""GPU check: four client workers share one GPU at 0.25 each, and a DG-FedReuse run finishes.

Where CUDA is visible, this starts Ray, runs the paper-preset DG-FedReuse on synthetic
CIFAR-shaped data with ResNet-18, AMP on, ``engine.gpu_fraction = 0.25`` and 4 workers, and
prints the GPU ids each worker actor was given and the run's outcome. Without CUDA it says so
and exits 0 (the CPU path is covered by the test suite).

    python benchmarks/gpu_check.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import tempfile

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no GPU available: CUDA is not visible to torch on this machine")
        return
    amp_check(args.rounds)
    try:
        import ray
    except ImportError:
        print("Ray is not installed here: the fractional-GPU actor check is skipped")
        return

    from reuse_ray.config import RunConfig, from_dict, load_config_dict
    from reuse_ray.distributed import RayBackend
    from reuse_ray.engine import run_fl

    ray.init(include_dashboard=False)
    print(f"cluster resources: {ray.cluster_resources()}")
    base = load_config_dict("configs/dg_paper.yaml")
    base.update(
        data={"name": "synthetic", "synthetic_samples": 6000, "synthetic_shape": [3, 32, 32]},
        model={"name": "resnet18"},
        train=dict(base["train"], amp=True),
        engine={"backend": "ray", "device": "cuda", "gpu_fraction": 0.25, "num_workers": 4},
        results_dir=tempfile.mkdtemp(prefix="gpu-check-"),
    )
    base["fl"] = dict(base["fl"], rounds=args.rounds, eval_every=args.rounds)
    cfg = from_dict(RunConfig, base)

    class Inspect(RayBackend):
        def start(self, setup):
            super().start(setup)
            ids = ray.get(
                [w.__ray_call__.remote(lambda s: ray.get_gpu_ids()) for w in self.workers]
            )
            print(f"{len(self.workers)} client workers, GPU ids per worker: {ids}")

    summary = run_fl(cfg, backend=Inspect(cfg), progress=print)
    print(f"DG-FedReuse on GPU: status={summary.status}, val_acc={summary.row['final_val_acc']}, "
          f"saving={summary.row['cum_saving_restricted']}")  # fmt: skip


def amp_check(rounds: int) -> None:
    """The local engine on CUDA: DG-FedReuse with ResNet-18, AMP on and off, same seed."""
    import time

    from reuse_ray.config import RunConfig, from_dict, load_config_dict
    from reuse_ray.engine import run_fl
    from reuse_ray.results import read_table

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    rows = {}
    for amp in (True, False):
        base = load_config_dict("configs/dg_paper.yaml")
        base.update(
            data={"name": "synthetic", "synthetic_samples": 6000,
                  "synthetic_shape": [3, 32, 32]},
            model={"name": "resnet18"},
            train=dict(base["train"], amp=amp),
            engine={"backend": "local", "device": "cuda"},
            results_dir=tempfile.mkdtemp(prefix="amp-check-"),
        )  # fmt: skip
        base["fl"] = dict(base["fl"], rounds=rounds, eval_every=rounds)
        cfg = from_dict(RunConfig, base)
        t0 = time.perf_counter()
        s = run_fl(cfg)
        ev = read_table(cfg.results_dir, "client_events")
        rows[amp] = (s, ev)
        print(f"local engine on CUDA, amp={amp}: status={s.status}, "
              f"val_acc={s.row['final_val_acc']:.4f}, test_acc={s.row['test_acc']:.4f}, "
              f"saving={s.row['cum_saving_restricted']:.5f}, "
              f"finite losses={bool(ev['train_loss'].dropna().map(float).notna().all())}, "
              f"{(time.perf_counter() - t0) / rounds:.2f} s/round")  # fmt: skip
    ea, ef = rows[True][1], rows[False][1]
    keys = ["round", "client_id", "decision"]
    same_plan = ea[keys].equals(ef[keys])
    print(f"AMP vs fp32: same selections and decisions: {same_plan}; fresh uplink bytes equal: "
          f"{ea['up_restricted'].tolist() == ef['up_restricted'].tolist()}")  # fmt: skip


if __name__ == "__main__":
    main()
