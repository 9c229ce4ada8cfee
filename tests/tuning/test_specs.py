"""The experiment files' blocks are frozen dataclasses that check themselves (as ``RunConfig``
does): built directly, replaced, or parsed from a sweep or a study file, a bad field is one
error naming it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from reuse_ray.config import ConfigError
from reuse_ray.tuning.spec import SearchSpec, TrialSpec


@pytest.mark.parametrize(
    "fields, field, fragment",
    [
        ({"searcher": "bayes"}, "search.searcher", "tpe, nsga2"),
        ({"num_samples": 0}, "search.num_samples", "> 0"),
        ({"scheduler": "asha", "searcher": "none"}, "search.scheduler", "searcher none"),
        ({"scheduler": "asha", "objective": "pareto"}, "search.scheduler", "one metric"),
        ({"scheduler": "asha", "reduction_factor": 1}, "search.reduction_factor", "≥ 2"),
        ({"reeval_top": 2}, "search.reeval_seeds", "further search seeds"),
        ({"reeval_seeds": [7]}, "search.reeval_top", "1 or more"),
        ({"client_rounds": 40, "searcher": "none"}, "search.client_rounds", "no search"),
        ({"retention": 1.5}, "search.retention", "(0, 1]"),
        (
            {"scheduler": "hyperband", "max_concurrent_trials": 1},
            "search.max_concurrent_trials",
            "trial.cpus",
        ),
    ],
)
def test_a_search_block_checks_itself(fields, field, fragment):
    with pytest.raises(ConfigError) as err:
        SearchSpec(**fields)
    assert err.value.field == field and fragment in str(err.value)


def test_a_checked_block_stays_checked_when_replaced():
    search = SearchSpec(reeval_top=1, reeval_seeds=[7, 8])
    assert search.reeval_seeds == (7, 8)  # a file's list, kept as a tuple
    with pytest.raises(ConfigError, match="reeval_top"):
        dataclasses.replace(search, reeval_top=0)
    trial = TrialSpec(backend="ray", cpus=0, workers=2)  # a ray trial's driver may take no CPU
    assert trial.bundles() == [{"CPU": 0}, {"CPU": 1.0}, {"CPU": 1.0}]
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(trial, backend="local")  # a local trial's driver runs it: CPU > 0
    assert err.value.field == "trial.cpus"
    with pytest.raises(ConfigError) as err:
        TrialSpec(resources={"GPU": 1})
    assert err.value.field == "trial.resources"


def test_a_scheduler_rung_is_checked_against_the_rounds():
    search = SearchSpec(scheduler="asha", grace_period=6)
    search.check_rounds(6)
    with pytest.raises(ConfigError, match="1 to 5"):
        search.check_rounds(5)
    SearchSpec(grace_period=9).check_rounds(5)  # no scheduler: no rung to place


def test_one_loader_reads_either_kind_of_file(tmp_path):
    """``load_experiment``: a sweep file and a ``kind: study`` file are one Experiment, each
    with its named scale and overrides applied before the one validation; the record alone
    names the kind."""
    from reuse_ray.tuning import Experiment, load_experiment

    study = load_experiment("sweeps/study.yaml", ["final.seeds=[2001, 2002]"], scale="small")
    assert isinstance(study, Experiment) and study.what == "study"
    assert (study.spec.scale, study.spec.trials_per_arm) == ("small", 1)
    assert study.spec.final_seeds == (2001, 2002)
    sweep = load_experiment("sweeps/quickstart.yaml", ["search.num_samples=3"])
    assert type(sweep) is type(study) and sweep.what == "sweep"
    assert sweep.spec.search.num_samples == 3
    with pytest.raises(ConfigError) as err:
        load_experiment("sweeps/quickstart.yaml", scale="huge")
    assert err.value.field == "--scale"


def test_both_kinds_of_file_parse_into_one_spec_of_workloads_and_arms():
    """A sweep file is shorthand for one workload (its base) and one searched arm, its
    ``final.compare`` entries unsearched arms on the seeds they name; a study file names its
    workloads and arms. Each stage launches with one workload's view of the one spec."""
    from reuse_ray.tuning import ExperimentSpec, load_spec

    sweep = load_spec("sweeps/paper_fashionmnist.yaml")
    study = load_spec("sweeps/study.yaml", scale="small")
    assert type(sweep) is type(study) is ExperimentSpec
    assert (sweep.kind, study.kind) == ("sweep", "study")
    assert list(sweep.workloads) == [sweep.name]
    searched = [a.name for a in sweep.arms if a.searched]
    assert searched == ["selected"] and sweep.arms[0].space == sweep.search.space
    refs = [(a.name, a.seeds) for a in sweep.arms if not a.searched]
    assert refs == [("dg_gate_off", (101,)), ("dg_reuse_only", (101,))]
    assert sweep.compare[0] == {
        "method.name": "dg_fedreuse",
        "method.dg.gate": "off",
        "label": "dg_gate_off",
        "seeds": [101],
    }
    assert sweep.workload(sweep.name).name == sweep.name  # its Tune experiments, trials table
    assert list(study.workloads) == ["digits", "fashionmnist"]
    assert all(a.searched or a.ablation_of for a in study.arms) and study.arms[0].name == "fedavg"
    view = study.workload("digits")
    assert view.name == "study-digits" and view.base == study.workloads["digits"]
    assert view.run_config().fl.rounds == 3  # the small scale's digits workload


