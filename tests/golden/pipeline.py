"""Golden digests of the experiment pipeline: small sweeps and a small study whose tables must
not change when the tuning code is rearranged.

``python -m tests.golden.pipeline`` runs four tiny experiments on digits, one trial at a time
(so a searcher and a scheduler see the same history on every launch): a TPE sweep with robust
re-evaluation and a reference arm, a retention sweep under ASHA, a grid sent unsearched to the
final stage, and a study with a dense reference, two searched arms, an ablation, uplink levels,
a client-round budget per arm and robust selection. It prints one digest per table — trials,
runs, rounds, levels and a study's choices in ``study.json`` — over what the experiment decided
and computed (wall times and Tune's trial ids left out). ``--write`` records them for this
machine (:func:`tests.golden.cases.machine`) in ``pipeline.json``; ``--check`` compares with
the record and exits 1 naming every table that differs. Minutes on two cores: a tool for a
refactor, not a test.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

RECORD = Path(__file__).with_name("pipeline.json")

BASE = {
    "seed": 101,
    "data": {"name": "digits", "val_fraction": 0.1},
    "partition": {"kind": "dirichlet", "alpha": 0.5, "min_size": 10},
    "model": {"name": "cnn", "hidden": 8},
    "train": {"epochs": 1, "batch_size": 32, "lr": 0.05, "momentum": 0.9},
    "fl": {"num_clients": 20, "clients_per_round": 4, "rounds": 4, "eval_every": 1},
    "method": {"name": "dg_fedreuse", "topk_ratio": 0.2},
}
ONE = {"max_concurrent_trials": 1}
TRIAL = {"backend": "local", "cpus": 1}

EXPERIMENTS: dict[str, dict] = {
    "sweep_tpe": {
        "name": "g_tpe",
        "base": BASE,
        "search": {
            "space": "dg_fedreuse",
            "searcher": "tpe",
            "num_samples": 4,
            "reeval_top": 1,
            "reeval_seeds": [7],
            **ONE,
        },
        "trial": TRIAL,
        "final": {"seeds": [11, 12], "compare": [{"method.name": "fedavg"}]},
    },
    "sweep_retention": {
        "name": "g_ret",
        "base": dict(BASE, method={"name": "fedavg", "topk_ratio": 0.2}),
        "search": {
            "space": "fedavg",
            "searcher": "random",
            "objective": "retention",
            "reference": {"method.topk_ratio": 1.0},
            "num_samples": 4,
            "scheduler": "asha",
            "grace_period": 2,
            "reduction_factor": 2,
            **ONE,
        },
        "trial": TRIAL,
        "final": {"seeds": [11]},
    },
    "sweep_none": {
        "name": "g_none",
        "base": dict(BASE, method={"name": "fedavg"}),
        "search": {"searcher": "none", "grid": {"method.topk_ratio": [0.2, 1.0]}},
        "trial": TRIAL,
        "final": {"seeds": [11]},
    },
    "study": {
        "name": "g_study",
        "kind": "study",
        "budget": {"trials_per_arm": 3, "client_rounds": {"digits": 40}, "seed": 0},
        "search": {
            "scheduler": "asha",
            "grace_period": 2,
            "reduction_factor": 2,
            "reeval_top": 1,
            "reeval_seeds": [202],
            **ONE,
        },
        "shared": {"train.lr": [0.01, 0.2, "log"]},
        "topk_range": [0.01, 1.0, "log"],
        "objectives": ["val_acc", "retention"],
        "uplink_levels": [0.25, 0.5],
        "retention": 0.9,
        "retention_reference": "fedavg",
        "compare_to": ["topk_fedavg"],
        "final": {"seeds": [1001, 1002]},
        "trial": TRIAL,
        "workloads": {"digits": BASE},
        "arms": {
            "fedavg": {"fixed": {"method.name": "fedavg", "method.topk_ratio": 1.0}},
            "topk_fedavg": {"fixed": {"method.name": "fedavg"}, "space": "fedavg"},
            "dg_fedreuse": {"fixed": {"method.name": "dg_fedreuse"}, "space": "dg_fedreuse"},
            "dg_gate_off": {"ablation_of": "dg_fedreuse", "fixed": {"method.dg.gate": "off"}},
        },
    },
}

# columns that name when or in which process something ran, not what it decided or computed
# (and the folder it wrote to: ``config_json`` is the ``cfg.*`` columns with it)
VOLATILE = {"trial_id", "host", "ray_node", "config_json", "cfg.results_dir", "commit", "machine"}


def _volatile(name: str) -> bool:
    # ``cfg.engine.*``: where and how a run was placed, which never changes its numbers (the
    # engine settings that round differently enter the run id, which is digested); a new
    # engine setting adds a column here without changing a number
    return (
        name in VOLATILE
        or name.endswith(("wall_s", "started_at", "_at"))
        or name.startswith("cfg.engine.")
    )


def _frame_digest(df: pd.DataFrame) -> str:
    keys = [c for c in ("run_id", "stage", "round", "level", "ledger", "params_json") if c in df]
    cols = sorted(c for c in df.columns if not _volatile(c))
    df = df[cols].sort_values(keys, kind="stable").reset_index(drop=True) if keys else df[cols]
    text = df.to_json(orient="split", double_precision=15, date_format="iso")
    return hashlib.sha256(text.encode()).hexdigest()


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if not _volatile(k)}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def digests(folder: Path) -> dict[str, str]:
    """One digest per table the experiment in ``folder`` wrote (study.json: its choices)."""
    out = {}
    for table in ("trials", "runs", "rounds", "levels"):
        if (folder / table).exists():
            df = pd.read_parquet(folder / table)
            out[table] = _frame_digest(df)
    if (folder / "study.json").exists():
        meta = json.loads((folder / "study.json").read_text())
        text = json.dumps(_strip(meta.get("choices")), sort_keys=True, default=str)
        out["choices"] = hashlib.sha256(text.encode()).hexdigest()
    return out


def run_all(root: Path) -> dict[str, dict[str, str]]:
    from reuse_ray.tuning import experiment, parse_experiment, run_experiment

    got = {}
    for name, raw in EXPERIMENTS.items():
        folder = root / name
        spec = parse_experiment(dict(raw, results_dir=str(folder)))
        run_experiment(experiment(spec), say=lambda line: None)
        got[name] = digests(folder)
        print(name, json.dumps(got[name], indent=1), flush=True)
    return got


def main(argv: list[str]) -> int:
    from .cases import machine

    with tempfile.TemporaryDirectory() as tmp:
        got = run_all(Path(tmp))
    here = machine()
    records = json.loads(RECORD.read_text())["machines"] if RECORD.exists() else []
    if "--write" in argv:
        kept = [r for r in records if r["machine"] != here]
        RECORD.write_text(
            json.dumps({"machines": [*kept, {"machine": here, "digests": got}]}, indent=1) + "\n"
        )
        print(f"wrote {RECORD}")
        return 0
    if "--check" in argv:
        mine = next((r["digests"] for r in records if r["machine"] == here), None)
        if mine is None:
            print(f"no record for {here}; run with --write at a trusted commit")
            return 1
        bad = [
            f"{e}.{t}"
            for e in mine
            for t in mine[e] | got.get(e, {})
            if mine[e].get(t) != got.get(e, {}).get(t)
        ]
        print("pipeline digests: " + (f"differ in {', '.join(bad)}" if bad else "identical"))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
