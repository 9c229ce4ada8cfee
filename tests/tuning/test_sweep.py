"""Sweeps: validation of sweep files, search stages with each searcher, the trials table and the
test-split final stage (validation-only search, paired fresh seeds)."""

from __future__ import annotations

import copy
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import ray
import yaml
from conftest import init_ray_for_sweeps

from reuse_ray.config import ConfigError
from reuse_ray.errors import UserError
from reuse_ray.results import read_table
from reuse_ray.tuning import derive_concurrency, pareto_front, parse_experiment, run_sweep

pytestmark = pytest.mark.ray

BASE = {
    "seed": 5,
    "data": {"name": "digits"},
    "model": {"name": "cnn", "hidden": 16},
    "train": {"epochs": 1, "batch_size": 32},
    "fl": {"num_clients": 10, "clients_per_round": 4, "rounds": 4, "eval_every": 2},
    "method": {"name": "dg_fedreuse", "topk_ratio": 0.2},
}


def sweep(tmp_path, **blocks) -> dict:
    raw = {
        "name": "t",
        "base": copy.deepcopy(BASE),
        "search": {"space": "dg_fedreuse", "searcher": "tpe", "num_samples": 3, "seed": 0},
        "results_dir": str(tmp_path / "sweep"),
        "checkpoint_every": 2,
    }
    raw.update(blocks)
    return raw


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    init_ray_for_sweeps()
    yield
    ray.shutdown()


# ------------------------------------------------------------------ validation, no trials run


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        ({"search": {"searcher": "bayes", "space": "dg_fedreuse"}}, "search.searcher", "tpe"),
        ({"search": {"searcher": "tpe"}}, "search.space", "needs a space"),
        ({"search": {"space": "nope"}}, "search.space", "allowed: dg_fedreuse"),
        ({"search": {"space": "fedavg", "objective": "pareto"}}, "search.objective", "nsga2"),
        (
            {"search": {"searcher": "grid", "grid": {"method.topk_ratio": [0.2, 2.0]}}},
            "search.grid.method.topk_ratio",
            "(0.0, 1.0]",
        ),
        ({"search": {"space": "fedavg", "num_samples": 0}}, "search.num_samples", "> 0"),
        ({"trial": {"backend": "spark"}}, "trial.backend", "local, ray"),
        ({"trial": {"reuse_actors": "yes"}}, "trial.reuse_actors", "true, false"),
        ({"trial": {"max_failures": -1}}, "trial.max_failures", ">= 0"),
        ({"trial": {"resources": {"CPU": 1}}}, "trial.resources", "custom resource"),
        ({"final": {"seeds": [5, 6]}}, "final.seeds", "[5] were used by the search"),
        ({"final": {"seeds": []}}, "final.seeds", "needs a list of fresh seeds"),
        ({"bogus": 1}, "bogus", "unknown field"),
    ],
)
def test_bad_sweep_files_name_the_field(tmp_path, change, field, fragment):
    with pytest.raises(ConfigError) as exc:
        parse_experiment(sweep(tmp_path, **change))
    assert exc.value.field == field and fragment in str(exc.value)


def test_every_shipped_sweep_file_validates():
    from pathlib import Path

    files = sorted(Path("sweeps").glob("*.yaml"))
    names = {f.stem for f in files}
    assert {"quickstart", "paper_protocol", "topk_grid", "factorial", "dg_search", "study"} <= names
    from reuse_ray.tuning import load_spec

    for f in files:
        raw = yaml.safe_load(f.read_text())
        for scale in (None, *raw.get("scales", {})):
            assert load_spec(f, scale=scale).kind == raw.get("kind", "sweep")


