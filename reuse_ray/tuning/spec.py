"""Declarative sweep files: validated into a frozen :class:`SweepSpec` with clear errors.

A sweep file has a ``base`` run config (``reuse_ray.config``), a ``search`` block (what is
searched, by which searcher, on which objective, under which scheduler and budget), a ``trial``
block (what one trial reserves), an optional ``final`` block (fresh seeds, references) and
``results_dir``; every key, its default and what is allowed are in ``docs/reference.md``,
generated from the dataclasses below and the comments beside their fields. Every check names
the field and what is allowed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checks import check_choice
from ..config import ConfigError, RunConfig
from ..configio import from_dict, set_dotted
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

SEARCHERS = ("tpe", "nsga2", "random", "grid", "none")
SCHEDULERS = ("none", "asha", "hyperband")
OBJECTIVES = ("val_acc", "pareto", "retention")
TRIAL_BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class SearchSpec:
    space: str | None = None  # a registered search space (a method's name) the searcher samples
    # tpe, nsga2 and random sample the space with Optuna; grid runs search.grid; none sends every
    # grid point to the final stage unsearched
    searcher: str = "tpe"
    # val_acc (validation accuracy at the final round), pareto (val_acc against restricted uplink,
    # NSGA-II) or retention (the largest saving keeping search.retention of the reference's
    # accuracy)
    objective: str = "val_acc"
    # trials to run (grid: repeats of every point); with client_rounds, the most it may start
    num_samples: int = 8
    seed: int = 0  # the searcher's seed
    # dotted field -> list of values (grid and none searchers)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    # retention objective: the share of the reference run's validation accuracy to keep
    retention: float = 0.98
    # retention objective: dotted fields of the reference run (default: the base config)
    reference: dict[str, Any] = field(default_factory=dict)
    # at most this many trials at once (0: as many as the cluster fits)
    max_concurrent_trials: int = 0
    # a trial scheduler over FL rounds: none, asha or hyperband. Its time axis is the round of
    # the latest validation, so rungs fall on evaluation rounds; max_t is the final round
    scheduler: str = "none"
    grace_period: int = 1  # asha: the first rung, in rounds
    reduction_factor: int = 3  # asha, hyperband: 1/reduction_factor of a rung's trials go on
    # robust selection: the top reeval_top configurations rerun on reeval_seeds (validation
    # only, stage "reeval"), chosen by their means over the search seed and these (validation
    # accuracy; and uplink saving, for retention)
    reeval_top: int = 0
    # robust selection: the further search seeds (disjoint from the search's and the final's)
    reeval_seeds: tuple[int, ...] = ()
    # a budget in client training rounds (selected clients x rounds reached, over all trials):
    # the search stops once it is spent; num_samples is then the most trials it may start
    client_rounds: int = 0

    def __post_init__(self) -> None:
        """Every field on its own and against the others, for a sweep's ``search:`` block and a
        study's alike; what needs the base run config (its rounds and clients, the grid's
        points) or the searcher's space is checked where the file is parsed."""
        if self.space is not None and not isinstance(self.space, str):
            raise ConfigError("search.space", f"expected a space name, got {self.space!r}")
        check_choice("search.searcher", self.searcher, SEARCHERS)
        check_choice("search.objective", self.objective, OBJECTIVES)
        check_positive("search.num_samples", self.num_samples, integer=True)
        check_positive("search.max_concurrent_trials", self.max_concurrent_trials, True, zero=True)
        check_seed("search.seed", self.seed)
        for key in ("grid", "reference"):
            if not isinstance(getattr(self, key), dict):
                raise ConfigError(f"search.{key}", "expected a mapping of dotted run-config fields")
        check_share("search.retention", self.retention)
        self._check_scheduler()
        object.__setattr__(self, "reeval_seeds", self._check_reeval())
        check_positive("search.client_rounds", self.client_rounds, integer=True, zero=True)
        if self.client_rounds and self.searcher == "none":
            raise ConfigError("search.client_rounds", "searcher none runs no search to budget")

    def _check_scheduler(self) -> None:
        check_choice("search.scheduler", self.scheduler, SCHEDULERS)
        if self.scheduler == "none":
            return
        if self.searcher == "none":
            raise ConfigError(
                "search.scheduler",
                f"{self.scheduler} stops search trials, and "
                "searcher none runs no search; allowed with searcher none: none",
            )
        if self.objective == "pareto":
            raise ConfigError(
                "search.scheduler",
                f"{self.scheduler} ranks trials on one metric; allowed with objective pareto: none",
            )
        check_positive("search.grace_period", self.grace_period, integer=True)
        f = self.reduction_factor
        if isinstance(f, bool) or not isinstance(f, int) or f < 2:
            raise ConfigError("search.reduction_factor", f"{f!r}; allowed: an integer ≥ 2")

    def _check_reeval(self) -> tuple[int, ...]:
        """Robust selection's fields: a count and the further search seeds it reruns on."""
        check_positive("search.reeval_top", self.reeval_top, integer=True, zero=True)
        seeds = self.reeval_seeds
        if not isinstance(seeds, list | tuple):
            raise ConfigError("search.reeval_seeds", f"{seeds!r}; allowed: a list of seeds")
        for v in seeds:
            check_seed("search.reeval_seeds", v)
        if self.reeval_top and not seeds:
            raise ConfigError("search.reeval_seeds", "reeval_top needs further search seeds")
        if seeds and not self.reeval_top:
            raise ConfigError("search.reeval_top", "0 with reeval_seeds given; allowed: 1 or more")
        if self.reeval_top and self.objective == "pareto":
            raise ConfigError("search.reeval_top", "ranks on one metric; not with objective pareto")
        if self.reeval_top and self.searcher == "none":
            raise ConfigError("search.reeval_top", "searcher none runs no search to re-evaluate")
        return tuple(int(v) for v in seeds)

    def check_rounds(self, rounds: int) -> None:
        """A scheduler's first rung within the base run config's rounds."""
        if self.scheduler != "none" and self.grace_period > rounds:
            raise ConfigError(
                "search.grace_period",
                f"{self.grace_period} is beyond the final round ({rounds}); allowed: 1 to {rounds}",
            )


