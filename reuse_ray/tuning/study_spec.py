"""A study file, validated: its workloads, arms, budget and final seeds (see
:mod:`reuse_ray.tuning.study` for what a study runs). The ``trial`` block and the common checks
are the sweep file's (:mod:`reuse_ray.tuning.spec`)."""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import check_choice
from ..config import ConfigError
from ..results.storage import anchored
from .fields import (
    check_budget,
    check_checkpoint_every,
    check_fresh_seeds,
    check_name,
    check_positive,
    check_seed,
    check_share,
    deep_copy,
    read_file,
    take_fields,
)
from .spec import SearchSpec, SweepSpec, TrialSpec, check_base, parse_trial

OBJECTIVES = ("val_acc", "retention")
TOP = (
    "name",
    "kind",
    "workloads",
    "arms",
    "budget",
    "search",
    "shared",
    "topk_range",
    "objectives",
    "uplink_levels",
    "target_of_reference",
    "retention",
    "retention_reference",
    "final",
    "compare_to",
    "targets",
    "trial",
    "checkpoint_every",
    "results_dir",
    "scales",
)


@dataclass(frozen=True)
class Arm:
    """One competitor: a method with the run-config fields it fixes and the space of its own
    knobs (a registered space name, or None for the shared knobs only)."""

    name: str
    fixed: dict[str, Any]
    space: str | None = None


@dataclass(frozen=True)
class StudySpec:
    name: str
    workloads: dict[str, dict[str, Any]]
    arms: tuple[Arm, ...]
    trials_per_arm: int
    sampler_seed: int
    shared: dict[str, tuple[float, float, bool]]
    topk_range: tuple[float, float, bool]
    objectives: tuple[str, ...]
    retention: float
    retention_reference: str
    final_seeds: tuple[int, ...]
    compare_to: tuple[str, ...]
    targets: dict[str, float]
    trial: TrialSpec
    checkpoint_every: int
    results_dir: str
    dated: bool = False
    scale: str | None = None
    # budget.client_rounds per arm and workload (0: trials_per_arm full runs) and the search
    # block: scheduler, grace_period, reduction_factor, reeval_top, reeval_seeds (a sweep's)
    search: SearchSpec = SearchSpec(searcher="random")
    client_rounds: dict[str, int] = dataclasses.field(default_factory=dict)  # 0: no budget
    # selection at matched uplink: fractions of the reference arm's cumulative restricted uplink
    # at the final round; per arm and level, the best validation accuracy within it
    uplink_levels: tuple[float, ...] = ()
    # bytes to a validation target fixed before any test read: this fraction of the reference
    # arm's mean final-stage validation accuracy (0: the absolute ``targets`` only)
    target_of_reference: float = 0.0

    def level_name(self, level: float) -> str:
        """A level's objective name (``up10`` for 10 %): its final runs' label is
        ``ARM@up10``."""
        return level_name(level)

    def sweep_spec(self, workload: str) -> SweepSpec:
        """The sweep machinery's view of one workload: its base and this study's trials."""
        return SweepSpec(
            name=f"{self.name}-{workload}",
            base=self.workloads[workload],
            search=dataclasses.replace(
                self.search, client_rounds=self.client_rounds.get(workload, 0)
            ),
            trial=self.trial,
            final=None,
            results_dir=self.results_dir,
            checkpoint_every=self.checkpoint_every,
        )

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


def level_name(level: float) -> str:
    pct = 100 * level
    return f"up{pct:g}" if pct != int(pct) else f"up{int(pct)}"


def _levels(value: Any) -> tuple[float, ...]:
    """``uplink_levels``: increasing fractions in (0, 1)."""
    value = value or []
    ok = isinstance(value, list | tuple) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < 1 for v in value
    )
    if not ok or list(value) != sorted(set(value)):
        raise ConfigError(
            "uplink_levels",
            f"{value!r}; allowed: increasing fractions in (0, 1) of the reference arm's "
            "cumulative restricted uplink, e.g. [0.1, 0.25, 0.5]",
        )
    return tuple(float(v) for v in value)


