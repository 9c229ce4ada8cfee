"""The final stage's runs, in order: the selected configurations on every seed, then the
references on the seeds they name (the paper sweep's two controls run on seed 101 only)."""

from __future__ import annotations

from pathlib import Path

from reuse_ray.tuning.spec import load_sweep
from reuse_ray.tuning.sweep import final_points

ROOT = Path(__file__).resolve().parents[2]


def test_the_paper_sweep_runs_its_answer_first_and_its_controls_on_their_seeds():
    spec = load_sweep(ROOT / "sweeps" / "paper_fashionmnist.yaml")
    selected = [{"dg.tau0": 0.5}, {"dg.tau0": 0.7}]
    pts = final_points(spec, selected)
    assert pts[:6] == [
        {"dg.tau0": 0.5, "seed": 101, "label": "selected-0"},
        {"dg.tau0": 0.7, "seed": 101, "label": "selected-1"},
        {"dg.tau0": 0.5, "seed": 202, "label": "selected-0"},
        {"dg.tau0": 0.7, "seed": 202, "label": "selected-1"},
        {"dg.tau0": 0.5, "seed": 303, "label": "selected-0"},
        {"dg.tau0": 0.7, "seed": 303, "label": "selected-1"},
    ]
    assert pts[6:] == [
        {
            "label": "dg_gate_off",
            "method.name": "dg_fedreuse",
            "method.dg.gate": "off",
            "seed": 101,
        },
        {
            "label": "dg_reuse_only",
            "method.name": "dg_fedreuse",
            "method.topk_ratio": 1.0,
            "seed": 101,
        },
    ]
