"""Experiment files, validated into one frozen :class:`ExperimentSpec` with clear errors.

Every experiment is workloads × arms: each workload a base run config, each arm a method with
the fields it fixes, searched on validation data only under one budget, selected, and rerun on
fresh seeds that read the test split once. A **study file** (``kind: study``) is the general
form: named workloads and arms, every searched arm drawing its configurations from its own
space and the shared knobs. A **sweep file** is shorthand for one workload (its ``base``) and
one searched arm whose configurations come from ``search.searcher`` (TPE, NSGA-II, random, a
grid; ``none``: the grid goes unsearched to the final stage), its ``final.compare`` entries
unsearched arms. One parser reads both (:func:`parse_experiment`), with the same checks of the
blocks they share (``search``, ``trial``, ``final.seeds``, ``name``, ``results_dir``); every
key, its default and what is allowed are in ``docs/reference.md``, generated from the
dataclasses below and the comments beside their fields. Every check names the field and what
is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ..checks import check_choice, check_positive, check_seed, check_share, deep_copy
from ..config import ConfigError, RunConfig
from ..configio import from_dict, set_dotted

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
    # at most this many trials at once (0: as many as the cluster fits; hyperband: 0 only)
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
        if self.scheduler == "hyperband" and self.max_concurrent_trials:
            # its search creates every trial at once to fill its brackets (a limit on live
            # trials would leave a bracket unfilled for ever), so the limit could not hold
            raise ConfigError(
                "search.max_concurrent_trials",
                "not with scheduler hyperband, whose trials wait side by side to fill its "
                "brackets; allowed with it: 0 (space trials out with trial.cpus instead)",
            )

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


STUDY_OBJECTIVES = ("val_acc", "retention")
# the search fields a study file sets (its arms' points are drawn, so no searcher of its own)
STUDY_SEARCH_KEYS = (
    "scheduler",
    "grace_period",
    "reduction_factor",
    "reeval_top",
    "reeval_seeds",
    "max_concurrent_trials",
)
KINDS = ("sweep", "study")
FOLDERS = {"sweep": "sweeps", "study": "studies"}  # where results go by default


TRIAL_KEYS = tuple(TrialSpec.__dataclass_fields__)


@dataclass(frozen=True)
class FinalSpec:
    # fresh seeds, disjoint from the search's, on which the selected configurations rerun
    seeds: tuple[int, ...] = ()
    top: int = 1  # how many of the best search configurations the final stage reruns


@dataclass(frozen=True)
class Arm:
    """One competitor: a method with the run-config fields it fixes (dotted) and, searched,
    the space of its own knobs (a registered space name; None: the shared knobs only, or a
    sweep's searcher alone). Unsearched (a sweep's ``final.compare`` entry), it runs as it is
    in the final stage, on ``seeds`` (a subset of the final seeds) where given."""

    name: str
    fixed: dict[str, Any]
    space: str | None = None
    searched: bool = True
    seeds: tuple[int, ...] | None = None
    # a study's ablation of a searched arm: not searched; its final runs are each of that arm's
    # chosen configurations with ``fixed`` on top (every other setting shared), ARM@<objective>
    ablation_of: str | None = None


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload of an experiment as its stages launch it: its Tune experiments, trials
    table and runs are named ``name``; every trial starts from ``base``."""

    name: str
    base: dict[str, Any]
    search: SearchSpec
    trial: TrialSpec
    results_dir: str
    checkpoint_every: int = 5

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

        A base may hold the blocks of several of its arms' methods; each trial keeps only the
        block of its own method (a run config with another method's block is an error)."""
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


@dataclass(frozen=True)
class ExperimentSpec:
    """A sweep file or a study file, validated: workloads × arms, the search and its budget,
    how each arm is selected, and the final stage (``kind``: which file it was read from)."""

    name: str
    kind: str  # sweep or study
    workloads: dict[str, dict[str, Any]]  # workload name -> its base run config
    arms: tuple[Arm, ...]
    # a sweep's searcher, objective, budget and scheduler; a study's scheduler and robust
    # selection (its arms' points are drawn by a seeded random sampler)
    search: SearchSpec
    trial: TrialSpec
    final: FinalSpec | None
    results_dir: str
    checkpoint_every: int = 5
    # results_dir is a folder of dated experiments (it was relative, anchored at the results
    # root): each new one writes to a fresh YYYYMMDD-HHMMSS folder below it, --resume to the
    # newest
    dated: bool = False
    scale: str | None = None  # the file's named scale applied
    client_rounds: dict[str, int] = field(default_factory=dict)  # per workload (0: no budget)
    # a study's budget per arm: configurations drawn (at most) and the sampler's seed
    trials_per_arm: int = 0
    sampler_seed: int = 0
    # a study's drawn knobs: dotted field -> (low, high, log), one range for every arm
    shared: dict[str, tuple[float, float, bool]] = field(default_factory=dict)
    topk_range: tuple[float, float, bool] = (0.01, 1.0, True)
    # a study's selection: its objectives per arm, the retention bar against the reference arm
    objectives: tuple[str, ...] = ("val_acc",)
    retention: float = 0.98
    retention_reference: str = ""
    # selection at matched uplink: fractions of the reference arm's cumulative restricted uplink
    # at the final round; per arm and level, the best validation accuracy within it
    uplink_levels: tuple[float, ...] = ()
    # bytes to a validation target fixed before any test read: this fraction of the reference
    # arm's mean final-stage validation accuracy (0: the absolute ``targets`` only)
    target_of_reference: float = 0.0
    targets: dict[str, float] = field(default_factory=dict)
    compare_to: tuple[str, ...] = ()  # the arms the leaderboard's differences are taken against
    # workload -> the name its Tune experiments, trials table and runs carry (default
    # <name>-<workload>; a sweep file's one workload carries the sweep's name)
    names: dict[str, str] = field(default_factory=dict)

    def workload(self, w: str) -> WorkloadSpec:
        """What the stages of workload ``w`` launch with: its base, the search with the
        workload's budget, this experiment's trials, under the workload's name."""
        return WorkloadSpec(
            name=self.names.get(w, f"{self.name}-{w}"),
            base=self.workloads[w],
            search=replace(self.search, client_rounds=self.client_rounds.get(w, 0)),
            trial=self.trial,
            results_dir=self.results_dir,
            checkpoint_every=self.checkpoint_every,
        )

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    @property
    def final_top(self) -> int:
        return self.final.top if self.final else 1

    @property
    def final_seeds(self) -> tuple[int, ...]:
        return self.final.seeds if self.final else ()

    @property
    def compare(self) -> tuple[dict[str, Any], ...]:
        """The unsearched arms as final-stage references (an ablation runs on its parent's
        choices instead): fields, label, seeds (if named)."""
        return tuple(
            dict(a.fixed, label=a.name, **({"seeds": list(a.seeds)} if a.seeds else {}))
            for a in self.arms
            if not a.searched and not a.ablation_of
        )

    def ray_address(self) -> str | None:
        """The cluster a workload's ``engine.ray_address`` names (the first that names one)."""
        named = ((b.get("engine") or {}).get("ray_address") for b in self.workloads.values())
        return next((a for a in named if a), None)


def level_name(level: float) -> str:
    """A level's objective name (``up10`` for 10 %): its final runs' label is ``ARM@up10``."""
    pct = 100 * level
    return f"up{pct:g}" if pct != int(pct) else f"up{int(pct)}"


def check_base(base: dict[str, Any]) -> RunConfig:
    """A workload's run config as its trials see it (other methods' blocks set aside)."""
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