def test_a_file_of_an_unknown_kind_is_named():
    """``kind`` is ``sweep`` (the default, which a sweep file may also say) or ``study``."""
    import yaml

    from reuse_ray.tuning import parse_experiment

    raw = yaml.safe_load(Path("sweeps/quickstart.yaml").read_text())
    assert parse_experiment(dict(raw, kind="sweep")) == parse_experiment(raw)
    with pytest.raises(ConfigError) as err:
        parse_experiment({"kind": "stduy", "name": "x"})
    assert err.value.field == "kind" and "sweep, study" in str(err.value)


def test_a_budget_is_per_workload_in_the_one_spec(tmp_path):
    """A sweep's ``search.client_rounds`` and a study's ``budget.client_rounds`` (one number, or
    one per workload) are each workload's search budget."""
    from reuse_ray.tuning import load_spec

    sweep = load_spec("sweeps/quickstart.yaml", ["search.client_rounds=40"])
    assert sweep.workload(sweep.name).search.client_rounds == 40
    study = load_spec(
        "sweeps/study.yaml",
        ["budget.client_rounds={digits: 40, fashionmnist: 80}"],
        scale="small",
    )
    assert study.workload("digits").search.client_rounds == 40
    assert study.workload("fashionmnist").search.client_rounds == 80


def test_either_kind_of_file_caps_its_trials_at_once():
    """``search.max_concurrent_trials`` means the same in a sweep file and a study file: the
    most trials of a stage at once, for every workload."""
    from reuse_ray.tuning import derive_concurrency, load_spec

    cluster = {"CPU": 8.0}
    for path, scale in (("sweeps/quickstart.yaml", None), ("sweeps/study.yaml", "small")):
        spec = load_spec(path, scale=scale)
        capped = load_spec(path, ["search.max_concurrent_trials=1"], scale=scale)
        for w in spec.workloads:
            assert derive_concurrency(spec.workload(w), cluster) > 1, path
            assert derive_concurrency(capped.workload(w), cluster) == 1, path


def test_the_study_files_documented_defaults_are_the_parsers():
    """docs/reference.md's study-file defaults (``files.StudyFile``'s keys) are what the
    parser gives a file that leaves them out."""
    import dataclasses

    from reuse_ray.tuning import parse_experiment
    from reuse_ray.tuning.files import StudyFile

    minimal = {
        "kind": "study",
        "workloads": {"w": {"fl": {"num_clients": 4, "clients_per_round": 2, "rounds": 2}}},
        "arms": {"a": {"fixed": {"method.name": "fedavg"}}},
        "final": {"seeds": [7]},
    }
    spec = parse_experiment(minimal, "/x/mine.yaml")
    default = {f.name: f.metadata["default"] for f in dataclasses.fields(StudyFile)}
    assert spec.name == "mine" and default["name"] == "the file's stem"
    assert default["retention"] == f"`{spec.retention:g}`"
    assert default["target_of_reference"] == f"`{spec.target_of_reference:g}`"
    assert default["checkpoint_every"] == f"`{spec.checkpoint_every}`"
    assert default["objectives"] == f"`[{', '.join(spec.objectives)}]`"
    lo, hi, log = spec.topk_range
    assert default["topk_range"] == f"`[{lo:g}, {hi:.1f}, {'log' if log else 'linear'}]`"
    [(key, (lo, hi, log))] = spec.shared.items()
    assert default["shared"] == f"`{{{key}: [{lo:g}, {hi:g}, {'log' if log else 'linear'}]}}`"
    budget = f"`trials_per_arm: {spec.trials_per_arm}`, `client_rounds: "
    assert default["budget"] == budget + f"{spec.client_rounds['w']}`, `seed: {spec.sampler_seed}`"
    assert spec.retention_reference == "a" and default["retention_reference"] == "the first arm"
    assert (
        spec.results_dir.endswith("/studies/mine") and default["results_dir"] == "`studies/<name>`"
    )
    assert spec.search.scheduler == "none" and default["search"] == "`scheduler: none`"
