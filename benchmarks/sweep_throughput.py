"""Sweep throughput: trials per hour of the quickstart search at concurrency 1 and at the
concurrency derived from the cluster's resources, with trial processes reused (the default) and,
at the derived concurrency, with a fresh process per trial (``trial.reuse_actors: false``),
measured in one run.

The search stage only (no final stage); TPE's first trials are seeded random draws, so both
settings run the same six configurations.

    python benchmarks/sweep_throughput.py [--samples 6]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

import ray

from reuse_ray.tuning import derive_concurrency, load_spec, run_sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=6)
    args = ap.parse_args()
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    base = load_spec("sweeps/quickstart.yaml")
    derived = derive_concurrency(base, ray.cluster_resources())
    rates = {}
    for conc, reuse in ((1, True), (derived, True), (derived, False)):
        spec = dataclasses.replace(
            base,
            final=None,
            results_dir=tempfile.mkdtemp(prefix=f"sweep-c{conc}-"),
            search=dataclasses.replace(
                base.search, num_samples=args.samples, max_concurrent_trials=conc
            ),
            trial=dataclasses.replace(base.trial, reuse_actors=reuse),
        )
        t0 = time.perf_counter()
        out = run_sweep(spec, say=lambda m: None)
        wall = time.perf_counter() - t0
        done = int((out.trials["status"] == "finished").sum())
        rates[conc, reuse] = done / wall * 3600
        print(
            f"concurrency {conc}, reuse_actors={reuse}: {done} trials in {wall:.1f} s = "
            f"{rates[conc, reuse]:.0f} trials/hour",
            flush=True,
        )
    print(
        f"throughput ratio, concurrency {derived} / 1: "
        f"{rates[derived, True] / rates[1, True]:.2f}   (goal >= 1.6 on 2 CPUs)"
    )
    print(
        f"throughput ratio, reused / fresh trial processes: "
        f"{rates[derived, True] / rates[derived, False]:.2f}   (goal >= 1.3)"
    )
    ray.shutdown()


if __name__ == "__main__":
    main()