def test_concurrency_is_derived_from_resources(tmp_path):
    spec = parse_experiment(sweep(tmp_path))
    assert derive_concurrency(spec, {"CPU": 2.0}) == 2
    assert derive_concurrency(spec, {"CPU": 16.0}) == 16
    ray_trial = parse_experiment(
        sweep(tmp_path, trial={"backend": "ray", "cpus": 0.5, "workers": 3})
    )
    assert ray_trial.trial.bundles() == [{"CPU": 0.5}, {"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]
    assert derive_concurrency(ray_trial, {"CPU": 8.0}) == 2
    with pytest.raises(ValueError, match=r"one trial needs CPU 3.5 \(the cluster has 2\); "):
        derive_concurrency(ray_trial, {"CPU": 2.0, "memory": 1e10, "node:127.0.0.1": 1.0})
    gpu = parse_experiment(
        sweep(tmp_path, trial={"backend": "ray", "workers": 2, "gpu_fraction": 0.5})
    )
    with pytest.raises(ValueError, match=r"needs GPU 1 \(the cluster has 0\);"):
        derive_concurrency(gpu, {"CPU": 2.0})


def test_pareto_front_by_hand():
    df = pd.DataFrame(
        {"val_acc": [0.9, 0.8, 0.85, 0.7, 0.9], "cum_up_restricted": [10, 5, 12, 5, 10]}
    )
    assert pareto_front(df).tolist() == [True, True, False, False, True]


# ------------------------------------------------------------------ real sweeps


def test_tpe_search_then_final_stage_validation_only(tmp_path):
    raw = sweep(
        tmp_path, final={"seeds": [71, 72], "top": 1, "compare": [{"method.name": "fedavg"}]}
    )
    out = run_sweep(parse_experiment(raw), say=lambda m: None)
    trials = read_table(tmp_path / "sweep", "trials")
    assert len(trials) == 3 and trials["status"].eq("finished").all()
    assert trials["selected"].sum() == 1 and trials["searcher"].eq("tpe").all()
    params = [json.loads(p) for p in trials["params_json"]]
    assert all(p["method.dg.tau_min"] <= p["method.dg.tau0"] for p in params)
    runs = read_table(tmp_path / "sweep", "runs")
    search = runs[runs["stage"] == "search"]
    final = runs[runs["stage"] == "final"]
    # the search never read the test split; the final stage read it exactly once per run
    assert (
        len(search) == 3 and (search["test_reads"] == 0).all() and search["test_acc"].isna().all()
    )
    assert len(final) == 4 and (final["test_reads"] == 1).all() and final["test_acc"].notna().all()
    assert set(final["seed"]) == {71, 72} and set(search["seed"]) == {5}
    assert sorted(final["label"].unique()) == ["compare-0", "selected-0"]
    # pairing: on each fresh seed both configurations saw the same client schedule
    ev = read_table(tmp_path / "sweep", "client_events")
    for seed in (71, 72):
        ids = final[final["seed"] == seed]["run_id"].tolist()
        scheds = [
            ev[ev.run_id == r]
            .sort_values(["round", "client_id"])[["round", "client_id"]]
            .to_numpy()
            for r in ids
        ]
        assert np.array_equal(scheds[0], scheds[1])
    assert out.selected and out.final_runs is not None
    # the selected run's config is the best trial's, applied to the base
    best = trials[trials["selected"]].iloc[0]
    assert best["val_acc"] == trials["val_acc"].max()
    # the sweep ended with a report of its final stage: tables, figures, both arms
    report = tmp_path / "sweep" / "report"
    text = (report / "report.md").read_text()
    assert "dg_fedreuse [selected-0]" in text and "fedavg [compare-0]" in text
    assert "Fixed-budget comparison at round 4" in text and "gate diagnostics" in text
    for png in (
        "val_acc_vs_round.png",
        "val_acc_vs_uplink.png",
        "gate_scores.png",
        "pareto_front.png",
    ):
        assert (report / png).stat().st_size > 1000
    from reuse_ray.cli import main

    assert main(["report", str(tmp_path / "sweep"), "--out", str(tmp_path / "rep2")]) == 0
    assert (tmp_path / "rep2" / "report.html").is_file()
    # rerunning without --resume refuses to overwrite
    with pytest.raises(UserError, match="--resume"):
        run_sweep(parse_experiment(raw), say=lambda m: None)
    # a crafted tuner.pkl left group-writable (the final stage's: --resume goes on from the
    # finished search without its Tune state): nothing is unpickled. With every final run
    # finished, --resume has no trial to restore and reads no Tune state; with one final run's
    # row gone, its trial would be restored, and --resume refuses the state
    state = next((tmp_path / "sweep" / "_tune").glob("*-final/tuner.pkl"))
    marker = tmp_path / "unpickled"
    state.write_bytes(pickle.dumps(_Payload(marker)))
    state.chmod(0o664)
    run_sweep(parse_experiment(raw), resume=True, say=lambda m: None)
    assert not marker.exists()
    gone = final["run_id"].iloc[0]
    (row,) = (tmp_path / "sweep" / "runs").rglob(f"{gone}.parquet")
    row.unlink()
    with pytest.raises(UserError, match=r"tuner\.pkl is writable by its group"):
        run_sweep(parse_experiment(raw), resume=True, say=lambda m: None)
    assert not marker.exists()


class _Payload:
    """Unpickling this touches a marker file: proof that a pickle was loaded."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _tune_state(root):
    exp = root / "_tune" / "x-search"
    (exp / "trial-1").mkdir(parents=True)
    for f in (exp / "tuner.pkl", exp / "experiment_state-1.json", exp / "trial-1" / "params.pkl"):
        f.write_bytes(b"state")
        f.chmod(0o644)
    for d in (root / "_tune", exp, exp / "trial-1"):
        d.chmod(0o755)
    return exp


def test_resume_reads_tune_state_only_when_this_user_alone_could_have_written_it(tmp_path):
    from reuse_ray.paths import check_tune_state_is_yours

    exp = _tune_state(tmp_path / "ok")
    check_tune_state_is_yours(str(exp))  # owned by this user, writable by nobody else
    exp = _tune_state(tmp_path / "other")
    (exp / "trial-1" / "params.pkl").chmod(0o646)
    with pytest.raises(UserError, match=r"params\.pkl is writable by others"):
        check_tune_state_is_yours(str(exp))
    exp = _tune_state(tmp_path / "dir")
    (exp / "trial-1").chmod(0o775)
    with pytest.raises(UserError, match=r"trial-1 is writable by its group"):
        check_tune_state_is_yours(str(exp))
    exp = _tune_state(tmp_path / "link")
    elsewhere = tmp_path / "elsewhere.pkl"
    elsewhere.write_bytes(b"x")
    (exp / "searcher-state-1.pkl").symlink_to(elsewhere)
    with pytest.raises(UserError, match=r"searcher-state-1\.pkl is a symbolic link"):
        check_tune_state_is_yours(str(exp))
    exp = _tune_state(tmp_path / "dirlink")
    (exp / "trial-2").symlink_to(tmp_path / "ok", target_is_directory=True)
    with pytest.raises(UserError, match=r"trial-2 is a symbolic link"):
        check_tune_state_is_yours(str(exp))
    if os.getuid() == 0:  # only root can give a file away
        exp = _tune_state(tmp_path / "owner")
        os.chown(exp / "tuner.pkl", 12345, 12345)
        with pytest.raises(UserError, match=r"tuner\.pkl is owned by uid 12345, not by you"):
            check_tune_state_is_yours(str(exp))


def test_nsga2_pareto_and_retention_and_grid(tmp_path):
    raw = sweep(
        tmp_path / "mo",
        search={
            "space": "dg_fedreuse",
            "searcher": "nsga2",
            "objective": "pareto",
            "num_samples": 4,
            "seed": 1,
        },
    )
    run_sweep(parse_experiment(raw), say=lambda m: None)
    trials = read_table(tmp_path / "mo" / "sweep", "trials")
    front = pareto_front(trials)
    assert trials["on_pareto_front"].tolist() == front.tolist() and front.any()

    raw = sweep(
        tmp_path / "ret",
        search={
            "space": "dg_fedreuse",
            "searcher": "random",
            "objective": "retention",
            "num_samples": 3,
            "retention": 0.5,
            "reference": {"method.name": "fedavg", "method.topk_ratio": 1.0},
        },
    )
    raw["base"]["engine"] = {"channels_last": True}  # an engine setting the trials carry
    run_sweep(parse_experiment(raw), say=lambda m: None)
    runs = read_table(tmp_path / "ret" / "sweep", "runs")
    # the reference that sets the bar ran with the trials' engine settings
    assert (runs["trial_id"] == "reference").sum() == 1
    assert runs["cfg.engine.channels_last"].all() and len(runs) == 4
    trials = read_table(tmp_path / "ret" / "sweep", "trials")
    ref = trials["reference_val_acc"].iloc[0]
    assert ref > 0.1
    feasible = trials["val_acc"] >= 0.5 * ref
    assert (
        trials.loc[feasible, "objective_value"] == trials.loc[feasible, "cum_saving_restricted"]
    ).all()
    assert (trials.loc[~feasible, "objective_value"] < -1).all()

    raw = sweep(
        tmp_path / "grid",
        search={
            "searcher": "grid",
            "num_samples": 1,
            "grid": {"method.topk_ratio": [1.0, 0.2], "method.dg.gate": ["off", "proxy"]},
        },
    )
    run_sweep(parse_experiment(raw), say=lambda m: None)
    trials = read_table(tmp_path / "grid" / "sweep", "trials")
    combos = sorted(
        (json.loads(p)["method.topk_ratio"], json.loads(p)["method.dg.gate"])
        for p in trials["params_json"]
    )
    assert combos == [(0.2, "off"), (0.2, "proxy"), (1.0, "off"), (1.0, "proxy")]


def test_diverged_trial_is_recorded_and_the_sweep_goes_on(tmp_path):
    raw = sweep(
        tmp_path, search={"searcher": "grid", "num_samples": 1, "grid": {"train.lr": [0.05, 50.0]}}
    )
    run_sweep(parse_experiment(raw), say=lambda m: None)
    trials = read_table(tmp_path / "sweep", "trials")
    status = dict(
        zip(
            [json.loads(p)["train.lr"] for p in trials["params_json"]],
            trials["status"],
            strict=True,
        )
    )
    assert status == {0.05: "finished", 50.0: "diverged"}
    runs = read_table(tmp_path / "sweep", "runs").set_index("cfg.train.lr")
    assert runs.loc[50.0, "status"] == "diverged" and "non-finite" in runs.loc[50.0, "error"]
    assert runs.loc[0.05, "status"] == "finished"


def test_trial_on_the_ray_engine_reserves_its_workers(tmp_path):
    raw = sweep(
        tmp_path,
        search={"searcher": "grid", "num_samples": 1, "grid": {"method.dg.gate": ["off"]}},
        trial={"backend": "ray", "cpus": 0.5, "workers": 1, "cpu_per_worker": 0.5},
    )
    run_sweep(parse_experiment(raw), say=lambda m: None)
    runs = read_table(tmp_path / "sweep", "runs")
    assert runs.iloc[0]["status"] == "finished" and runs.iloc[0]["backend"] == "ray"


def test_protocol_searcher_none_runs_every_grid_cell_on_the_final_seeds(tmp_path):
    raw = sweep(
        tmp_path,
        search={
            "searcher": "none",
            "grid": {"method.name": ["fedavg", "dg_fedreuse"], "method.topk_ratio": [1.0, 0.2]},
        },
        final={"seeds": [5]},
    )
    raw["base"]["fl"]["rounds"] = 2
    run_sweep(parse_experiment(raw), say=lambda m: None)
    runs = read_table(tmp_path / "sweep", "runs")
    assert len(runs) == 4 and (runs["stage"] == "final").all() and (runs["test_reads"] == 1).all()
    cells = sorted(zip(runs["cfg.method.name"], runs["cfg.method.topk_ratio"], strict=True))
    assert cells == [("dg_fedreuse", 0.2), ("dg_fedreuse", 1.0), ("fedavg", 0.2), ("fedavg", 1.0)]

    # the same sweep started over a copy of its Parquet (no Tune state: e.g. results shipped
    # with a repository) keeps every finished run instead of recomputing it
    import shutil

    again = tmp_path / "again"
    for table in ("runs", "rounds", "client_events", "clients"):
        shutil.copytree(tmp_path / "sweep" / table, again / table)
    before = {p: p.stat().st_mtime_ns for p in again.rglob("*.parquet")}
    raw["results_dir"] = str(again)
    said: list[str] = []
    run_sweep(parse_experiment(raw), say=said.append)
    assert {p: p.stat().st_mtime_ns for p in before} == before  # not one file rewritten
    kept = read_table(again, "runs")
    pd.testing.assert_frame_equal(
        kept.sort_values("run_id").reset_index(drop=True),
        runs.sort_values("run_id").reset_index(drop=True),
    )
    # no trial started for them: one line says so
    assert any("final: 4 runs already finished here; rows kept" in m for m in said), said
    assert not any("final trial" in m for m in said)


def test_a_relative_results_dir_is_a_folder_of_dated_sweeps_under_the_results_root(
    tmp_path, monkeypatch
):
    # never the working directory: Tune runs trials in their own, and `ray job submit` runs the
    # driver in a package cache on the head node
    from reuse_ray.tuning.pipeline import dated as sweep_folder

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REUSE_RAY_RESULTS", str(tmp_path / "root"))
    raw = yaml.safe_load(
        Path(__file__).resolve().parents[2].joinpath("sweeps/quickstart.yaml").read_text()
    )
    raw["results_dir"] = "out/qs"
    spec = parse_experiment(raw)
    assert spec.results_dir == str(tmp_path / "root" / "out" / "qs") and spec.dated
    first = sweep_folder(spec, resume=False)
    (Path(first.results_dir) / "_tune").mkdir(parents=True)
    second = sweep_folder(spec, resume=False)
    assert first.results_dir != second.results_dir  # two submissions, two sweeps
    for s in (first, second):
        assert Path(s.results_dir).parent == tmp_path / "root" / "out" / "qs"
        assert s.workload(s.name).run_config().results_dir == s.results_dir and not s.dated
    (Path(second.results_dir) / "_tune").mkdir(parents=True)
    assert sweep_folder(spec, resume=True).results_dir == second.results_dir  # the newest
    # an absolute folder (or --results) is used as it is
    raw["results_dir"] = str(tmp_path / "exact")
    exact = parse_experiment(raw)
    assert not exact.dated and sweep_folder(exact, False).results_dir == str(tmp_path / "exact")


def test_resume_without_an_earlier_dated_sweep_is_one_clear_error(tmp_path, monkeypatch):
    from reuse_ray.errors import UserError
    from reuse_ray.tuning.pipeline import dated as sweep_folder

    monkeypatch.setenv("REUSE_RAY_RESULTS", str(tmp_path))
    raw = yaml.safe_load(
        Path(__file__).resolve().parents[2].joinpath("sweeps/quickstart.yaml").read_text()
    )
    with pytest.raises(UserError, match="^--resume: no earlier sweep 'quickstart'"):
        sweep_folder(parse_experiment(raw), resume=True)
    # --final of nothing names --final, not --resume
    with pytest.raises(UserError, match="^--final: no earlier sweep .* run it without --final,"):
        sweep_folder(parse_experiment(raw), resume=True, flag="--final")


def test_final_of_no_earlier_dated_sweep_names_final(tmp_path, monkeypatch):
    from reuse_ray.errors import UserError

    monkeypatch.setenv("REUSE_RAY_RESULTS", str(tmp_path / "root"))
    raw = dict(sweep(tmp_path), results_dir="dated/qs")
    with pytest.raises(UserError, match="^--final: no earlier sweep .* run it without --final,"):
        run_sweep(parse_experiment(raw), final_only=True, say=lambda m: None)
    assert not (tmp_path / "root" / "dated" / "qs").exists()


def test_resume_with_nothing_to_resume_at_the_folder_says_so_and_starts_nothing(tmp_path):
    from reuse_ray.errors import UserError

    raw = sweep(tmp_path)
    with pytest.raises(UserError, match="nothing to resume in .*run it without --resume"):
        run_sweep(parse_experiment(raw), resume=True, say=lambda m: None)
    with pytest.raises(UserError, match="--final: nothing to resume in .*without --final"):
        run_sweep(parse_experiment(raw), final_only=True, say=lambda m: None)
    assert not (tmp_path / "sweep").exists()  # no trial ran, no folder was made


def test_robust_selection_reruns_the_best_on_further_search_seeds_and_chooses_by_the_mean(
    tmp_path,
):
    raw = sweep(tmp_path, final={"seeds": [21]})
    raw["search"].update(num_samples=3, reeval_top=2, reeval_seeds=[11])
    said: list[str] = []
    out = run_sweep(parse_experiment(raw), say=said.append)
    trials = read_table(tmp_path / "sweep", "trials")
    search = trials[trials["stage"] == "search"]
    again = trials[trials["stage"] == "reeval"]
    assert len(search) == 3 and len(again) == 2 and list(again["seed"]) == [11, 11]
    cands = search[search["selection_mean"].notna()]
    assert len(cands) == 2 and set(again["params_json"]) == set(cands["params_json"])
    for _, c in cands.iterrows():  # the mean over the search seed and the two further seeds
        mine = again[again["params_json"] == c["params_json"]]["objective_value"]
        assert c["selection_mean"] == pytest.approx((c["objective_value"] + mine.sum()) / 2)
    best = cands.sort_values("selection_mean", ascending=False).iloc[0]
    assert out.selected == [json.loads(best["params_json"])]
    assert trials.loc[trials["selected"], "run_id"].tolist() == [best["run_id"]]
    runs = read_table(tmp_path / "sweep", "runs")
    assert (runs.loc[runs["stage"] == "reeval", "test_reads"] == 0).all()
    assert set(runs.loc[runs["stage"] == "reeval", "seed"]) == {11}
    assert any(m.startswith("selection gap of selected-0") for m in said), said
    # --resume over a copy without Tune's state (results as they ship): the finished search is
    # not searched again and its re-evaluation rows are not doubled; the same choice and rows
    import shutil

    copied = tmp_path / "copy"
    shutil.copytree(tmp_path / "sweep", copied, ignore=shutil.ignore_patterns("_tune"))
    again = run_sweep(parse_experiment(dict(raw, results_dir=str(copied))), resume=True, say=print)
    assert again.selected == out.selected
    cols = ["stage", "run_id", "seed", "status", "objective_value", "selection_mean", "selected"]
    pd.testing.assert_frame_equal(
        read_table(copied, "trials")[cols].sort_values(["stage", "run_id"], ignore_index=True),
        trials[cols].sort_values(["stage", "run_id"], ignore_index=True),
    )
    pd.testing.assert_frame_equal(
        read_table(copied, "runs").sort_values("run_id", ignore_index=True),
        runs.sort_values("run_id", ignore_index=True),
    )


def test_a_retention_sweep_resumed_in_its_search_and_finalled_keeps_its_reference(tmp_path):
    """A retention sweep whose search was interrupted (its reference run finished, no trials
    table yet) resumes without running the reference again (the engine refuses a finished
    run); ``--final`` scores the re-evaluation rows against the same reference, as the search
    did — never ``None`` and the -2 penalty."""
    raw = sweep(
        tmp_path,
        search={
            "space": "dg_fedreuse",
            "searcher": "random",
            "objective": "retention",
            "num_samples": 2,
            "retention": 0.5,
            "reference": {"method.name": "fedavg", "method.topk_ratio": 1.0},
            "reeval_top": 1,
            "reeval_seeds": [11],
        },
        final={"seeds": [21]},
    )
    run_sweep(parse_experiment(raw), say=lambda m: None)
    root = tmp_path / "sweep"
    trials = read_table(root, "trials")
    ref = trials["reference_val_acc"].dropna().unique()
    assert len(ref) == 1 and ref[0] > 0.1
    runs = read_table(root, "runs")
    # the search interrupted before its trials table: --resume walks it again
    os.replace(root / "trials", tmp_path / "trials-aside")
    said: list[str] = []
    run_sweep(parse_experiment(raw), resume=True, say=said.append)
    resumed = read_table(root, "trials")
    assert (read_table(root, "runs")["trial_id"] == "reference").sum() == 1
    assert set(read_table(root, "runs")["run_id"]) == set(runs["run_id"])
    assert resumed["reference_val_acc"].eq(ref[0]).all(), resumed["reference_val_acc"]
    # --final: the re-evaluation stage's rows scored against the recorded reference
    run_sweep(parse_experiment(raw), final_only=True, say=said.append)
    final = read_table(root, "trials")
    again = final[final["stage"] == "reeval"]
    assert len(again) == 1 and again["reference_val_acc"].eq(ref[0]).all()
    assert (again["objective_value"] > -2).all(), again[["val_acc", "objective_value"]]
    cols = ["stage", "run_id", "objective_value", "selection_mean", "selected"]
    key = ["stage", "run_id"]
    pd.testing.assert_frame_equal(
        final[cols].sort_values(key, ignore_index=True),
        trials[cols].sort_values(key, ignore_index=True),
    )


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"reeval_top": 2}, "'search.reeval_seeds': reeval_top needs further search seeds"),
        ({"reeval_seeds": [11]}, "'search.reeval_top': 0 with reeval_seeds given"),
        ({"reeval_top": 1, "reeval_seeds": [5]}, "5 is the search's own seed"),
        ({"reeval_top": 1, "reeval_seeds": [21]}, "[21] were used by the search"),
    ],
)
def test_bad_robust_selection_fields_name_the_field(tmp_path, change, fragment):
    raw = sweep(tmp_path, final={"seeds": [21]})
    raw["search"].update(change)
    with pytest.raises(ConfigError) as err:
        parse_experiment(raw)
    assert fragment in str(err.value)


def test_a_sweep_whose_every_trial_fails_writes_its_trials_and_says_why(tmp_path, capsys):
    from reuse_ray.errors import UserError

    raw = sweep(
        tmp_path, search={"space": "fedavg", "searcher": "random", "num_samples": 2, "seed": 0}
    )
    raw["base"]["method"] = {"name": "fedavg"}
    raw["base"]["data"] = {"name": "synthetic", "synthetic_shape": [1, 2, 2]}  # CNN too small
    spec = parse_experiment(raw)
    said = []
    with pytest.raises(UserError, match="no search trial finished"):
        run_sweep(spec, say=said.append)
    trials = pd.read_parquet(Path(spec.results_dir) / "trials" / "t.parquet")
    assert len(trials) == 2 and (trials["status"] == "error").all()
    assert trials["error"].str.contains("too small for the shallow CNN").all()
    assert any("too small for the shallow CNN" in line for line in said)
    # a user error ends its trial once: no restart (the same configuration fails the same way)
    assert not any("restarting" in line for line in said), said
    assert sum(" error: " in line and "(error)" in line for line in said) == 2


def test_a_diverged_trial_reads_nan_in_trials_and_runs(tmp_path):
    raw = sweep(
        tmp_path, search={"space": "fedavg", "searcher": "random", "num_samples": 1, "seed": 0}
    )
    raw["base"]["method"] = {"name": "fedavg"}
    raw["base"]["train"] = {"epochs": 1, "batch_size": 32, "lr": 1.0e8}  # blows up at once
    spec = parse_experiment(raw)
    with pytest.raises(Exception, match="no search trial finished"):
        run_sweep(spec, say=lambda _m: None)
    runs = read_table(spec.results_dir, "runs")
    trials = pd.read_parquet(Path(spec.results_dir) / "trials" / "t.parquet")
    assert runs["status"].tolist() == ["diverged"] and trials["status"].tolist() == ["diverged"]
    assert runs["final_val_acc"].isna().all() and trials["val_acc"].isna().all()


def test_the_quiet_console_silences_tunes_snapshot_warning_unless_the_user_set_it(monkeypatch):
    """Short trials that checkpoint every few seconds make Tune warn, three lines at a time,
    that it snapshots its experiment state often (nine times in one quickstart): the quiet
    console sets the threshold Tune's checkpoint manager reads to 0, keeping a user's own."""
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    from reuse_ray.tuning.console import quiet_tune

    name = "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S"
    # set first, so monkeypatch restores both variables as they were before the test
    monkeypatch.setenv("RAY_AIR_NEW_OUTPUT", "1")
    monkeypatch.setenv(name, "7")
    quiet_tune()
    assert os.environ[name] == "7"  # the user's own threshold
    monkeypatch.delenv(name)
    quiet_tune()
    manager = _ExperimentCheckpointManager(storage=None, checkpoint_period="auto")
    assert manager._excessive_sync_threshold == 0.0


def test_the_default_console_is_quiet_and_says_what_each_trial_does(tmp_path, capfd):
    from reuse_ray.cli import main

    raw = sweep(
        tmp_path, search={"space": "fedavg", "searcher": "random", "num_samples": 2, "seed": 0}
    )
    raw["base"]["method"] = {"name": "fedavg"}
    raw["base"]["fl"]["rounds"] = 2
    path = tmp_path / "quiet.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["sweep", str(path)]) == 0
    out = capfd.readouterr()
    text = out.out + out.err
    assert not any(ch in text for ch in "╭╰│┌└") and "+------" not in text  # no boxed table
    assert text.count("search trial") >= 4  # a start and an end line per trial
    assert "2/2 trials finished; best so far" in text
    assert "Checkpoint successfully created" not in text


def test_a_finished_run_is_kept_and_counts_against_the_budget(tmp_path):
    """A budgeted search continued over copied Parquet: its own finished run is kept (no
    rerun), and the search's ledger counts it against the budget."""
    from reuse_ray.runner import run_fl
    from reuse_ray.tuning.trainable import _without_a_run

    raw = sweep(tmp_path, search={"searcher": "grid", "grid": {"train.lr": [0.05]}})
    raw["base"]["fl"]["rounds"] = 2
    raw["search"]["client_rounds"] = raw["base"]["fl"]["clients_per_round"]  # one round's worth
    spec = parse_experiment(raw)
    spec = spec.workload(spec.name)  # the view its stages launch with
    cfg = spec.run_config({"train.lr": 0.05})
    from reuse_ray.engine import RunHooks

    run_fl(cfg, hooks=RunHooks(stage="search", sweep=spec.name, evaluate_test=False))
    got = _without_a_run(spec, "search", cfg, None, None)
    assert got["status"] == "finished" and got["run_id"] == cfg.run_id
    other = spec.run_config({"train.lr": 0.04})  # a new point: it runs (no rows to keep)
    assert _without_a_run(spec, "search", other, None, None) is None
    from reuse_ray.tuning.budget import ClientRoundBudget

    ledger = ClientRoundBudget(spec.search.client_rounds, 4, results=(spec.results_dir, spec.name))
    assert ledger.stop_all()  # the kept run spent the budget: the search ends
