"""analysis/: tables checked on synthetic Parquet whose answers are known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from analysis import AnalysisError, load, write_report
from analysis import tables as T
from analysis.stats import bootstrap_ci, mean_sd
from reuse_ray.results import RunWriter

SEEDS = [1, 2, 3, 4, 5]
NOISE = [0.01, -0.02, 0.03, -0.01, -0.01]  # sums to zero


def _write_run(
    root,
    method,
    seed,
    run_id,
    vals,
    *,
    r=1.0,
    status="finished",
    test=None,
    stage="final",
    label=None,
    up_per_round=100,
    dense=1000,
    extra=None,
):
    w = RunWriter(root, run_id, method)
    cum_up = 0
    for t, v in enumerate(vals, start=1):
        cum_up += up_per_round
        w.add(
            "rounds",
            {
                "run_id": run_id,
                "seed": seed,
                "round": t,
                "val_acc": v,
                "num_selected": 10,
                "cum_up_restricted": cum_up,
                "cum_up_measured": cum_up + 10,
                "cum_down_measured": t * dense,
                "cum_down_sensitivity": t * dense,
                "cum_dense_reference": t * dense,
                "cum_saving_restricted": 1 - cum_up / (t * dense),
                "cum_saving_bidirectional": (1 - cum_up / (t * dense)) / 2,
            },
        )
    w.set_run_row(
        {
            "run_id": run_id,
            "seed": seed,
            "status": status,
            "dataset": "toy",
            "stage": stage,
            "label": label,
            "test_acc": test,
            "test_round": len(vals) if test is not None else None,
            "cfg.method.topk_ratio": r,
            "rounds_completed": len(vals),
            **(extra or {}),
        }
    )
    w.flush(("runs", "rounds"))


def test_stats_oracles():
    assert mean_sd([1.0, 2.0, 3.0]) == (2.0, 1.0)
    lo, hi = bootstrap_ci([0.04, 0.06, 0.05, 0.05, 0.05], seed=0)
    assert lo <= 0.05 <= hi and hi - lo < 0.02
    assert bootstrap_ci([0.3]) == (0.3, 0.3)


def test_fixed_budget_paired_difference_and_ci(tmp_path):
    for s, e in zip(SEEDS, NOISE, strict=True):
        base = 0.80 + 0.01 * s
        _write_run(tmp_path, "fedavg", s, f"a{s}", [0.5, 0.7, base], test=base - 0.01)
        _write_run(
            tmp_path,
            "dg_fedreuse",
            s,
            f"b{s}",
            [0.5, 0.7, base + 0.05 + e],
            test=base - 0.01 + 0.02,
            up_per_round=50,
        )
    res = load(tmp_path)
    fb = T.fixed_budget(res, T=3, reference="fedavg").set_index("arm")
    dg = fb.loc["dg_fedreuse"]
    assert dg["pairs"] == 5 and dg["d_val_acc"] == pytest.approx(0.05, abs=1e-12)
    assert dg["d_val_acc_lo"] <= 0.05 <= dg["d_val_acc_hi"]
    assert dg["d_test_acc"] == pytest.approx(0.02, abs=1e-12)
    assert fb.loc["fedavg", "val_acc_mean"] == pytest.approx(0.83)
    assert fb.loc["fedavg", "val_acc_sd"] == pytest.approx(
        np.std([0.01 * s for s in SEEDS], ddof=1)
    )
    # restricted saving at T: 1 − 150/3000 vs 1 − 300/3000
    assert dg["d_cum_saving_restricted"] == pytest.approx(0.05)
    dl = T.downlink_table(res, 3).set_index("arm")
    assert dl.loc["fedavg", "bidirectional_sensitivity_saving"] == pytest.approx(0.45)
    assert dl.loc["dg_fedreuse", "uplink_saving"] == pytest.approx(0.95)


def test_factorial_main_effects_and_interaction(tmp_path):
    for s, e in zip(SEEDS, NOISE, strict=True):
        for reuse in (0, 1):
            for topk in (0, 1):
                y = 0.7 + 0.1 * reuse + 0.2 * topk + (0.05 + e) * reuse * topk + e
                method = "dg_fedreuse" if reuse else "fedavg"
                _write_run(
                    tmp_path, method, s, f"{method}-{topk}-{s}", [0.1, y], r=0.2 if topk else 1.0
                )
    eff = T.factorial(load(tmp_path), T=2).set_index("effect")
    assert list(eff.index) == ["reuse", "topk", "reuse x topk"]
    assert eff.loc["reuse", "estimate"] == pytest.approx(0.125)
    assert eff.loc["topk", "estimate"] == pytest.approx(0.225)
    assert eff.loc["reuse x topk", "estimate"] == pytest.approx(0.05)
    assert eff.loc["reuse x topk", "ci_lo"] <= 0.05 <= eff.loc["reuse x topk", "ci_hi"]
    assert (eff["seeds"] == 5).all()


def test_bytes_to_target_marks_censored_runs(tmp_path):
    _write_run(tmp_path, "fedavg", 1, "reach", [0.2, 0.55, 0.6])
    _write_run(tmp_path, "fedavg", 2, "never", [0.2, 0.3, 0.4])
    btt = T.bytes_to_target(load(tmp_path), 0.5).set_index("run_id")
    assert not btt.loc["reach", "censored"] and btt.loc["reach", "rounds"] == 2
    assert btt.loc["reach", "up_restricted"] == 200
    assert btt.loc["never", "censored"] and btt.loc["never", "rounds"] == 3
    summary = T.bytes_to_target_summary(btt.reset_index()).iloc[0]
    assert summary["runs"] == 2 and summary["censored"] == 1 and summary["median_rounds"] == 2


def test_unfinished_runs_are_excluded_with_a_warning(tmp_path):
    _write_run(tmp_path, "fedavg", 1, "ok", [0.2, 0.6])
    _write_run(tmp_path, "fedavg", 2, "crashed", [0.2], status="failed")
    _write_run(tmp_path, "fedavg", 3, "blew", [0.2], status="diverged")
    with pytest.warns(UserWarning, match="excluded 2 unfinished runs"):
        res = load(tmp_path)
    assert list(res.runs["run_id"]) == ["ok"] and set(res.rounds["run_id"]) == {"ok"}
    assert len(load(tmp_path, include_unfinished=True).runs) == 3


def test_corrupt_or_missing_files_give_clear_errors(tmp_path):
    _write_run(tmp_path, "fedavg", 1, "ok", [0.2, 0.6])
    bad = tmp_path / "rounds" / "method=fedavg" / "ok.parquet"
    bad.write_bytes(b"garbage")
    with pytest.raises(AnalysisError, match="corrupt Parquet file .*ok.parquet"):
        load(tmp_path)
    with pytest.raises(AnalysisError, match="no results directory"):
        load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AnalysisError, match="no runs table"):
        load(tmp_path / "empty")


def test_report_from_synthetic_results_via_uri(tmp_path):
    for s, e in zip(SEEDS[:3], NOISE[:3], strict=True):
        _write_run(tmp_path, "fedavg", s, f"a{s}", [0.5, 0.8], test=0.8)
        _write_run(tmp_path, "dg_fedreuse", s, f"b{s}", [0.5, 0.8 + e], test=0.8)
    path = write_report(f"file://{tmp_path}", out=tmp_path / "rep", target=0.7)
    text = path.read_text()
    assert "Fixed-budget comparison at round 2" in text and "dg_fedreuse" in text
    assert "Bytes to validation accuracy 0.7" in text
    assert (tmp_path / "rep" / "val_acc_vs_round.png").stat().st_size > 1000
    assert (tmp_path / "rep" / "report.html").read_text().count("<table") >= 2


def test_gate_controls_at_matched_firing_rate(tmp_path):
    from reuse_ray.results import RunWriter

    # two DG runs: the real gate fires on 1 of 2 young cacheful events; random control p = 0.5
    for run_id, gate, prob, decisions in (
        ("proxy", "proxy", 0.2, [("fresh", False), ("reused", False), ("fresh", True)]),
        ("rand", "random", 0.5, [("reused", False), ("fresh", False), ("fresh", True)]),
    ):
        w = RunWriter(tmp_path, run_id, "dg_fedreuse")
        for k, (dec, promoted) in enumerate(decisions):
            w.add(
                "client_events",
                {
                    "run_id": run_id,
                    "seed": 1,
                    "round": 2,
                    "client_id": k,
                    "decision": dec,
                    "age": 1,
                    "tau": 0.5,
                    "gate_score": 0.6 if dec == "fresh" else 0.1,
                    "promoted": promoted,
                },
            )
        for t in (1, 2):
            w.add(
                "rounds",
                {
                    "run_id": run_id,
                    "seed": 1,
                    "round": t,
                    "val_acc": 0.5,
                    "cum_saving_restricted": 0.8,
                },
            )
        w.set_run_row(
            {
                "run_id": run_id,
                "seed": 1,
                "status": "finished",
                "dataset": "toy",
                "cfg.method.dg.gate": gate,
                "cfg.method.dg.gate_prob": prob,
                "cfg.method.topk_ratio": 0.2,
                "cfg.method.dg.max_age": 4,
            }
        )
        w.flush(("runs", "rounds", "client_events"))
    gc = T.gate_controls(load(tmp_path)).set_index("gate")
    # 3 young events each; unpromoted fresh: proxy 1 → 1/3, random 1 → 1/3
    assert gc.loc["proxy", "firing_rate"] == pytest.approx(1 / 3)
    assert gc.loc["random", "rate_gap_vs_proxy"] == pytest.approx(0.5 - 1 / 3)
    assert gc.loc["random", "reused_fraction"] == pytest.approx(1 / 3)


def test_three_factor_factorial_with_error_feedback(tmp_path):
    for s_, e in zip(SEEDS, NOISE, strict=True):
        for reuse in (0, 1):
            for topk in (0, 1):
                for ef in (0, 1):
                    y = 0.6 + 0.1 * reuse + 0.2 * topk + 0.04 * ef + 0.03 * topk * ef + e
                    method = "dg_fedreuse" if reuse else "fedavg"
                    _write_run(
                        tmp_path,
                        method,
                        s_,
                        f"{method}-{topk}-{ef}-{s_}",
                        [0.1, y],
                        r=0.2 if topk else 1.0,
                        extra={"cfg.method.error_feedback": bool(ef)},
                    )
    eff = T.factorial(load(tmp_path), T=2).set_index("effect")
    assert eff.loc["ef", "estimate"] == pytest.approx(0.04 + 0.03 / 2)
    assert eff.loc["topk x ef", "estimate"] == pytest.approx(0.03)
    assert eff.loc["reuse x topk x ef", "estimate"] == pytest.approx(0.0, abs=1e-12)
    assert eff.loc["reuse", "estimate"] == pytest.approx(0.1)


def test_report_reads_well_few_pairs_flagged_and_self_contained(tmp_path):
    long = {"cfg.method.dg.tau0": 0.91169880000000001, "cfg.method.dg.gate": "proxy"}
    for s in (1, 2):
        _write_run(tmp_path, "fedavg", s, f"a{s}", [0.5, 0.7], test=0.7)
        _write_run(tmp_path, "dg_fedreuse", s, f"b{s}", [0.5, 0.72], test=0.71, extra=long)
        _write_run(
            tmp_path,
            "dg_fedreuse",
            s,
            f"c{s}",
            [0.5, 0.73],
            test=0.72,
            extra={**long, "cfg.method.dg.tau0": 0.5},
        )
    md = write_report(tmp_path, reference="fedavg").read_text()
    fb = T.fixed_budget(load(tmp_path), T=2, reference="fedavg")
    assert fb["pairs"].dropna().tolist() == [2, 2]  # integers, not 2.0000
    assert fb["ci"].dropna().str.contains("not meaningful").sum() == 2
    assert fb["d_val_acc_lo"].isna().all()  # no CI from 2 pairs
    assert "dg.tau0=0.912" in md and "0.9116988" not in md  # short arm labels
    html_text = (tmp_path / "report" / "report.html").read_text()
    assert "<style>" in html_text and 'src="data:image/png;base64,' in html_text
    assert "`" not in html_text.split("<body>", 1)[1]  # Markdown code marks rendered
    assert "gate against its controls" not in md  # no controls in these runs


def test_leaderboard_paired_differences_pareto_and_ledgers(tmp_path):
    # three arms named by a study's labels, five seeds: b = a + 0.02 exactly; c = a − 0.05
    # with fewer bytes. Measured total at round 3: a, b: 300 + 10 + 3000; c: 150 + 10 + 3000.
    for s in SEEDS:
        base = 0.80 + 0.01 * s
        _write_run(tmp_path, "fedavg", s, f"a{s}", [0.5, 0.6, base], test=base, label="a")
        _write_run(tmp_path, "fedavg", s, f"b{s}", [0.5, 0.6, base], test=base + 0.02, label="b")
        _write_run(
            tmp_path,
            "dg_fedreuse",
            s,
            f"c{s}",
            [0.5, 0.6, base],
            test=base - 0.05,
            label="c",
            up_per_round=50,
        )
    res = load(tmp_path)
    assert sorted(res.runs["arm"].unique()) == ["a", "b", "c"]  # study labels stand alone
    lb = T.leaderboard(res, 3, references=("a", "b")).set_index("arm")
    assert lb.loc["b", "Δ test acc vs a"].startswith("+0.020 [+0.020, +0.020]")
    assert lb.loc["c", "Δ test acc vs b"].startswith("-0.070 [")
    assert lb.loc["a", "Δ test acc vs a"] == ""
    # b dominates a (more accurate, same bytes); c is cheaper: the front is {b, c}
    assert lb["Pareto"].to_dict() == {"a": "", "b": "yes", "c": "yes"}
    assert lb.loc["c", "up MB (restricted)"] == "0.00"  # 150 B
    assert lb.loc["a", "down MB (dense, restricted)"] == "0.0"
    pp = T.pareto_points(res, 3).set_index("arm")
    assert pp.loc["a", "total_MB"] == pytest.approx(3310 / 1e6)
    assert pp.loc["c", "total_MB"] == pytest.approx(3160 / 1e6)
    assert pp.loc["b", "acc"] == pytest.approx(0.85)
    # fewer than five pairs: the mean and the pair count, no interval
    few = load(tmp_path).runs
    keep = set(few.loc[few["seed"] <= 3, "run_id"])
    sub = T.Results(
        few[few["run_id"].isin(keep)],
        res.rounds[res.rounds["run_id"].isin(keep)],
        res.client_events,
        res.trials,
    )
    assert T.leaderboard(sub, 3, ("a",)).set_index("arm").loc["b", "Δ test acc vs a"] == (
        "+0.020 (3 pairs)"
    )


def test_bytes_to_target_per_dataset_with_censoring(tmp_path):
    _write_run(tmp_path, "fedavg", 1, "r1", [0.5, 0.7, 0.9])
    _write_run(tmp_path, "fedavg", 2, "r2", [0.5, 0.6, 0.65])
    btt = T.bytes_to_target(load(tmp_path), {"toy": 0.7}).set_index("run_id")
    assert btt.loc["r1", "rounds"] == 2 and not btt.loc["r1", "censored"]
    assert btt.loc["r1", "total_measured"] == 210 + 2000
    assert btt.loc["r2", "censored"] and btt.loc["r2", "rounds"] == 3
    assert T.bytes_to_target(load(tmp_path), {"other": 0.7}).empty
    summary = T.bytes_to_target_summary(btt.reset_index()).iloc[0]
    assert summary["runs"] == 2 and summary["censored"] == 1 and summary["median_rounds"] == 2
