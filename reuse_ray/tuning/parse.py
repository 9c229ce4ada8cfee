"""One parser for both kinds of experiment file (:class:`.spec.ExperimentSpec`): the blocks
both kinds have — ``name``, ``results_dir``, ``trial``, ``checkpoint_every`` — read once here,
then the kind's own form: a sweep file's one workload (``base``) and one searched arm (its
``search`` block), its ``final.compare`` entries unsearched arms; a study file's named
workloads and arms, its budget per arm, drawn knobs and selection. Every error names the field
and what is allowed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..checks import (
    check_choice,
    check_fraction,
    check_positive,
    check_seed,
    check_share,
    deep_copy,
    take_fields,
)
from ..config import ConfigError, RunConfig
from ..configio import load_scaled, set_dotted
from ..results.storage import anchored
from .files import (
    STUDY_KEYS,
    SWEEP_KEYS,
    check_ablation,
    check_budget,
    check_checkpoint_every,
    check_fresh_seeds,
    check_levels,
    check_name,
    check_span,
)
from .spec import (
    FOLDERS,
    KINDS,
    STUDY_OBJECTIVES,
    STUDY_SEARCH_KEYS,
    TRIAL_KEYS,
    Arm,
    ExperimentSpec,
    FinalSpec,
    SearchSpec,
    TrialSpec,
    check_base,
)


def parse_experiment(
    raw: dict[str, Any], source: str = "<experiment>", scale: str | None = None
) -> ExperimentSpec:
    """Validate a sweep or a study mapping (``kind: study``) into the one spec (``scale``: the
    named scale applied to it, recorded); every error names the field and what is allowed.
    The blocks both kinds have are read here, the rest by the kind's own form."""
    kind = raw.get("kind", "sweep")
    check_choice("kind", kind, KINDS)
    if kind == "sweep":
        raw = take_fields({k: v for k, v in raw.items() if k != "kind"}, "<root>", SWEEP_KEYS)
    else:
        raw = take_fields(raw, "<root>", STUDY_KEYS)
    name = check_name(raw.get("name") or Path(source).stem)
    results_dir = raw.get("results_dir") or f"{FOLDERS[kind]}/{name}"
    if not isinstance(results_dir, str):
        raise ConfigError("results_dir", f"{results_dir!r}; allowed: a path or a URI")
    # never relative to the working directory: Tune runs each trial in its own, and under
    # `ray job submit` it is a package cache on the head node
    location, relative = anchored(results_dir)
    common = {
        "name": name,
        "kind": kind,
        "trial": TrialSpec(**take_fields(raw.get("trial"), "trial", TRIAL_KEYS)),
        "results_dir": location,
        "dated": relative,
        "checkpoint_every": check_checkpoint_every(raw.get("checkpoint_every", 5)),
        "scale": scale,
    }
    if kind == "sweep":
        return _sweep_form(raw, source, common)
    return _study_form(raw, common)


def load_spec(
    path: str | Path, overrides: list[str] | None = None, scale: str | None = None
) -> ExperimentSpec:
    """Read a sweep or study file, apply a named scale (``scales.<name>``: dotted overrides of
    the file) and ``a.b=value`` overrides (dotted from the file's root), and validate it."""
    raw = load_scaled(path, overrides, scale, "sweep file")
    return parse_experiment(raw, str(path), scale)


# ---- a sweep file: one workload, one searched arm, its references unsearched arms ----------


def _sweep_form(raw: dict[str, Any], source: str, common: dict[str, Any]) -> ExperimentSpec:
    if "base" not in raw:
        raise ConfigError("base", f"{source} has no base: run config")
    base = raw.get("base") or {}
    check_base(base)
    search = _parse_search(raw.get("search"), base)
    final, compare = _parse_final(raw.get("final"), _search_seeds(search, base))
    spec = ExperimentSpec(
        workloads={common["name"]: base},
        names={common["name"]: common["name"]},
        arms=(Arm("selected", {}, search.space), *compare),
        search=search,
        final=final,
        client_rounds={common["name"]: search.client_rounds},
        objectives=(search.objective,),
        retention=search.retention,
        **common,
    )
    _check_seeds(spec, base)
    return spec


def _search_seeds(search: SearchSpec, base: dict[str, Any]) -> set[int]:
    """Every seed a sweep's search runs on (its base's, re-evaluation's, a grid's, the
    retention reference's); none for searcher none, whose grid runs on the final seeds."""
    if search.searcher == "none":
        return set()
    used = {int(base.get("seed", RunConfig().seed)), *search.reeval_seeds}
    for values in search.grid.get("seed", []), [search.reference.get("seed")]:
        used |= {int(v) for v in values if v is not None}
    return used


