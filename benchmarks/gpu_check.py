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
    import ray

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


if __name__ == "__main__":
    main()
