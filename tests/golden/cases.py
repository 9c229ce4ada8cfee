"""Golden digests: short runs of every method whose Parquet metrics must not change.

A refactor must reproduce these digests bit for bit (wall-time columns, run ids and config columns
excluded: only what a run computed); the Ray engine must give the local engine's bits run for run
(tests/distributed/test_ray_engine.py), so a refactor that changed only its numbers fails there.
A deliberate numeric change updates the digests in its own commit:
``python -m tests.golden.cases --write``.

Bits are a property of a machine as well as of the code: torch's CPU kernels (MKL's BLAS, oneDNN's
convolutions, ATen's vector code) can take other paths on another processor, and the same commit
gives other last bits on an AMD EPYC than on an Intel Xeon. The digests are therefore recorded per
machine (:func:`machine`: processor, torch version, ATen's CPU capability). A machine with no
record skips the check, saying so; ``--write`` adds or updates this machine's record, and where
that changes any digest of an existing record for this machine (a numeric change of the code) the
other machines' records are dropped, since they describe the old numbers. Add a machine only at a
commit whose digests pass on a recorded one.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from reuse_ray.config import RunConfig
from reuse_ray.configio import from_dict

DIGESTS = Path(__file__).with_name("digests.json")

# name -> method block (and a few run-level overrides under "_fl")
CASES: dict[str, dict] = {
    "fedavg": {"name": "fedavg"},
    "fedavg_topk": {"name": "fedavg", "topk_ratio": 0.3},
    "fed_ef": {"name": "fedavg", "topk_ratio": 0.1, "error_feedback": True},
    "fedprox": {"name": "fedprox", "topk_ratio": 0.5, "fedprox": {"mu": 0.01}},
    "fedadam": {"name": "fedadam", "topk_ratio": 0.5},
    "dg_proxy": {
        "name": "dg_fedreuse",
        "topk_ratio": 0.2,
        "dg": {"tau0": 0.3, "tau_min": 0.1, "max_age": 3, "quota": 0.25},
    },
    "dg_off": {"name": "dg_fedreuse", "topk_ratio": 0.2, "dg": {"gate": "off"}},
    "dg_random_ef": {
        "name": "dg_fedreuse",
        "topk_ratio": 0.2,
        "error_feedback": True,
        "dg": {"gate": "random", "gate_prob": 0.5},
    },
    "fedluar": {"name": "fedluar", "fedluar": {"delta": 1}},
    "fedsteer_fidelity": {"name": "fedsteer", "fedsteer": {"core_size": 3, "warmup": 2}},
    "fedsteer_clean": {
        "name": "fedsteer",
        "fedsteer": {"core_size": 3, "warmup": 2, "mode": "clean"},
    },
    "mifa_zero": {"name": "mifa"},
    "mifa_wait": {
        "name": "mifa",
        "mifa": {"init": "wait"},
        "_fl": {"clients_per_round": 5, "rounds": 5},
    },
    "fedvarp": {"name": "fedvarp"},
    "fedstale_est": {
        "name": "fedstale",
        "fedstale": {"probs": "estimated_counts", "beta": 0.3},
        "_fl": {"participation": "bernoulli"},
    },
    "fedstale_intervals": {
        "name": "fedstale",
        "fedstale": {"probs": "estimated", "server_weight_decay": 5e-4},
        "_fl": {"participation": "bernoulli"},
    },
    "mifa_inverse": {"name": "mifa", "mifa": {"lr_schedule": "inverse"}},
    "laq_authors": {
        "name": "laq",
        "laq": {"variant": "authors", "bits": 8},
        "_fl": {"clients_per_round": 5, "rounds": 6},
    },
    "dg_forced_compute": {
        "name": "dg_fedreuse",
        "topk_ratio": 0.2,
        "dg": {"tau0": 0.3, "tau_min": 0.1, "max_age": 2, "proxy_forced": "compute"},
    },
    "scaffold": {"name": "scaffold", "topk_ratio": 0.5},
    "ef21_pp": {"name": "ef21", "topk_ratio": 0.2},
    "ef21_s_dense": {"name": "ef21", "topk_ratio": 0.2, "ef21": {"variant": "s", "init": "dense"}},
    "laq": {
        "name": "laq",
        "laq": {"bits": 4, "max_clock": 2, "c_thr": 1.0},
        "_fl": {"clients_per_round": 5, "rounds": 6},
    },
}

# columns that hold what a run computed (no wall times, ids or configs)
METRIC_COLUMNS = {
    "rounds": [
        "round",
        "num_selected",
        "num_fresh",
        "num_reused",
        "train_loss",
        "val_acc",
        "val_loss",
        "up_restricted",
        "down_sensitivity",
        "dense_reference",
        "up_measured",
        "down_measured",
        "cum_saving_restricted",
        "cum_saving_bidirectional",
        "client_steps",
        "update_norm",
    ],
    "client_events": [
        "round",
        "client_id",
        "decision",
        "num_samples",
        "weight",
        "train_loss",
        "local_steps",
        "up_restricted",
        "up_measured",
        "down_measured",
        "update_norm",
        "gate_score",
        "tau",
        "age",
        "promoted",
    ],
    "runs": [
        "status",
        "rounds_completed",
        "num_params",
        "dense_bytes",
        "final_val_acc",
        "final_val_loss",
        "test_acc",
        "test_loss",
        "cum_up_restricted",
        "cum_down_sensitivity",
        "cum_dense_reference",
        "cum_up_measured",
        "cum_down_measured",
        "server_memory_bytes",
        "client_memory_bytes",
        "client_steps",
    ],
}


def case_config(name: str, results_dir: str | Path, backend: str = "local") -> RunConfig:
    """The tiny run of one golden case: synthetic 1×8×8 data, 8 clients, 4 rounds."""
    method = dict(CASES[name])
    fl = {
        "num_clients": 8,
        "clients_per_round": 3,
        "rounds": 4,
        "eval_every": 2,
        **method.pop("_fl", {}),
    }
    return from_dict(
        RunConfig,
        {
            "seed": 3,
            "data": {"name": "synthetic", "synthetic_samples": 400, "synthetic_shape": [1, 8, 8]},
            "model": {"name": "cnn", "hidden": 16},
            "train": {"epochs": 1, "batch_size": 16},
            "fl": fl,
            "method": method,
            "engine": {"backend": backend, "num_workers": 2},
            "results_dir": str(results_dir),
        },
    )


def _column_digest(values: pd.Series) -> str:
    arr = values.to_numpy()
    if arr.dtype.kind == "f":
        return hashlib.sha256(np.ascontiguousarray(arr, dtype="<f8").tobytes()).hexdigest()
    return hashlib.sha256(
        json.dumps([None if pd.isna(v) else v for v in arr.tolist()], default=str).encode()
    ).hexdigest()


def digest(results_dir: str | Path) -> str:
    """sha256 over every metric column of a results folder holding exactly one run."""
    h = hashlib.sha256()
    for table, cols in METRIC_COLUMNS.items():
        df = pd.read_parquet(Path(results_dir) / table)
        keys = [c for c in ("round", "client_id") if c in df.columns]
        if keys:
            df = df.sort_values(keys, kind="stable").reset_index(drop=True)
        for c in cols:
            h.update(f"{table}.{c}={_column_digest(df[c])};".encode())
    return h.hexdigest()


def run_case(name: str, results_dir: Path, backend: str = "local") -> str:
    from reuse_ray.runner import run_fl

    summary = run_fl(case_config(name, results_dir, backend))
    assert summary.status == "finished", (name, summary.row["error"])
    return digest(results_dir)


def machine() -> dict[str, str]:
    """What decides a CPU run's last bits here (:func:`reuse_ray.machine.machine_kind`): the
    processor, torch's version and the CPU capability ATen dispatches its vector kernels to."""
    from reuse_ray.machine import machine_kind

    return machine_kind("cpu")


