"""The pipeline's re-evaluation stage (``pipeline.reevaluate``), written once for sweeps and
studies: a plan's candidates rerun on every further search seed as stage ``reeval``, with the
plan's retention reference, and their rows added after the search's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd

from reuse_ray.tuning.pipeline import reevaluate
from reuse_ray.tuning.spec import SearchSpec


@dataclass
class FakeSpec:
    search: SearchSpec


@dataclass
class FakePlan:
    """A plan whose candidates are given and whose rows echo what the stage ran."""

    spec: FakeSpec
    cands: pd.DataFrame
    reference: float | None = 0.5
    asked: list = field(default_factory=list)
    tag: str = ""

    def candidates(self, trials):
        self.asked.append(len(trials))
        return self.cands

    def rows(self, stage, points, results):
        return pd.DataFrame(
            [
                {"stage": stage, "params_json": json.dumps(p), "result": r}
                for p, r in zip(points, results, strict=True)
            ]
        )


class FakeRun:
    """A launcher that records each launch and returns one result per grid point."""

    def __init__(self):
        self.launches, self.lines = [], []

    def say(self, line):
        self.lines.append(line)

    def __call__(self, spec, stage, **kw):
        self.launches.append((stage, kw))
        return [f"result-{j}" for j in range(kw["total"])]


SEARCH = [
    {"stage": "search", "params_json": '{"a": 1}'},
    {"stage": "search", "params_json": '{"a": 2}'},
]


def test_without_reeval_top_the_trials_pass_through_and_nothing_is_launched():
    plan = FakePlan(FakeSpec(SearchSpec(searcher="random", space=None)), pd.DataFrame(SEARCH))
    run, trials = FakeRun(), pd.DataFrame(SEARCH)
    assert reevaluate(plan, run, trials) is trials
    assert run.launches == [] and plan.asked == []


def test_each_candidate_reruns_on_each_further_seed_and_its_rows_follow_the_search():
    search = SearchSpec(searcher="random", reeval_top=2, reeval_seeds=(11, 12))
    cands = pd.DataFrame(
        [
            {"params_json": '{"a": 2}', "arm": "x"},
            {"params_json": '{"a": 1}', "arm": None},
        ]
    )
    plan, run = FakePlan(FakeSpec(search), cands, reference=0.75), FakeRun()
    out = reevaluate(plan, run, pd.DataFrame(SEARCH))
    [(stage, kw)] = run.launches
    assert stage == "reeval" and kw["total"] == 4 and kw["reference"] == 0.75
    # candidate by candidate, seed by seed; a study's arm travels as the point's label
    assert kw["param_space"]["final"]["grid_search"] == [
        {"a": 2, "seed": 11, "label": "x"},
        {"a": 2, "seed": 12, "label": "x"},
        {"a": 1, "seed": 11},
        {"a": 1, "seed": 12},
    ]
    assert list(out["stage"]) == ["search", "search"] + ["reeval"] * 4
    assert list(out["result"].iloc[2:]) == ["result-0", "result-1", "result-2", "result-3"]
    assert run.lines == [
        "robust selection: 2 candidate configurations again on search seeds [11, 12] "
        "(4 validation-only runs)"
    ]


def test_no_candidate_launches_nothing_and_keeps_the_trials():
    search = SearchSpec(searcher="random", reeval_top=1, reeval_seeds=(11,))
    plan = FakePlan(FakeSpec(search), pd.DataFrame(columns=["params_json", "arm"]))
    run, trials = FakeRun(), pd.DataFrame(SEARCH)
    assert reevaluate(plan, run, trials) is trials
    assert run.launches == [] and plan.asked == [2]