@dataclass(frozen=True)
class TrialSpec:
    # local (the trial's run in its own process) or ray (client-worker actors per trial)
    backend: str = "local"
    cpus: float = 1.0  # CPUs the trial's driver reserves
    workers: int = 1  # ray backend: client-worker actors per trial
    cpu_per_worker: float = 1.0  # ray backend: CPUs each client worker reserves
    # GPU share of each client worker (0: CPU workers); needs GPUs in the cluster
    gpu_fraction: float = 0.0
    # custom resources of the trial's driver bundle, e.g. {node_kind_a100: 1} to place trials
    # on the nodes that declare it (`ray start --resources`)
    resources: dict[str, float] = field(default_factory=dict)
    # times a trial is restarted from its last checkpoint after its process or node died
    max_failures: int = 2
    # one trial process serves trial after trial (no fresh Ray worker and imports per trial)
    reuse_actors: bool = True

    def __post_init__(self) -> None:
        """Every field checked, naming it (a sweep's ``trial:`` block and a study's)."""
        check_choice("trial.backend", self.backend, TRIAL_BACKENDS)
        check_positive("trial.cpus", self.cpus, zero=self.backend == "ray")
        check_positive("trial.workers", self.workers, integer=True)
        check_positive("trial.cpu_per_worker", self.cpu_per_worker)
        check_positive("trial.gpu_fraction", self.gpu_fraction, zero=True)
        check_positive("trial.max_failures", self.max_failures, integer=True, zero=True)
        if not isinstance(self.reuse_actors, bool):
            raise ConfigError("trial.reuse_actors", f"{self.reuse_actors!r}; allowed: true, false")
        if not isinstance(self.resources, dict) or any(
            not isinstance(k, str) or k in ("CPU", "GPU", "memory") for k in self.resources
        ):
            raise ConfigError(
                "trial.resources",
                f"{self.resources!r}; allowed: a mapping of "
                "custom resource names (not CPU/GPU) to amounts",
            )
        for k, v in self.resources.items():
            check_positive(f"trial.resources.{k}", v)

    def bundles(self) -> list[dict[str, float]]:
        """The placement-group bundles of one trial: its driver, then its client workers."""
        driver = {"CPU": self.cpus, **self.resources}
        if self.backend == "local":
            return [driver]
        worker = (
            {"GPU": self.gpu_fraction} if self.gpu_fraction > 0 else {"CPU": self.cpu_per_worker}
        )
        return [driver] + [dict(worker) for _ in range(self.workers)]

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for b in self.bundles():
            for k, v in b.items():
                out[k] = out.get(k, 0.0) + v
        return out


