"""The final stage's runs, in order, seed by seed: the selected configurations on a seed, then the
references on the seeds they name (the paper sweep's two controls run on seed 101 only)."""

from __future__ import annotations

from pathlib import Path

from reuse_ray.tuning.parse import load_spec
from reuse_ray.tuning.selection import final_points

ROOT = Path(__file__).resolve().parents[2]


def test_the_paper_sweep_runs_its_answer_first_and_its_controls_on_their_seeds():
    spec = load_spec(ROOT / "sweeps" / "paper_fashionmnist.yaml")
    chosen = {
        f"selected-{j}": {"val_acc": {"params_json": p}}
        for j, p in enumerate(['{"dg.tau0": 0.5}', '{"dg.tau0": 0.7}'])
    }
    pts = final_points(spec, chosen)
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


def test_a_study_runs_each_chosen_configuration_once_per_final_seed():
    from reuse_ray.tuning.parse import load_spec
    from reuse_ray.tuning.selection import final_points as study_points

    spec = load_spec(ROOT / "sweeps" / "study.yaml", scale="small")
    same = {"params_json": '{"train.lr": 0.1}'}
    chosen = {
        "fedavg": {"val_acc": same, "retention": same},  # one configuration serves both
        "dg_fedreuse": {
            "val_acc": {"params_json": '{"dg.tau0": 0.5}'},
            "retention": {"params_json": '{"dg.tau0": 0.9}'},
        },
    }
    assert spec.final_seeds == (1001, 1002)
    # seed by seed, as a sweep's: a final stage cut short has every label on the same seeds
    assert study_points(spec, chosen) == [
        {"train.lr": 0.1, "seed": 1001, "label": "fedavg"},
        {"dg.tau0": 0.5, "seed": 1001, "label": "dg_fedreuse"},
        {"dg.tau0": 0.9, "seed": 1001, "label": "dg_fedreuse@retention"},
        {"train.lr": 0.1, "seed": 1002, "label": "fedavg"},
        {"dg.tau0": 0.5, "seed": 1002, "label": "dg_fedreuse"},
        {"dg.tau0": 0.9, "seed": 1002, "label": "dg_fedreuse@retention"},
    ]