def _records() -> list[dict]:
    return json.loads(DIGESTS.read_text())["machines"]


def _matches(record: dict, here: dict[str, str]) -> bool:
    """A record names some or all of :func:`machine`'s fields; it is this machine's when every
    field it names is this machine's."""
    return all(here.get(k) == v for k, v in record["machine"].items())


def expected() -> dict[str, str] | None:
    """This machine's recorded digests, or None where no record is this machine's."""
    here = machine()
    return next((r["digests"] for r in _records() if _matches(r, here)), None)


def expected_or_skip(names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """This machine's digests of ``names``; the test is skipped, saying why, where this machine
    has no record of them."""
    import pytest

    got = expected() or {}
    missing = [n for n in names if n not in got]
    if missing:
        pytest.skip(
            f"no golden digests of {missing if got else 'any case'} recorded for this "
            f"machine ({machine()}); record them with `python -m tests.golden.cases "
            "--write` at a commit whose digests pass on a recorded machine"
        )
    return {n: got[n] for n in names}


def write(out: dict[str, str]) -> str:
    """Record ``out`` as this machine's digests (see the module docstring); says what it did."""
    import datetime

    here = machine()
    records = _records()
    mine = [r for r in records if _matches(r, here)]
    changed = any(r["digests"].get(k, v) != v for r in mine for k, v in out.items())
    kept = [r for r in records if not _matches(r, here) and not changed]
    record = {"machine": here, "recorded": datetime.date.today().isoformat(), "digests": out}
    DIGESTS.write_text(json.dumps({"machines": [*kept, record]}, indent=1, sort_keys=True) + "\n")
    dropped = len(records) - len(mine) - len(kept)
    return f"wrote {DIGESTS} for {here}" + (
        f"; dropped {dropped} other machines' records (the numbers changed)" if dropped else ""
    )


def main(argv: list[str]) -> int:
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory() as d:
        for name in CASES:
            out[name] = run_case(name, Path(d) / name)
            print(name, out[name], flush=True)
    if "--write" in argv:
        print(write(out))
    else:
        old = expected()
        if old is None:
            print(f"no digests recorded for this machine ({machine()}): --write records them")
            return 1
        bad = [k for k in out if old.get(k) != out[k]]
        print("all match" if not bad else f"differ: {bad}")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
