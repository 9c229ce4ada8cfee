"""The sweep-file and study-file sections of ``docs/reference.md`` (:mod:`reuse_ray.reference`):
the ``search:``, ``trial:`` and ``final:`` blocks from their dataclasses, the keys a parser
reads from the file itself with their meaning here, beside the parser that reads them."""

from __future__ import annotations

from .spec import (
    OBJECTIVES,
    SCHEDULERS,
    SEARCHERS,
    STUDY_KEYS,
    STUDY_OBJECTIVES,
    TRIAL_BACKENDS,
    FinalSpec,
    SearchSpec,
    TrialSpec,
)


def _codes(values) -> str:
    return ", ".join(f"`{v}`" for v in values)


def _row(field: str, type_: str, default: str, allowed: str, meaning: str) -> dict[str, str]:
    return {
        "field": field,
        "type": type_,
        "default": default,
        "allowed": allowed,
        "meaning": meaning,
    }


SWEEP_TOP = [
    _row(
        "name",
        "str",
        "the file's stem",
        "letters, digits, `-`, `_`",
        "the sweep's name: its Tune experiments, its trials table and its runs' `sweep` column",
    ),
    _row(
        "kind",
        "str",
        "`sweep`",
        "`sweep`, `study`",
        "`study` makes the file a study file (below); a sweep file is one workload (`base`) "
        "and one searched arm, its `final.compare` entries unsearched arms",
    ),
    _row(
        "base",
        "run config",
        "required",
        "",
        "the run config every trial starts from (every field of the run-config tables)",
    ),
    _row("search", "block", "", "", "what is searched and how (below)"),
    _row("trial", "block", "", "", "what one trial reserves and runs on (below)"),
    _row(
        "final",
        "block",
        "null",
        "",
        "the final stage: the selected configurations and the references on fresh seeds "
        "(below); none: search only",
    ),
    _row(
        "checkpoint_every",
        "int",
        "`5`",
        "≥ 0",
        "rounds between a trial's checkpoints (0: none; an interrupted trial then restarts "
        "from round 1)",
    ),
    _row(
        "results_dir",
        "str",
        "`sweeps/<name>`",
        "a path or a URI",
        "where results go; a relative one is a folder of dated sweeps below the results root",
    ),
]