@dataclass(frozen=True)
class FinalSpec:
    # fresh seeds, disjoint from the search's, on which the selected configurations rerun
    seeds: tuple[int, ...] = ()
    top: int = 1  # how many of the best search configurations the final stage reruns
    # unsearched references (dotted fields, optional seeds:), labelled compare-<j>
    compare: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class SweepSpec:
    name: str
    base: dict[str, Any]
    search: SearchSpec
    trial: TrialSpec
    final: FinalSpec | None
    results_dir: str
    checkpoint_every: int = 5
    # results_dir is a folder of dated sweeps (it was relative, anchored at the results root):
    # each new sweep writes to a fresh YYYYMMDD-HHMMSS folder below it, --resume to the newest
    dated: bool = False

    def trials_total(self) -> int | str:
        """The search's trials (grid: its points × num_samples), or with a client-round budget
        the most it may start, as the console says it ("at most N")."""
        s = self.search
        n = s.num_samples * (
            math.prod(len(v) for v in s.grid.values()) if s.searcher == "grid" else 1
        )
        return f"at most {n}" if s.client_rounds else n

    def run_config(self, params: dict[str, Any] | None = None, **top: Any) -> RunConfig:
        """The base config with dotted ``params`` and top-level fields applied.

        A sweep's base may hold the blocks of several of its arms' methods; each trial keeps
        only the block of its own method (a run config with another method's block is an
        error)."""
        data = deep_copy(self.base)
        for key, value in (params or {}).items():
            set_dotted(data, key, value)
        data.update(top)
        if isinstance(data.get("method"), dict):
            data["method"] = _own_block_only(data["method"])
        data["results_dir"] = self.results_dir
        engine = dict(data.get("engine") or {})
        engine["backend"] = self.trial.backend
        if self.trial.backend == "ray":
            engine["num_workers"] = self.trial.workers
            engine["cpu_per_worker"] = self.trial.cpu_per_worker
            if self.trial.gpu_fraction > 0:
                engine["gpu_fraction"] = self.trial.gpu_fraction
                engine["device"] = "cuda"
        data["engine"] = engine
        return from_dict(RunConfig, data)

    @property
    def search_seeds(self) -> set[int]:
        seeds = {int(self.base.get("seed", RunConfig().seed))}
        seeds |= set(self.search.reeval_seeds)
        for values in self.search.grid.get("seed", []), [self.search.reference.get("seed")]:
            seeds |= {int(v) for v in values if v is not None}
        return seeds


def check_base(base: dict[str, Any]) -> RunConfig:
    """A sweep's run config as its trials see it (other methods' blocks set aside)."""
    data = deep_copy(base)
    if isinstance(data.get("method"), dict):
        data["method"] = _own_block_only(data["method"])
    return from_dict(RunConfig, data)


def _own_block_only(method: dict[str, Any]) -> dict[str, Any]:
    """The method block without the config blocks of other registered methods."""
    from ..algorithms.registry import config_blocks, get_method, load_module

    if isinstance(method.get("module"), str):
        try:
            load_module(method["module"])
        except (ImportError, FileNotFoundError):
            return method  # the run config reports it
    try:
        own = get_method(method.get("name", "fedavg")).block
    except (KeyError, TypeError):
        return method
    others = set(config_blocks()) - {own}
    return {k: v for k, v in method.items() if k not in others}


