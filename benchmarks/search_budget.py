"""Search budgets: ASHA against running every trial to the end, and selection on one search
seed against robust selection, on the study's digits workload, measured in one run.

For each arm (dense FedAvg, Top-K FedAvg, DG-FedReuse) and searcher seed, a random search over
the arm's space (``search_spaces/search_budget*.py``) gets the same budget in client-rounds
(``--budget-trials`` full trials' worth), once without a scheduler and once with ASHA
(each ``--asha`` setting GRACE/FACTOR: the first rung after GRACE rounds, reduction factor
FACTOR; the digits workload validates at round 1 and every 5th, so a rung is judged at the next
evaluation round: grace 5 at factor 3 stops trials at rounds 5 and 15, grace 2 at rounds 5, 10
and 20, grace 5 at factor 4 at rounds 5 and 20). In steady state a factor-η ASHA over rungs
r_0 < r_1 < … < T spends r_0 + (r_1 − r_0)/η + … per configuration, so η = 3 buys at most about
3× the configurations of full trials (grace 5, 30 rounds: 30 / (5 + 10/3 + 15/9) = 3.0×) and
η = 4 about 3.2×; the first trials at a rung, which have nothing to be compared with, and the
trials still running when the budget is spent buy fewer. Printed per arm:
configurations explored and the best validation accuracy found at the final round (median and
range over searcher seeds).

Then the selection gap: the search without a scheduler selects its best configuration on its
one search seed, and again with robust selection (the best ``--reeval-top`` rerun on
``--reeval-seeds`` further search seeds, chosen by the mean); both selections run on the fresh
``--fresh`` seeds (validation only). The gap is search-stage minus fresh-seed validation
accuracy; printed: the mean absolute gap over arms and searcher seeds, each way.

    python benchmarks/search_budget.py [--seeds 0,1,2] [--budget-trials 8] [--rounds 30]
        [--asha 5/3,2/3] [--no-gap]
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import statistics
import tempfile
import time

import ray
import yaml

from reuse_ray.configio import set_dotted
from reuse_ray.tuning import parse_experiment, run_sweep

ARMS = {
    "fedavg": ({"method.name": "fedavg", "method.topk_ratio": 1.0}, "search_budget"),
    "topk_fedavg": ({"method.name": "fedavg", "method.topk_ratio": 0.2}, "search_budget_topk"),
    "dg_fedreuse": ({"method.name": "dg_fedreuse"}, "search_budget_dg"),
}


def _base(rounds: int, fixed: dict) -> dict:
    study = yaml.safe_load(open("sweeps/study.yaml"))
    base = copy.deepcopy(study["workloads"]["digits"])
    base["fl"]["rounds"] = rounds
    base["method"] = {"name": fixed["method.name"]}
    if "method.topk_ratio" in fixed:
        base["method"]["topk_ratio"] = fixed["method.topk_ratio"]
    return base


def _sweep(root, name, base, space, seed, budget, n_max, **search) -> dict:
    return {
        "name": name,
        "base": base,
        "search": {
            "space": space,
            "searcher": "random",
            "num_samples": n_max,
            "seed": seed,
            "client_rounds": budget,
            **search,
        },
        "trial": {"backend": "local", "cpus": 1},
        "checkpoint_every": 0,
        "results_dir": f"{root}/{name}",
    }


def _fresh_val(root, name, base, params: dict, fresh: list[int]) -> float:
    """Mean validation accuracy of one configuration on the fresh seeds (no test read)."""
    base = copy.deepcopy(base)
    for key, value in params.items():  # into the base: the grid checks each key on its own
        set_dotted(base, key, value)
    raw = {
        "name": name,
        "base": base,
        "search": {"searcher": "grid", "grid": {"seed": fresh}, "num_samples": 1},
        "trial": {"backend": "local", "cpus": 1},
        "checkpoint_every": 0,
        "results_dir": f"{root}/{name}",
    }
    out = run_sweep(parse_experiment(raw), say=lambda m: None)
    return float(out.trials["val_acc"].mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--budget-trials", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--asha", default="5/3,2/3", help="ASHA settings GRACE/FACTOR, one search each")
    ap.add_argument("--no-gap", action="store_true", help="skip the selection-gap measurement")
    ap.add_argument("--reeval-top", type=int, default=3)
    ap.add_argument("--reeval-seeds", default="202,303")
    ap.add_argument("--fresh", default="1001,1002,1003")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    reeval = [int(s) for s in args.reeval_seeds.split(",")]
    fresh = [int(s) for s in args.fresh.split(",")]
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    root = tempfile.mkdtemp(prefix="search-budget-")
    t0 = time.perf_counter()
    per_round = yaml.safe_load(open("sweeps/study.yaml"))["workloads"]["digits"]["fl"][
        "clients_per_round"
    ]
    budget = args.budget_trials * args.rounds * per_round
    print(f"budget: {budget} client-rounds ({args.budget_trials} full trials) per search")
    gaps: dict[str, list[float]] = {"one seed": [], "robust": []}
    for arm in args.arms.split(","):
        fixed, space = ARMS[arm]
        base = _base(args.rounds, fixed)
        modes = ["none", *(f"asha-grace{g}" for g in args.asha.split(","))]
        found: dict[str, list[tuple[int, float]]] = {m: [] for m in modes}
        for seed in seeds:
            for mode in modes:
                extra = {}
                if mode != "none":
                    grace, factor = mode.removeprefix("asha-grace").split("/")
                    extra = {"scheduler": "asha", "grace_period": int(grace)}
                    extra["reduction_factor"] = int(factor)
                name = f"{arm}-{mode.replace('/', 'rf')}-{seed}"
                n_max = args.budget_trials * (20 if mode != "none" else 1)
                raw = _sweep(root, name, base, space, seed, budget, n_max, **extra)
                out = run_sweep(parse_experiment(raw), say=lambda m: None)
                t = out.trials
                done = t[t["status"] == "finished"]
                best = float(done["val_acc"].max()) if len(done) else float("nan")
                found[mode].append((len(t), best))
                print(f"{arm} seed {seed} {mode}: {len(t)} configurations, best val {best:.4f}")
                if mode == "none" and not args.no_gap:
                    # selection on the one search seed, then robust selection on the same trials
                    one = done.sort_values("val_acc", ascending=False).iloc[0]
                    params = json.loads(one["params_json"])
                    f1 = _fresh_val(root, f"{name}-fresh1", base, params, fresh)
                    gaps["one seed"].append(abs(one["val_acc"] - f1))
                    robust = dict(raw, name=f"{name}-rob", results_dir=f"{root}/{name}-rob")
                    for table in ("runs", "rounds", "client_events", "clients"):
                        # the same search: its finished runs are kept, only the re-runs compute
                        shutil.copytree(f"{root}/{name}/{table}", f"{root}/{name}-rob/{table}")
                    robust["search"] = dict(raw["search"], reeval_top=args.reeval_top)
                    robust["search"]["reeval_seeds"] = reeval
                    rout = run_sweep(parse_experiment(robust), say=lambda m: None)
                    chosen = rout.trials[rout.trials["selected"]].iloc[0]
                    again = rout.trials[
                        rout.trials["stage"].eq("reeval")
                        & rout.trials["params_json"].eq(chosen["params_json"])
                    ]
                    mean = (chosen["val_acc"] + again["val_acc"].sum()) / (1 + len(again))
                    same = rout.selected[0] == params
                    f2 = (
                        f1
                        if same
                        else _fresh_val(root, f"{name}-fresh2", base, rout.selected[0], fresh)
                    )
                    gaps["robust"].append(abs(mean - f2))
                    print(
                        f"  selection gap: one seed {one['val_acc'] - f1:+.4f}, "
                        f"robust {mean - f2:+.4f}"
                    )
        for mode in modes:
            n = [k for k, _ in found[mode]]
            b = [v for _, v in found[mode]]
            print(
                f"{arm} {mode}: configurations median {statistics.median(n)} "
                f"(range {min(n)}–{max(n)}), best val median {statistics.median(b):.4f} "
                f"(range {min(b):.4f}–{max(b):.4f})"
            )
        for mode in modes[1:]:
            ratio = statistics.median(k for k, _ in found[mode]) / statistics.median(
                k for k, _ in found["none"]
            )
            print(f"{arm}: {mode} explored {ratio:.2f}x the configurations (goal >= 3)")
    if gaps["one seed"]:
        one, rob = statistics.mean(gaps["one seed"]), statistics.mean(gaps["robust"])
        print(
            f"mean |selection gap|: one search seed {one:.4f}, robust {rob:.4f} "
            f"({rob / one if one else float('nan'):.2f}x; goal <= 0.5)"
        )
    print(f"wall {time.perf_counter() - t0:.0f} s")
    ray.shutdown()


if __name__ == "__main__":
    main()