def _fraction(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(path, f"{value!r}; allowed: a number in [0, 1] (0: none)")
    return float(value)


def is_study(raw: dict[str, Any]) -> bool:
    return isinstance(raw, dict) and raw.get("kind") == "study"


def _range(path: str, value: Any) -> tuple[float, float, bool]:
    """``[low, high]`` or ``[low, high, log]``."""
    ok = isinstance(value, list | tuple) and len(value) in (2, 3)
    ok = ok and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value[:2])
    if ok and len(value) == 3:
        ok = value[2] in ("log", "linear")
    if not ok or not 0 < value[0] < value[1]:
        raise ConfigError(
            path, f"{value!r}; allowed: [low, high] or [low, high, log|linear] with 0 < low < high"
        )
    return float(value[0]), float(value[1]), len(value) == 3 and value[2] == "log"


def parse_study(
    raw: dict[str, Any], source: str = "<study>", scale: str | None = None
) -> StudySpec:
    """Validate a study mapping (``scale``: the named scale applied to it, recorded); every
    error names the field and what is allowed."""
    raw = take_fields(raw, "<root>", TOP)
    name = check_name(raw.get("name") or Path(source).stem)
    workloads = _workloads(raw.get("workloads"))
    arms = _arms(raw.get("arms"))
    trials_per_arm, budgets, sampler_seed = _budget(raw.get("budget"), workloads)
    shared_raw = raw.get("shared") or {"train.lr": [0.01, 0.2, "log"]}
    if not isinstance(shared_raw, dict):
        raise ConfigError("shared", "expected a mapping of dotted field -> [low, high, log]")
    objectives = tuple(raw.get("objectives") or ("val_acc", "retention"))
    for o in objectives:
        check_choice("objectives", o, OBJECTIVES)
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
    location, relative = anchored(raw.get("results_dir") or f"studies/{name}")
    spec = StudySpec(
        name=name,
        workloads={str(k): v for k, v in workloads.items()},
        arms=arms,
        trials_per_arm=int(trials_per_arm),
        sampler_seed=sampler_seed,
        shared={k: _range(f"shared.{k}", v) for k, v in shared_raw.items()},
        topk_range=_range("topk_range", raw.get("topk_range", [0.01, 1.0, "log"])),
        objectives=objectives,
        retention=check_share("retention", raw.get("retention", 0.98)),
        retention_reference=ref,
        final_seeds=seeds,
        compare_to=compare_to,
        targets=_targets(raw.get("targets"), workloads),
        trial=parse_trial(raw.get("trial")),
        checkpoint_every=check_checkpoint_every(raw.get("checkpoint_every", 5)),
        results_dir=location,
        dated=relative,
        search=_search(raw.get("search"), workloads, seeds),
        client_rounds=budgets,
        uplink_levels=_levels(raw.get("uplink_levels")),
        target_of_reference=_fraction("target_of_reference", raw.get("target_of_reference", 0)),
        scale=scale,
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
        block = take_fields(block, f"arms.{a}", ("fixed", "space"))
        fixed = block.get("fixed") or {}
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


def _check_arm_points(spec: StudySpec) -> None:
    """Every arm's first point is a valid run on every workload."""
    for a in spec.arms:
        point = arm_points(spec, a, count=1)[0]
        for w in spec.workloads:
            try:
                spec.sweep_spec(w).run_config(point)
            except ConfigError as err:
                raise ConfigError(f"arms.{a.name}", f"on workload {w}: {err}") from None


def _search(raw: Any, workloads: dict, final_seeds) -> SearchSpec:
    """The study's ``search`` block: a scheduler per arm (rungs in rounds, on evaluation rounds
    of every workload) and robust selection (re-evaluation seeds, search seeds only)."""
    block = take_fields(
        raw,
        "search",
        ("scheduler", "grace_period", "reduction_factor", "reeval_top", "reeval_seeds"),
    )
    search = SearchSpec(
        searcher="random",
        scheduler=block.get("scheduler", "none"),
        grace_period=block.get("grace_period", 1),
        reduction_factor=block.get("reduction_factor", 3),
        reeval_top=block.get("reeval_top", 0),
        reeval_seeds=block.get("reeval_seeds", ()),
    )
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


def load_study(
    path: str | Path, overrides: list[str] | None = None, scale: str | None = None
) -> StudySpec:
    """Read a study file, apply a named scale (``scales.<name>``: dotted overrides) and
    ``--set`` overrides, and validate it."""
    return parse_study(read_file(path, overrides, scale, "study file"), str(path), scale)


def arm_points(spec: StudySpec, arm: Arm, count: int | None = None) -> list[dict[str, Any]]:
    """The arm's search configurations: a seeded random draw from its own space and the shared
    knobs, the arm's fixed fields on top. The same for every workload and every rerun."""
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