STUDY_ROWS = {  # key: (type, default, allowed, meaning)
    "name": (
        "str",
        "the file's stem",
        "letters, digits, `-`, `_`",
        "the study's name: its sweeps are `<name>-<workload>`",
    ),
    "kind": ("str", "`sweep`", "`sweep`, `study`", "`study`: this file is a study file"),
    "workloads": (
        "mapping",
        "required",
        "name -> run config",
        "workload name -> a run config (its base); every arm runs on every workload",
    ),
    "arms": (
        "mapping",
        "required",
        "name -> `fixed:`, `space:` or `ablation_of:`",
        "arm name -> `fixed:` (dotted run-config fields the arm fixes, with `method.name`) and "
        "`space:` (a registered space of its own knobs); or an ablation, not searched: "
        "`ablation_of:` a searched arm and `fixed:` the fields it changes — its final runs are "
        "each of that arm's choices with them on top",
    ),
    "budget": (
        "block",
        "`trials_per_arm: 6`, `client_rounds: 0`, `seed: 0`",
        "integers > 0, ≥ 0, a seed",
        "`trials_per_arm` (at most this many configurations per arm), `client_rounds` "
        "(per arm: one number or one per workload; selected clients × rounds trained; 0 = "
        "trials_per_arm full runs), `seed` (the sampler's)",
    ),
    "search": (
        "block",
        "`scheduler: none`",
        "the sweep file's `search.` fields named here",
        "`scheduler` (none, asha, hyperband: one per arm, and per arm and uplink level "
        "when `uplink_levels` are set), `grace_period`, `reduction_factor`, `reeval_top`, "
        "`reeval_seeds` (robust selection), `max_concurrent_trials` (at most this many trials "
        "at once; 1: the same search launch after launch)",
    ),
    "shared": (
        "mapping",
        "`{train.lr: [0.01, 0.2, log]}`",
        "dotted field -> [low, high] or [low, high, log]",
        "knobs every arm searches over one range",
    ),
    "topk_range": (
        "list",
        "`[0.01, 1.0, log]`",
        "[low, high] or [low, high, log], 0 < low < high",
        "the Top-K ratio r's range wherever an arm's method sparsifies",
    ),
    "objectives": (
        "list",
        "`[val_acc, retention]`",
        f"{_codes(STUDY_OBJECTIVES)}, first `val_acc`",
        "the selections made per arm",
    ),
    "uplink_levels": (
        "list",
        "`[]`",
        "increasing fractions in (0, 1)",
        "fractions f of dense FedAvg's uplink over the planned rounds (f·T·K·B0 bytes), set "
        "as `fl.uplink_levels` on every run: each run is read at the last round within each "
        "level, in both ledgers (table `levels`); per arm, level and ledger the configuration "
        "whose reading is the most accurate on validation (`ARM@up10` for the restricted "
        "ledger, `ARM@up10-measured` where the measured ledger chose another; `unable`, with "
        "its reason, where no configuration has a reading)",
    ),
    "target_of_reference": (
        "float",
        "`0`",
        "[0, 1]",
        "bytes to target: this fraction of the reference arm's mean final-stage validation "
        "accuracy (0: none)",
    ),
    "retention": (
        "float",
        "`0.98`",
        "(0, 1]",
        "the retention rule's bar: keep ≥ this share of the reference arm's best validation "
        "accuracy",
    ),
    "retention_reference": (
        "str",
        "the first arm",
        "an arm's name",
        "the reference arm (of the retention rule, the uplink levels and the target)",
    ),
    "final": (
        "block",
        "required",
        "`seeds:` a list of seeds",
        "fresh seeds, disjoint from the workloads' search seeds, on which every chosen "
        "configuration reruns, reading the test split once",
    ),
    "compare_to": (
        "list",
        "`[]`",
        "arm names",
        "arms the leaderboard's paired differences are taken against",
    ),
    "targets": (
        "mapping",
        "`{}`",
        "workload -> (0, 1]",
        "a validation accuracy per workload for bytes to target, fixed in advance",
    ),
    "trial": ("block", "", "", "what one trial reserves (the sweep file's `trial:` block)"),
    "checkpoint_every": ("int", "`5`", "≥ 0", "rounds between a trial's checkpoints"),
    "results_dir": (
        "str",
        "`studies/<name>`",
        "a path or a URI",
        "where results go; a relative one is a folder of dated studies below the results root",
    ),
    "scales": (
        "mapping",
        "`{}`",
        "name -> dotted overrides",
        "named overrides of this file (`--scale NAME`), e.g. a smoke test",
    ),
}

ALLOWED = {
    "search.searcher": _codes(SEARCHERS),
    "search.objective": _codes(OBJECTIVES),
    "search.scheduler": _codes(SCHEDULERS),
    "trial.backend": _codes(TRIAL_BACKENDS),
}


def SPEC_SECTIONS() -> list[tuple[str, str, list[dict[str, str]]]]:  # noqa: N802 - a table
    from ..reference import field_rows

    def blocks(cls, prefix):
        rows = field_rows(cls, prefix)
        for r in rows:
            r["allowed"] = r["allowed"] or ALLOWED.get(r["field"], "")
        return rows

    # a reference is an unsearched arm of the one spec; in a sweep file, a final-block entry
    compare = _row(
        "final.compare",
        "tuple[dict[str, Any], ...]",
        "`[]`",
        "",
        "unsearched references (dotted fields, optional seeds:), labelled compare-<j>",
    )
    final = blocks(FinalSpec, "final.") + [compare]
    study = [_row(key, *STUDY_ROWS[key]) for key in STUDY_KEYS]
    return [
        (
            "Sweep file",
            "`reuse-ray sweep FILE`: a validation-only search over a base run config, then the "
            "final stage. Top-level keys, then the `search:`, `trial:` and `final:` blocks.",
            SWEEP_TOP + blocks(SearchSpec, "search.") + blocks(TrialSpec, "trial.") + final,
        ),
        (
            "Study file",
            "`kind: study`: every arm tuned on the same validation budget on every workload, "
            "selected, and rerun on fresh seeds (`reuse-ray sweep FILE`, `--scale NAME`).",
            study,
        ),
    ]