def _parse_search(raw: Any, base: dict[str, Any]) -> SearchSpec:
    """The ``search:`` block, checked field by field and against the base run config (its
    rounds for the scheduler, its clients for the budget, every grid point a valid config)."""
    search = SearchSpec(**take_fields(raw, "search", tuple(SearchSpec.__dataclass_fields__)))
    _check_searcher(search)
    cfg = check_base(deep_copy(base))
    search.check_rounds(cfg.fl.rounds)
    check_budget("search.client_rounds", search.client_rounds, cfg)
    _check_grid(search, base)
    return search


def _check_searcher(search: SearchSpec) -> None:
    """A searcher's own needs: a grid for grid and none, a space for the samplers (and no
    grid, which they would ignore), a multi-objective sampler for pareto."""
    if search.searcher in ("grid", "none"):
        if not search.grid:
            raise ConfigError("search.grid", f"the {search.searcher} searcher needs a grid")
    elif not search.space:
        raise ConfigError("search.space", f"the {search.searcher} searcher needs a space module")
    elif search.grid:  # it would be ignored: the space module says what is searched
        raise ConfigError(
            "search.grid",
            f"read by the grid and none searchers only; the "
            f"{search.searcher} searcher samples search.space "
            f"({search.space!r})",
        )
    if search.objective == "pareto" and search.searcher not in ("nsga2", "random", "grid"):
        raise ConfigError("search.objective", "pareto needs searcher nsga2, random or grid")
    if search.space:
        from .spaces import load_space

        load_space(search.space)


def _check_grid(search: SearchSpec, base: dict[str, Any]) -> None:
    """Every grid point is a valid run config (named by its grid key)."""
    for key, values in search.grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"search.grid.{key}", "expected a non-empty list of values")
        for v in values:
            probe = deep_copy(base)
            set_dotted(probe, key, v)
            try:
                check_base(probe)
            except ConfigError as err:
                raise ConfigError(f"search.grid.{key}", str(err)) from None


def _parse_final(raw: Any, used: set[int]) -> tuple[FinalSpec | None, tuple[Arm, ...]]:
    """The ``final:`` block: fresh seeds (none of the search's ``used``), how many
    configurations, the references (unsearched arms)."""
    if raw is None:
        return None, ()
    f = take_fields(raw, "final", ("seeds", "top", "compare"))
    seeds, compare = f.get("seeds") or (), f.get("compare") or ()
    seeds = check_fresh_seeds("final.seeds", seeds, used, "the final stage")
    if not isinstance(compare, list | tuple) or not all(isinstance(c, dict) for c in compare):
        raise ConfigError("final.compare", "expected a list of mappings of run-config fields")
    arms = tuple(_compare_arm(j, c, seeds) for j, c in enumerate(compare))
    final = FinalSpec(tuple(seeds), f.get("top", 1))
    check_positive("final.top", final.top, integer=True)
    return final, arms


