"""The study: equal validation budgets, selection on validation only, fresh paired seeds."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import init_ray_for_sweeps

from reuse_ray.config import ConfigError
from reuse_ray.tuning.parse import arm_points, load_spec, parse_experiment
from reuse_ray.tuning.selection import select_arms as select
from reuse_ray.tuning.selection import values

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "sweeps" / "study.yaml"


def _raw() -> dict:
    raw = yaml.safe_load(STUDY.read_text())
    raw.pop("scales")
    return raw


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        (lambda r: r["final"].update(seeds=[101, 1002]), "final.seeds", "used by the search"),
        (lambda r: r["arms"]["laq"].update(space="nope"), "arms.laq.space", "nope"),
        (
            lambda r: r["arms"]["dg_gate_off"].update(ablation_of="nobody"),
            "arms.dg_gate_off.ablation_of",
            "a searched arm",
        ),
        (
            lambda r: r["arms"]["dg_gate_off"].update(space="dg_fedreuse"),
            "arms.dg_gate_off.space",
            "not searched",
        ),
        (lambda r: r["arms"]["dg_gate_off"].update(fixed={}), "arms.dg_gate_off.fixed", "changes"),
        (lambda r: r["arms"]["laq"]["fixed"].pop("method.name"), "arms.laq.fixed", "method.name"),
        (lambda r: r.update(retention_reference="nobody"), "retention_reference", "fedavg"),
        (lambda r: r.update(compare_to=["nobody"]), "compare_to", "topk_fedavg"),
        (lambda r: r.update(objectives=["retention"]), "objectives", "val_acc"),
        (lambda r: r["budget"].update(trials_per_arm=0), "budget.trials_per_arm", "> 0"),
        (lambda r: r.update(shared={"train.lr": [0.2, 0.01]}), "shared.train.lr", "low < high"),
        (lambda r: r["targets"].update(mnist=0.9), "targets", "digits, fashionmnist"),
        (
            lambda r: r["budget"].update(client_rounds={"digits": 5}),
            "budget.client_rounds",
            "one per workload",
        ),
        (
            lambda r: r["search"].update(scheduler="median"),
            "search.scheduler",  # the block's own check: no workload to name
            "asha",
        ),
        (
            lambda r: r["search"].update(grace_period=25),
            "search.grace_period (workload fashionmnist)",
            "1 to 20",
        ),
        (lambda r: r["search"].update(reeval_seeds=[1001]), "search.reeval_seeds", "further seeds"),
        (
            lambda r: r["search"].update(reeval_seeds=[]),
            "search.reeval_seeds",
            "further search seeds",
        ),
        # the same shared knob over another range in one arm: refused
        (lambda r: r.update(topk_range=[0.05, 1.0, "log"]), "arms.topk_fedavg.space", "range"),
    ],
)
def test_bad_study_files_name_the_field(change, field, fragment):
    raw = _raw()
    change(raw)
    with pytest.raises(ConfigError) as err:
        parse_experiment(raw)
    assert err.value.field == field and fragment in str(err.value)


def test_an_unknown_scale_is_one_clear_error():
    with pytest.raises(ConfigError, match="allowed: small"):
        load_spec(STUDY, scale="huge")


def test_every_arm_gets_the_same_budget_and_the_same_shared_ranges():
    spec = parse_experiment(_raw())
    assert len(spec.arms) == 16
    assert [a.name for a in spec.arms if not a.searched] == ["dg_gate_off"]  # an ablation
    for arm in (a for a in spec.arms if a.searched):
        points = arm_points(spec, arm)
        assert len(points) == spec.trials_per_arm == 24  # the most an arm may try
        assert spec.client_rounds == {"digits": 2400, "fashionmnist": 1600}  # the same for all
        assert points == arm_points(spec, arm)  # seeded: the same on every rerun
        for p in points:
            assert 0.01 <= p["train.lr"] <= 0.2
            for key, value in arm.fixed.items():
                assert p[key] == value  # an arm's fixed fields are never searched
            if "method.topk_ratio" not in arm.fixed:
                assert 0.01 <= p["method.topk_ratio"] <= 1.0
    dense = spec.arm("fedavg")
    assert all(p["method.topk_ratio"] == 1.0 for p in arm_points(spec, dense))


def _trials(rows):
    cols = ["arm", "status", "val_acc", "cum_saving_restricted", "params_json"]
    df = pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])
    df["trial_index"] = range(len(df))
    df["stage"] = "search"
    return df


def _one_seed(spec):
    return dataclasses.replace(
        spec, search=dataclasses.replace(spec.search, reeval_top=0, reeval_seeds=())
    )


def test_selection_by_validation_accuracy_and_by_the_retention_rule():
    spec = _one_seed(parse_experiment(_raw()))
    trials = _trials(
        [
            ("fedavg", "finished", 0.90, 0.0, "{}"),
            ("fedavg", "finished", 0.80, 0.0, "{}"),
            # bar = 0.98 * 0.90 = 0.882
            ("topk_fedavg", "finished", 0.89, 0.50, '{"r": 1}'),  # keeps the bar, saves 50 %
            ("topk_fedavg", "finished", 0.885, 0.70, '{"r": 2}'),  # keeps the bar, saves 70 %
            ("topk_fedavg", "finished", 0.87, 0.95, '{"r": 3}'),  # below the bar
            ("topk_fedavg", "diverged", None, 0.99, '{"r": 4}'),  # counts, never selected
            ("fed_ef", "finished", 0.70, 0.80, '{"r": 5}'),  # nothing keeps the bar
        ]
    )
    got = select(values(trials, spec.search.reeval_seeds), spec)
    assert got["topk_fedavg"]["val_acc"]["params_json"] == '{"r": 1}'
    assert got["topk_fedavg"]["retention"]["params_json"] == '{"r": 2}'
    assert got["fedavg"]["retention"]["val_acc"] == 0.90
    assert "retention" not in got["fed_ef"] and got["fed_ef"]["val_acc"]["val_acc"] == 0.70


@pytest.mark.ray
@pytest.mark.slow
def test_the_small_study_end_to_end(tmp_path, fashion_mnist):
    import ray

    from reuse_ray.results import read_table

    out = tmp_path / "study"
    # two trials at a time: a tiny trial waits on Tune as long as it computes (measured beside
    # a busy study: 182 s against 255 s with one CPU)
    init_ray_for_sweeps(num_cpus=2)
    try:
        # one fresh seed (the small scale's second only doubles the final stage's 30 runs;
        # paired statistics over several seeds: tests/analysis)
        spec = load_spec(STUDY, [f"results_dir={out}", "final.seeds=[1001]"], scale="small")
        from reuse_ray.tuning import run_study

        said: list[str] = []
        final = run_study(spec, say=said.append)
        # (--final and --resume of a finished study: tests/tuning/test_scheduler.py, on a
        # study with robust selection)
        # --resume or --final where no study was started: one line, nothing run, no folder
        from reuse_ray.errors import UserError

        empty = load_spec(STUDY, [f"results_dir={tmp_path / 'none'}"], scale="small")
        with pytest.raises(UserError, match="nothing to resume in .*no study 'study'"):
            run_study(empty, resume=True, say=said.append)
        with pytest.raises(UserError, match="no study 'study'"):
            run_study(empty, final_only=True, say=said.append)
        assert not (tmp_path / "none").exists()
    finally:
        ray.shutdown()
    runs = read_table(out, "runs")
    search = runs[runs["stage"] == "search"]
    # honesty: no search trial read the test split; budgets equal; seeds disjoint
    assert (search["test_reads"] == 0).all() and search["test_acc"].isna().all()
    trials = read_table(out, "trials")
    counts = trials.groupby(["sweep", "arm"]).size()
    assert len(counts) == 15 * 2 and set(counts) == {1}  # the ablation is not searched
    assert set(final["seed"]) == {1001} and set(search["seed"]) == {101}
    assert (final["status"] == "finished").all()
    # the test split: once at T, and once per earlier round a level was read at
    levels = read_table(out, "levels")
    read = levels[levels["status"].isin(["crossed", "cap", "over"])]
    early = read[read["round"] < 3].groupby("run_id")["round"].nunique()
    got_reads = final.set_index("run_id")["test_reads"]
    assert (got_reads == 1 + early.reindex(got_reads.index).fillna(0)).all()
    in_search = levels["run_id"].isin(search["run_id"])
    assert levels[in_search]["test_acc"].isna().all()
    assert read[~in_search]["test_acc"].notna().all()
    per_arm = final.groupby(["sweep", "label"])["seed"].nunique()
    assert set(per_arm) == {1}
    assert {"fedavg", "topk_fedavg", "fed_ef", "dg_gate_off"} <= set(final["label"])
    assert trials["selected"].all()  # one trial per arm: it is the selection
    meta = json.loads((out / "study.json").read_text())
    assert meta["status"] == "finished" and meta["trials_per_arm"] == 1 and meta["wall_s"] > 0
    # the launch on the record: where and from which code
    assert [a["final_only"] for a in meta["attempts"]] == [False]
    from reuse_ray.machine import code_commit, describe_machine

    assert {a["machine"] for a in meta["attempts"]} == {describe_machine()}
    assert {a["commit"] for a in meta["attempts"]} == {code_commit()}
    # selection at matched uplink, from every run's readings in both ledgers: 3 rounds of 4
    # clients, so dense FedAvg's first round (4 uploads) spends more than 10 % and 25 % of
    # the 12 (unable, saying so) and is read at round 1 for 50 %; every level an arm's one
    # configuration is read at is that configuration, run once under the arm's label
    names = [f"up{p}{m}" for p in (10, 25, 50) for m in ("", "-measured")]
    for w in ("digits", "fashionmnist"):
        got = meta["choices"][w]
        assert sorted(got["level_bytes"]) == sorted(names)
        assert got["unable"]["fedavg"] == ["up10", "up10-measured", "up25", "up25-measured"]
        assert set(got["unable_why"]["fedavg"].values()) == {
            "one round of every configuration spends more than the level"
        }
        assert got["arms"]["fedavg"]["up50"]["reading_round"] == 1
        # the ablation: each of DG-FedReuse's choices with the gate off, all else shared
        dg, off = got["arms"]["dg_fedreuse"], got["arms"].pop("dg_gate_off")
        assert set(off) == set(dg)
        for objective, choice in off.items():
            assert choice["params"] == {**dg[objective]["params"], "method.dg.gate": "off"}
            assert choice["ablation_of"] == "dg_fedreuse" and choice["label"] == "dg_gate_off"
        for arm, objectives in got["arms"].items():
            reached = [lv for lv in names if lv in objectives]
            unable = got["unable"].get(arm, [])
            assert sorted(reached + unable) == sorted(names)
            assert set(got["unable_why"].get(arm, {})) == set(unable)
            assert {o["label"] for o in objectives.values()} == {arm}
    assert not [line for line in said if line.startswith("report: not written")], said
    md = (out / "report" / "report.md").read_text()
    assert "Study `study` (scale `small`)" in md and "Δ test acc vs topk_fedavg" in md
    assert (out / "report" / "pareto_arms.png").is_file()
    assert "## Bytes to validation accuracy digits 0.85, fashionmnist 0.7" in md
    # the matched-uplink sections: a level table with unable rows, the frontier figures
    assert "## Accuracy at matched uplink" in md
    assert "| unable: one round of every configuration spends more than the level |" in md
    assert "| up50-measured |" in md and "p (Holm)" in md
    assert "## The frontier" in md
    for w in ("digits", "fashionmnist"):
        assert (out / "report" / f"frontier_{w}.png").is_file()
    assert any(line.startswith("study study finished") for line in said), said


def test_report_leaderboard_prints_the_study_header(tmp_path, capsys):
    """The leaderboard command on a study's results: the header line says what produced it."""
    from reuse_ray.cli import main
    from reuse_ray.results import RunWriter

    for arm, acc in (("topk_fedavg", 0.8), ("fed_ef", 0.82)):
        for s in (1001, 1002):
            w = RunWriter(tmp_path, f"{arm}-{s}", "fedavg")
            w.add(
                "rounds",
                {
                    "run_id": f"{arm}-{s}",
                    "seed": s,
                    "round": 1,
                    "val_acc": acc,
                    "cum_up_restricted": 1,
                    "cum_up_measured": 1,
                    "cum_down_measured": 1,
                    "cum_down_sensitivity": 1,
                    "cum_dense_reference": 1,
                    "cum_saving_restricted": 0.0,
                    "cum_saving_bidirectional": 0.0,
                },
            )
            w.set_run_row(
                {
                    "run_id": f"{arm}-{s}",
                    "seed": s,
                    "status": "finished",
                    "dataset": "digits",
                    "stage": "final",
                    "label": arm,
                    "test_acc": acc,
                    "test_round": 1,
                    "rounds_completed": 1,
                }
            )
            w.flush(("runs", "rounds"))
    meta = {
        "name": "study",
        "scale": None,
        "arms": ["topk_fedavg", "fed_ef"],
        "workloads": ["digits"],
        "trials_per_arm": 6,
        "objectives": ["val_acc"],
        "retention": 0.98,
        "retention_reference": "topk_fedavg",
        "final_seeds": [1001, 1002],
        "compare_to": ["topk_fedavg", "fed_ef"],
        "started_at": "2026-11-30T15:00:00+00:00",
        "machine": "2 CPUs (test)",
        "wall_s": 3600.0,
    }
    (tmp_path / "study.json").write_text(json.dumps(copy.deepcopy(meta)))
    assert main(["report", str(tmp_path), "--leaderboard"]) == 0
    out = capsys.readouterr().out
    assert "Study `study`: 2 arms on digits; 6 validation-only search trials" in out
    assert "Run 2026-11-30 on 2 CPUs (test), wall time 60 min." in out
    assert "selected by val_acc; final seeds" in out  # no retention bar where none selects
    # uplink levels, an interrupted study, launches on two machines: all said
    later = dict(
        meta,
        uplink_levels=[0.1, 0.25],
        status="interrupted",
        attempts=[{"machine": "2 CPUs (one)"}, {"machine": "2 CPUs (two)"}],
    )
    (tmp_path / "study.json").write_text(json.dumps(later))
    assert main(["report", str(tmp_path), "--leaderboard"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert (
        "selected by val_acc and at uplink levels 10 %, 25 % of tuned `topk_fedavg`'s "
        "cumulative restricted uplink; final seeds [1001, 1002]. Run 2026-11-30 on 2 CPUs "
        "(one) and 2 CPUs (two), wall time so far 60 min (interrupted)." in head
    )
    (tmp_path / "study.json").write_text(json.dumps(copy.deepcopy(meta)))
    assert "Δ test acc vs fed_ef" in out and "+0.020 (2 pairs)" in out
    # a budget in client-rounds with ASHA and robust selection: said, and a table per arm
    from reuse_ray.tuning.trials import trial_row, write_trials

    rows = [
        trial_row(
            sweep="study-digits",
            stage=stage,
            run_id=f"r{k}",
            searcher="random",
            objective="val_acc",
            params={"k": k},
            status=status,
            arm="topk_fedavg",
            round_reached=reached,
            client_rounds=reached * 10,
            seed=seed,
        )
        for k, (stage, status, reached, seed) in enumerate(
            [
                ("search", "finished", 30, None),
                ("search", "stopped", 5, None),
                ("search", "stopped", 15, None),
                ("reeval", "finished", 30, 202),
            ]
        )
    ]
    write_trials(str(tmp_path), "study-digits", pd.DataFrame(rows))
    gap = {"search_seed": 0.05, "mean": 0.01, "seeds": 2, "fresh": 0.8}
    meta.update(
        client_rounds={"digits": 500},
        search={
            "scheduler": "asha",
            "grace_period": 5,
            "reduction_factor": 3,
            "reeval_top": 2,
            "reeval_seeds": [202],
        },
        selection_gaps={"digits": {"topk_fedavg": gap}},
    )
    (tmp_path / "study.json").write_text(json.dumps(meta))
    assert main(["report", str(tmp_path), "--leaderboard"]) == 0
    out = capsys.readouterr().out
    assert "equal budget per arm and workload of digits 500 client-rounds" in out
    assert "its own ASHA scheduler (grace period 5 rounds" in out
    assert "best 2 by each objective rerun on search seeds [202]" in out
    assert "0.0500 on the search seed, 0.0100 as the mean over 2 search seeds" in out
    assert (
        "digits: 3 configurations per arm (every arm), 67 % of them stopped early; 500 "
        "client-rounds spent per arm of 500, robust selection 300 more." in out
    )
    from analysis import load
    from analysis.studies import budget_section

    table = budget_section(json.loads((tmp_path / "study.json").read_text()), load([str(tmp_path)]))
    line = [x for x in table[-1].splitlines() if x.startswith("| digits | topk_fedavg")][-1]
    assert [c.strip() for c in line.split("|")[3:10]] == [
        "3",
        "2",
        "500",
        "500",
        "300",
        "+0.050",
        "+0.010",
    ]


class _Trial:
    def __init__(self, trial_id: str, arm: str):
        self.trial_id, self.config = trial_id, {"final": {"label": arm}}


def test_every_arm_has_its_own_asha_so_a_weak_method_is_judged_against_itself():
    from ray.tune.schedulers import TrialScheduler

    from reuse_ray.tuning.search import MakeScheduler, PerArm

    make = MakeScheduler("asha", max_t=6, grace_period=1, reduction_factor=2)
    shared, per_arm = make(), PerArm(make)
    trials = [_Trial("a1", "strong"), _Trial("a2", "strong"), _Trial("b1", "weak")]
    for s in (shared, per_arm):
        for t in trials:
            s.on_trial_add(None, t)
    got = {}
    for s, name in ((shared, "shared"), (per_arm, "per arm")):
        for t, acc in zip(trials, (0.9, 0.8, 0.1), strict=True):
            got[name, t.trial_id] = s.on_trial_result(
                None, t, {"val_round": 1, "objective": acc, "round": 1}
            )
    # one ASHA over every arm stops the weak method's first trial at the first rung; its own
    # ASHA has nothing to judge it against yet and lets it go on
    assert got["shared", "b1"] == TrialScheduler.STOP
    assert got["per arm", "b1"] == TrialScheduler.CONTINUE
    assert got["per arm", "a2"] == TrialScheduler.STOP  # below the strong arm's own rung
    assert set(per_arm.arms) == {"strong", "weak"}


def test_arm_points_offers_an_arms_points_until_the_ledger_says_its_budget_is_spent():
    """One ledger (the search's stopper) and one rule: the searcher asks it before offering an
    arm's next point, the stopper stops a reporting trial of a spent arm, and the search ends
    once every arm has spent its budget."""
    import pickle

    from ray.tune.search import Searcher

    from reuse_ray.tuning.budget import ClientRoundBudget
    from reuse_ray.tuning.search import ArmPoints

    points = [{"label": a, "train.lr": k} for a in ("x", "y") for k in range(3)]
    ledger = ClientRoundBudget(40, 4, labels=["x", "y"])  # 10 rounds per arm
    s = ArmPoints(points, ledger)
    assert s.suggest("t1") == {"final": points[0]}
    assert not ledger("t1", {"run_id": "r1", "label": "x", "round": 6})
    assert s.suggest("t2") == {"final": points[1]}
    assert ledger("t2", {"run_id": "r2", "label": "x", "round": 4})  # x has spent 40: stop
    assert ledger("t1", {"run_id": "r1", "label": "x", "round": 7})  # and its other trial too
    assert ledger.spent("x") == 44 and ledger.spent("y") == 0 and not ledger.stop_all()
    assert s.suggest("t3") == {"final": points[3]}  # x's third point is skipped
    assert not ledger("t3", {"run_id": "r3", "label": "y", "round": 9})
    assert ledger("t3", {"run_id": "r3", "label": "y", "round": 9}) is False  # a repeat
    assert ledger("t4", {"run_id": "r4", "label": "y", "round": 1})
    assert ledger.stop_all()  # every arm has spent its budget: the search ends
    assert s.suggest("t5") == Searcher.FINISHED
    plain = ArmPoints(points)  # no budget: every point, in order
    assert [plain.suggest(str(k))["final"] for k in range(6)] == points
    # Tune restores the stopper and the searcher from one pickle: they still share the ledger,
    # which reads the runs table again (here: none) rather than trusting a stale tally
    stopper, searcher = pickle.loads(pickle.dumps((ledger, s)))
    assert searcher.ledger is stopper and stopper.spent("x") == 0


def test_the_ledger_reads_what_the_runs_table_spent_once_a_search_is_restarted(tmp_path):
    """A search continued over its results (a copied folder, a restart): the runs its runs
    table records count once each — by run id, so a kept run reporting again adds nothing —
    and another sweep's or stage's runs not at all."""
    import pandas as pd

    from reuse_ray.tuning.budget import ClientRoundBudget

    def run(run_id, sweep, stage, label, rounds):  # the runs table's columns the ledger reads
        row = {"run_id": run_id, "sweep": sweep, "stage": stage, "label": label}
        folder = tmp_path / "runs" / "method=fedavg"
        folder.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([dict(row, rounds_completed=rounds, status="finished")]).to_parquet(
            folder / f"{run_id}.parquet"
        )

    run("a1", "s", "search", "x", 6)
    run("a2", "s", "search", "y", 3)
    run("a3", "s", "reeval", "x", 9)
    run("a4", "other", "search", "x", 9)
    ledger = ClientRoundBudget(40, 4, labels=["x", "y"], results=(str(tmp_path), "s"))
    assert (ledger.spent("x"), ledger.spent("y")) == (24, 12)
    assert not ledger("t9", {"run_id": "a1", "label": "x", "round": 6})  # kept, reported again
    assert ledger("t10", {"run_id": "b1", "label": "x", "round": 4})  # 40: x is spent
    sweep = ClientRoundBudget(48, 4, results=(str(tmp_path), "s"))  # a sweep: one group
    assert sweep.spent() == 36 and not sweep.stop_all()
    assert sweep("t1", {"run_id": "b2", "round": 3}) and sweep.stop_all()


def test_robust_selection_chooses_by_the_mean_and_a_failed_rerun_counts_as_the_penalty():
    spec = parse_experiment(_raw())  # reeval_top 2 on seed 202
    trials = _trials(
        [
            ("fedavg", "finished", 0.90, 0.0, '{"a": 1}'),  # lucky: 0.70 on seed 202
            ("fedavg", "finished", 0.88, 0.0, '{"a": 2}'),  # steady: 0.87
            ("fedavg", "finished", 0.50, 0.0, '{"a": 3}'),  # no candidate: never chosen
            ("laq", "finished", 0.80, 0.0, '{"b": 1}'),  # its rerun diverged
            ("laq", "finished", 0.60, 0.0, '{"b": 2}'),
        ]
    )
    again = _trials(
        [
            ("fedavg", "finished", 0.70, 0.0, '{"a": 1}'),
            ("fedavg", "finished", 0.87, 0.0, '{"a": 2}'),
            ("laq", "diverged", None, 0.0, '{"b": 1}'),
            ("laq", "finished", 0.62, 0.0, '{"b": 2}'),
        ]
    )
    again["stage"], again["seed"], again["trial_index"] = "reeval", 202, None
    vals = values(pd.concat([trials, again], ignore_index=True), spec.search.reeval_seeds)
    got = select(vals, spec)
    assert got["fedavg"]["val_acc"]["params_json"] == '{"a": 2}'
    assert got["fedavg"]["val_acc"]["selection_mean"] == pytest.approx((0.88 + 0.87) / 2)
    assert got["laq"]["val_acc"]["params_json"] == '{"b": 2}'  # (0.80 − 3) / 2 loses
    assert vals.loc[2, "selection_mean"] != vals.loc[2, "selection_mean"]  # NaN: no rerun


def _reading(run_id, level, ledger, status, val=None, limit=1000.0, rnd=None):
    return {
        "run_id": run_id,
        "level": level,
        "ledger": ledger,
        "status": status,
        "val_acc": val,
        "level_bytes": limit * level,
        "round": rnd,
        "cum_up": None,
    }


def test_selection_at_matched_uplink_reads_each_run_at_the_level_in_both_ledgers():
    """Per arm, level and ledger the configuration whose reading (the model at the last round
    within the level) is the most accurate on validation; a dense arm has a reading at every
    level (an early round), so it is chosen there too; a stopped run's reading counts where
    it was taken before the stop; a level no configuration was read at is unable, with why."""
    from reuse_ray.tuning.record import choices_record
    from reuse_ray.tuning.selection import final_labels, final_points, select_levels

    spec = dataclasses.replace(_one_seed(parse_experiment(_raw())), uplink_levels=(0.1, 0.5))
    rows = [  # arm, status, val_acc at T, saving, params
        ("fedavg", "finished", 0.90, 0.0, '{"a": 1}'),
        ("fedavg", "finished", 0.85, 0.0, '{"a": 2}'),
        ("topk_fedavg", "finished", 0.89, 0.6, '{"r": 1}'),
        ("topk_fedavg", "stopped", 0.70, 0.9, '{"r": 2}'),  # stopped after its up10 reading
        ("fed_ef", "diverged", None, 0.5, '{"e": 1}'),
        ("laq", "finished", 0.80, 0.0, '{"b": 1}'),
    ]
    trials = _trials(rows)
    trials["run_id"] = [f"run{k}" for k in range(len(rows))]
    trials["trial_id"] = [f"t{k}" for k in range(len(rows))]
    trials["cum_up_restricted"] = 1.0
    readings = pd.DataFrame(
        [
            # dense FedAvg: up10 read early (round 4), up50 at round 20
            _reading("run0", 0.1, "restricted", "crossed", 0.60, rnd=4),
            _reading("run0", 0.1, "measured", "crossed", 0.60, rnd=4),
            _reading("run0", 0.5, "restricted", "crossed", 0.84, rnd=20),
            _reading("run0", 0.5, "measured", "crossed", 0.84, rnd=20),
            _reading("run1", 0.1, "restricted", "crossed", 0.65, rnd=4),
            _reading("run1", 0.1, "measured", "crossed", 0.55, rnd=3),  # its headers cost
            _reading("run1", 0.5, "restricted", "crossed", 0.80, rnd=20),
            _reading("run1", 0.5, "measured", "crossed", 0.80, rnd=20),
            _reading("run2", 0.1, "restricted", "crossed", 0.70, rnd=9),
            _reading("run2", 0.1, "measured", "crossed", 0.70, rnd=9),
            _reading("run2", 0.5, "restricted", "cap", 0.89, rnd=40),
            _reading("run2", 0.5, "measured", "cap", 0.89, rnd=40),
            _reading("run3", 0.1, "restricted", "crossed", 0.75, rnd=30),  # before its stop
            _reading("run3", 0.1, "measured", "crossed", 0.75, rnd=30),
            _reading("run3", 0.5, "restricted", "stopped"),
            _reading("run3", 0.5, "measured", "stopped"),
            _reading("run4", 0.1, "restricted", "diverged"),
            _reading("run4", 0.1, "measured", "diverged"),
            _reading("run4", 0.5, "restricted", "diverged"),
            _reading("run4", 0.5, "measured", "diverged"),
            _reading("run5", 0.1, "restricted", "over", 0.10, rnd=0),  # one round: too much
            _reading("run5", 0.1, "measured", "over", 0.10, rnd=0),
            _reading("run5", 0.5, "restricted", "crossed", 0.70, rnd=1),
            _reading("run5", 0.5, "measured", "crossed", 0.70, rnd=1),
        ]
    )
    chosen = select(values(trials, spec.search.reeval_seeds), spec)
    levels, unable, limits, why = select_levels(trials, spec, readings)
    assert limits == {"up10": 100.0, "up10-measured": 100.0, "up50": 500.0, "up50-measured": 500.0}
    pick = {arm: {lv: r["params_json"] for lv, r in got.items()} for arm, got in levels.items()}
    assert pick["fedavg"] == {
        "up10": '{"a": 2}',  # 0.65 against 0.60
        "up10-measured": '{"a": 1}',  # 0.60 against 0.55: the measured ledger chooses otherwise
        "up50": '{"a": 1}',
        "up50-measured": '{"a": 1}',
    }
    assert pick["topk_fedavg"]["up10"] == '{"r": 2}'  # read at round 30, stopped after
    assert pick["topk_fedavg"]["up50"] == '{"r": 1}'  # the stopped run was never read there
    assert levels["fedavg"]["up10"]["reading"] == 0.65
    assert levels["fedavg"]["up10"]["reading_round"] == 4
    assert "fed_ef" not in levels and unable["fed_ef"] == list(limits)
    assert why["fed_ef"]["up10"].startswith("no configuration was read there")
    assert unable["laq"] == ["up10", "up10-measured"]
    assert why["laq"]["up10"] == "one round of every configuration spends more than the level"
    for arm, got in levels.items():
        chosen.setdefault(arm, {}).update(got)
    labels = final_labels(spec, chosen)
    # one configuration chosen for several objectives runs once, under its first label
    assert labels[("fedavg", "val_acc")] == "fedavg"
    assert labels[("fedavg", "up10")] == "fedavg@up10"
    assert labels[("fedavg", "up10-measured")] == "fedavg"
    assert labels[("topk_fedavg", "up10")] == "topk_fedavg@up10"
    finals = final_points(spec, chosen)
    per_label = {}
    for p in finals:
        per_label.setdefault(p["label"], set()).add(p["seed"])
    assert set(per_label) == {"fedavg", "fedavg@up10", "topk_fedavg", "topk_fedavg@up10", "laq"}
    assert all(seeds == set(spec.final_seeds) for seeds in per_label.values())
    record = choices_record(spec, chosen, unable, limits, why)
    assert record["arms"]["fedavg"]["up10"]["search_val_acc"] == 0.65
    assert record["arms"]["fedavg"]["up10"]["reading_round"] == 4
    assert record["unable_why"]["laq"]["up10"].startswith("one round")
    json.dumps(record)  # it goes to study.json


def test_robust_selection_at_a_level_averages_the_readings_over_the_search_seeds():
    from reuse_ray.tuning.selection import arm_candidates as candidates
    from reuse_ray.tuning.selection import select_levels

    spec = parse_experiment(_raw())  # reeval_top 2 on seed 202
    spec = dataclasses.replace(
        spec,
        uplink_levels=(0.1,),
        search=dataclasses.replace(spec.search, reeval_top=1, reeval_seeds=(202,)),
    )
    trials = _trials(
        [
            ("topk_fedavg", "finished", 0.80, 0.9, '{"r": 1}'),
            ("topk_fedavg", "finished", 0.70, 0.9, '{"r": 2}'),
        ]
    )
    trials["run_id"] = ["s1", "s2"]
    trials["seed"] = None
    read = [
        _reading("s1", 0.1, "restricted", "crossed", 0.66, rnd=8),  # lucky at up10
        _reading("s2", 0.1, "restricted", "crossed", 0.64, rnd=8),
    ]
    cands = candidates(trials, spec, pd.DataFrame(read))
    # the best val_acc configuration and the best reading at up10: here the same one
    assert cands["params_json"].tolist() == ['{"r": 1}']
    again = _trials([("topk_fedavg", "finished", 0.79, 0.9, '{"r": 1}')])
    again["stage"], again["seed"], again["trial_index"], again["run_id"] = "reeval", 202, None, "e1"
    read.append(_reading("e1", 0.1, "restricted", "crossed", 0.50, rnd=8))
    both = pd.concat([trials, again], ignore_index=True)
    levels, _, _, _ = select_levels(both, spec, pd.DataFrame(read))
    got = levels["topk_fedavg"]["up10"]
    # only candidates are chosen from, by the mean of their readings: (0.66 + 0.50) / 2
    assert got["params_json"] == '{"r": 1}' and got["reading"] == pytest.approx(0.58)


def test_with_uplink_levels_each_level_of_an_arm_has_its_own_asha():
    """A compressed configuration is judged against its own level at the first rung: the
    dense one's accuracy does not stop it."""
    from ray.tune.schedulers import TrialScheduler

    from reuse_ray.tuning.search import MakeScheduler, PerArm

    make = MakeScheduler("asha", max_t=6, grace_period=2, reduction_factor=2)
    plain, levels = PerArm(make), PerArm(make, (0.1, 0.5), route_at=2)
    trials = [_Trial("d1", "arm"), _Trial("d2", "arm"), _Trial("c1", "arm")]
    results = [(0.9, 0.0), (0.8, 0.0), (0.5, 0.93)]  # (objective, saving): c1 uses 7 %
    for s in (plain, levels):
        for t in trials:
            s.on_trial_add(None, t)
    got = {}
    for s, name in ((plain, "plain"), (levels, "levels")):
        for t, (acc, saving) in zip(trials, results, strict=True):
            early = {"val_round": 1, "objective": acc, "round": 1, "cum_saving_restricted": saving}
            got[name, t.trial_id, 1] = s.on_trial_result(None, t, early)
            rung = dict(early, val_round=2, round=2)
            got[name, t.trial_id, 2] = s.on_trial_result(None, t, rung)
    assert got["plain", "c1", 2] == TrialScheduler.STOP  # below its arm's rung
    assert got["levels", "c1", 1] == TrialScheduler.CONTINUE  # not judged before the rung
    assert got["levels", "c1", 2] == TrialScheduler.CONTINUE  # the only one of its level
    assert got["levels", "d2", 2] == TrialScheduler.STOP  # judged against d1
    assert levels.routed == {"d1": "arm|above", "d2": "arm|above", "c1": "arm|up10"}


def test_a_launch_killed_without_a_word_keeps_the_wall_time_spent_before_it(tmp_path):
    """study.json carries the wall time so far from the moment a launch opens: a launch whose
    machine or session ended (no 'interrupted' record) loses only its own time."""
    import time

    from reuse_ray.tuning import Experiment as StudyExperiment

    spec = dataclasses.replace(parse_experiment(_raw()), results_dir=str(tmp_path))
    (tmp_path / "study.json").write_text(json.dumps({"status": "interrupted", "wall_s": 1000.0}))
    first = StudyExperiment(spec)
    assert first.started(continuing=True)
    first.opened(final_only=True)
    meta = json.loads((tmp_path / "study.json").read_text())
    assert meta["status"] == "running" and 1000.0 <= meta["wall_s"] < 1010.0
    time.sleep(0.05)  # killed here: no interrupted record; the next launch goes on from it
    again = StudyExperiment(spec)
    again.started(continuing=True)
    again.opened(final_only=True)
    meta = json.loads((tmp_path / "study.json").read_text())
    assert 1000.0 <= meta["wall_s"] < 1010.0 and len(meta["attempts"]) == 2