def parse_sweep(raw: dict[str, Any], source: str = "<sweep>") -> SweepSpec:
    """Validate a sweep mapping; every error names the field and what is allowed."""
    top = ("name", "base", "search", "trial", "final", "results_dir", "checkpoint_every")
    raw = take_fields(raw, "<root>", top)
    if "base" not in raw:
        raise ConfigError("base", f"{source} has no base: run config")
    base = raw.get("base") or {}
    check_base(base)
    name = check_name(raw.get("name") or Path(source).stem)
    search = _parse_search(raw.get("search"), base)
    final = _parse_final(raw.get("final"))
    results_dir = raw.get("results_dir") or f"sweeps/{name}"
    if not isinstance(results_dir, str):
        raise ConfigError("results_dir", f"{results_dir!r}; allowed: a path or a URI")
    # never relative to the working directory: Tune runs each trial in its own, and under
    # `ray job submit` it is a package cache on the head node
    location, relative = anchored(results_dir)
    spec = SweepSpec(
        name=name,
        base=base,
        search=search,
        trial=parse_trial(raw.get("trial")),
        final=final,
        results_dir=location,
        checkpoint_every=check_checkpoint_every(raw.get("checkpoint_every", 5)),
        dated=relative,
    )
    _check_seeds(spec)
    return spec


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


def _parse_final(raw: Any) -> FinalSpec | None:
    """The ``final:`` block: fresh seeds, how many configurations, the references."""
    if raw is None:
        return None
    f = take_fields(raw, "final", ("seeds", "top", "compare"))
    seeds, compare = f.get("seeds") or (), f.get("compare") or ()
    seeds = check_fresh_seeds("final.seeds", seeds, set(), "the final stage")
    if not isinstance(compare, list | tuple) or not all(isinstance(c, dict) for c in compare):
        raise ConfigError("final.compare", "expected a list of mappings of run-config fields")
    compare = tuple(_compare_entry(j, c, seeds) for j, c in enumerate(compare))
    final = FinalSpec(tuple(seeds), f.get("top", 1), compare)
    check_positive("final.top", final.top, integer=True)
    return final


def _check_seeds(spec: SweepSpec) -> None:
    """The search's seeds, robust selection's and the final stage's are disjoint, and an
    unsearched grid has a final stage to run in."""
    search, final = spec.search, spec.final
    if search.searcher == "none" and final is None:
        raise ConfigError("final", "searcher none runs the grid in the final stage; add final:")
    base_seed = int(spec.base.get("seed", RunConfig().seed))
    if base_seed in search.reeval_seeds:
        raise ConfigError(
            "search.reeval_seeds", f"{base_seed} is the search's own seed; allowed: further seeds"
        )
    if final is not None and search.searcher != "none":
        reused = sorted(set(final.seeds) & spec.search_seeds)
        if reused:
            raise ConfigError(
                "final.seeds",
                f"{reused} were used by the search; allowed: seeds the search never used",
            )


def _compare_entry(j: int, entry: dict[str, Any], seeds) -> dict[str, Any]:
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
        only = [int(v) for v in only]
    fields = {k: v for k, v in entry.items() if k not in ("label", "seeds")}
    return dict(fields, label=label, **({"seeds": only} if only is not None else {}))


def parse_trial(raw: Any) -> TrialSpec:
    """The ``trial`` block of a sweep or a study file: what one trial reserves, each field
    checked (a study's trials are a sweep's)."""
    return TrialSpec(**take_fields(raw, "trial", tuple(TrialSpec.__dataclass_fields__)))


def load_sweep(
    path: str | Path, overrides: list[str] | None = None, scale: str | None = None
) -> SweepSpec:
    """Read a sweep file, apply a named scale and ``a.b=value`` overrides (dotted from the
    file's root), and validate it."""
    return parse_sweep(read_file(path, overrides, scale, "sweep file"), str(path))