def _compare_arm(j: int, entry: dict[str, Any], seeds) -> Arm:
    """A ``final.compare`` entry: run-config fields, plus two optional keys of its own —
    ``label`` (its name in the runs table; default ``compare-J``) and ``seeds`` (a subset of
    ``final.seeds`` it runs on, for controls that need fewer seeds than the arms)."""
    where = f"final.compare[{j}]"
    label = entry.get("label", f"compare-{j}")
    if not isinstance(label, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", label):
        raise ConfigError(
            f"{where}.label", f"{label!r}; allowed: a name of letters, digits and _.+- (at most 64)"
        )
    only = entry.get("seeds")
    if only is not None:
        if not isinstance(only, list | tuple) or not only:
            raise ConfigError(
                f"{where}.seeds",
                f"{only!r}; allowed: a non-empty list of final.seeds {list(seeds)}",
            )
        extra = [v for v in only if v not in seeds]
        if extra:
            raise ConfigError(
                f"{where}.seeds",
                f"{extra} are not in final.seeds {list(seeds)}; allowed: a subset of them",
            )
        only = tuple(int(v) for v in only)
    fields = {k: v for k, v in entry.items() if k not in ("label", "seeds")}
    return Arm(label, fields, searched=False, seeds=only)


def _check_seeds(spec: ExperimentSpec, base: dict[str, Any]) -> None:
    """Robust selection's seeds are further seeds (the final stage's were checked against
    every search seed), and an unsearched grid has a final stage to run in."""
    search = spec.search
    if search.searcher == "none" and spec.final is None:
        raise ConfigError("final", "searcher none runs the grid in the final stage; add final:")
    base_seed = int(base.get("seed", RunConfig().seed))
    if base_seed in search.reeval_seeds:
        raise ConfigError(
            "search.reeval_seeds", f"{base_seed} is the search's own seed; allowed: further seeds"
        )


# ---- a study file: named workloads and arms, drawn points, selection per arm ---------------


def _study_form(raw: dict[str, Any], common: dict[str, Any]) -> ExperimentSpec:
    workloads = _workloads(raw.get("workloads"))
    arms = _arms(raw.get("arms"))
    trials_per_arm, budgets, sampler_seed = _budget(raw.get("budget"), workloads)
    shared_raw = raw.get("shared") or {"train.lr": [0.01, 0.2, "log"]}
    if not isinstance(shared_raw, dict):
        raise ConfigError("shared", "expected a mapping of dotted field -> [low, high, log]")
    objectives = tuple(raw.get("objectives") or ("val_acc", "retention"))
    for o in objectives:
        check_choice("objectives", o, STUDY_OBJECTIVES)
    if objectives[0] != "val_acc":
        raise ConfigError(
            "objectives",
            "the first objective names each arm's main selection; allowed first: val_acc",
        )
    names = tuple(a.name for a in arms)
    ref = raw.get("retention_reference", names[0])
    check_choice("retention_reference", ref, names)
    compare_to = tuple(raw.get("compare_to") or ())
    for c in compare_to:
        check_choice("compare_to", c, names)
    final = take_fields(raw.get("final"), "final", ("seeds",))
    searched = {int(b.get("seed", 0)) for b in workloads.values()}
    seeds = check_fresh_seeds("final.seeds", final.get("seeds"), searched, "the study")
    levels = check_levels(raw.get("uplink_levels"))
    if levels:  # every run of the study reads its model at each level (design: Readings …)
        workloads = {
            w: {**b, "fl": {**(b.get("fl") or {}), "uplink_levels": list(levels)}}
            for w, b in workloads.items()
        }
    spec = ExperimentSpec(
        workloads={str(k): v for k, v in workloads.items()},
        arms=arms,
        search=_study_search(raw.get("search"), workloads, seeds),
        final=FinalSpec(seeds),
        client_rounds=budgets,
        trials_per_arm=int(trials_per_arm),
        sampler_seed=sampler_seed,
        shared={k: check_span(f"shared.{k}", v) for k, v in shared_raw.items()},
        topk_range=check_span("topk_range", raw.get("topk_range", [0.01, 1.0, "log"])),
        objectives=objectives,
        retention=check_share("retention", raw.get("retention", 0.98)),
        retention_reference=ref,
        uplink_levels=levels,
        target_of_reference=check_fraction(
            "target_of_reference", raw.get("target_of_reference", 0)
        ),
        targets=_targets(raw.get("targets"), workloads),
        compare_to=compare_to,
        **common,
    )
    _check_arm_points(spec)
    return spec


def _workloads(workloads: Any) -> dict[str, Any]:
    """``workloads``: name -> a base run config, each valid."""
    if not isinstance(workloads, dict) or not workloads:
        raise ConfigError("workloads", "expected a mapping of workload name -> base run config")
    for w, base in workloads.items():
        if not isinstance(base, dict):
            raise ConfigError(f"workloads.{w}", "expected a base run config (a mapping)")
        try:
            check_base(base)
        except ConfigError as err:
            raise ConfigError(f"workloads.{w}", str(err)) from None
    return workloads


def _arms(arms_raw: Any) -> tuple[Arm, ...]:
    """``arms``: name -> ``fixed`` fields (with method.name) and a registered ``space``."""
    if not isinstance(arms_raw, dict) or not arms_raw:
        raise ConfigError("arms", "expected a mapping of arm name -> {fixed: {...}, space: ...}")
    arms = []
    for a, block in arms_raw.items():
        block = take_fields(block, f"arms.{a}", ("fixed", "space", "ablation_of"))
        fixed = block.get("fixed") or {}
        parent = block.get("ablation_of")
        if parent is not None:
            arms.append(check_ablation(str(a), parent, fixed, block, arms_raw))
            continue
        if not isinstance(fixed, dict) or "method.name" not in fixed:
            raise ConfigError(
                f"arms.{a}.fixed",
                "expected a mapping of dotted run-config fields, with method.name",
            )
        space = block.get("space")
        if space is not None:
            from .spaces import load_space

            try:
                load_space(space)
            except ConfigError as err:
                raise ConfigError(f"arms.{a}.space", str(err).split(": ", 1)[-1]) from None
        arms.append(Arm(str(a), dict(fixed), space))
    return tuple(arms)


def _budget(raw: Any, workloads: dict[str, Any]) -> tuple[int, dict[str, int], int]:
    """``budget``: (configurations per arm, client-rounds per arm on each workload, the
    sampler's seed); a client-round budget is one number or one per workload."""
    budget = take_fields(raw, "budget", ("trials_per_arm", "seed", "client_rounds"))
    trials_per_arm = budget.get("trials_per_arm", 6)
    check_positive("budget.trials_per_arm", trials_per_arm, integer=True)
    client_rounds = budget.get("client_rounds", 0)
    per_workload = isinstance(client_rounds, dict)  # their rounds and clients differ
    if per_workload:
        if set(client_rounds) != set(workloads):
            raise ConfigError(
                "budget.client_rounds",
                f"{sorted(client_rounds)}; allowed: one number, or one per workload "
                f"({', '.join(workloads)})",
            )
        for w, v in client_rounds.items():
            check_positive(f"budget.client_rounds.{w}", v, integer=True)
        budgets = {str(w): int(v) for w, v in client_rounds.items()}
    else:
        check_positive("budget.client_rounds", client_rounds, integer=True, zero=True)
        budgets = {str(w): int(client_rounds) for w in workloads}
    for w, v in budgets.items():
        named = "budget.client_rounds" + (f".{w}" if per_workload else "")
        check_budget(named, v, check_base(deep_copy(workloads[w])))
    sampler_seed = budget.get("seed", 0)
    check_seed("budget.seed", sampler_seed)
    return trials_per_arm, budgets, sampler_seed


def _targets(targets: Any, workloads: dict[str, Any]) -> dict[str, float]:
    """``targets``: workload -> a validation accuracy for bytes to target."""
    targets = targets or {}
    if not isinstance(targets, dict) or any(w not in workloads for w in targets):
        raise ConfigError(
            "targets",
            f"expected workload -> validation accuracy, workloads: {', '.join(workloads)}",
        )
    return {str(w): check_share(f"targets.{w}", v) for w, v in targets.items()}


def _study_search(raw: Any, workloads: dict, final_seeds) -> SearchSpec:
    """A study's ``search`` block: a scheduler per arm (rungs in rounds, on evaluation rounds
    of every workload), robust selection (re-evaluation seeds, search seeds only) and the
    most trials at once."""
    search = SearchSpec(searcher="random", **take_fields(raw, "search", STUDY_SEARCH_KEYS))
    for w, base in workloads.items():
        try:
            search.check_rounds(check_base(deep_copy(base)).fl.rounds)
        except ConfigError as err:
            raise ConfigError(f"{err.field} (workload {w})", str(err).split(": ", 1)[-1]) from None
    used = {int(b.get("seed", 0)) for b in workloads.values()} | {int(s) for s in final_seeds}
    clash = sorted(set(search.reeval_seeds) & used)
    if clash:
        raise ConfigError(
            "search.reeval_seeds",
            f"{clash} are search or final seeds; allowed: further seeds, used by nothing else",
        )
    return search


def _check_arm_points(spec: ExperimentSpec) -> None:
    """Every arm's first point is a valid run on every workload."""
    for a in spec.arms:
        if a.ablation_of:  # the parent's first point with the ablation's fields on top
            point = {**arm_points(spec, spec.arm(a.ablation_of), count=1)[0], **a.fixed}
        else:
            point = arm_points(spec, a, count=1)[0]
        for w in spec.workloads:
            try:
                spec.workload(w).run_config(point)
            except ConfigError as err:
                raise ConfigError(f"arms.{a.name}", f"on workload {w}: {err}") from None


def arm_points(spec: ExperimentSpec, arm: Arm, count: int | None = None) -> list[dict[str, Any]]:
    """A study arm's search configurations: a seeded random draw from its own space and the
    shared knobs, the arm's fixed fields on top. The same for every workload and every rerun."""
    import zlib

    import optuna

    from .spaces import load_space

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seed = (spec.sampler_seed * 1_000_003 + zlib.crc32(arm.name.encode())) % 2**32
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    space = load_space(arm.space) if arm.space else None
    out = []
    for _ in range(count or spec.trials_per_arm):
        t = study.ask()
        if space is not None:
            space(t)
        for key, (lo, hi, log) in spec.shared.items():
            if key not in arm.fixed:
                t.suggest_float(key, lo, hi, log=log)
        dist = t.distributions.get("method.topk_ratio")
        if dist is not None and "method.topk_ratio" not in arm.fixed:
            got = (float(dist.low), float(dist.high), bool(getattr(dist, "log", False)))
            if got != spec.topk_range:
                raise ConfigError(
                    f"arms.{arm.name}.space",
                    f"searches method.topk_ratio over "
                    f"{got}, the study's topk_range is {spec.topk_range}; every "
                    "arm searches shared knobs over the same range",
                )
        params = {k: v for k, v in t.params.items() if k not in arm.fixed}
        out.append({**params, **arm.fixed})
    return out
