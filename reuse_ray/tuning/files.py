"""The top-level keys of the two experiment files, one frozen dataclass each, and the checks of
their own fields: the parser (:mod:`.parse`) reads a file's top level with exactly these keys,
and ``docs/reference.md`` documents each from its field (type, default and allowed values) and
the comment above it (:func:`reuse_ray.reference.spec_sections`). What a file's blocks hold is
validated into :class:`.spec.ExperimentSpec`; each check names the field and what is
allowed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..checks import ConfigError, check_seed
from .spec import Arm


def _key(type_: str, default: str = "", allowed: str = "") -> Any:
    """A file's top-level key as the reference documents it (its meaning is the comment above
    it); the parser reads the file's top level with exactly these keys."""
    return field(default=None, metadata={"type": type_, "default": default, "allowed": allowed})


@dataclass(frozen=True)
class SweepFile:
    """The top-level keys of a sweep file (``reuse-ray sweep FILE``): a validation-only search
    over a base run config, then the final stage; read into :class:`ExperimentSpec`."""

    # the sweep's name: its Tune experiments, its trials table and its runs' `sweep` column
    name: str = _key("str", "the file's stem", "letters, digits, `-`, `_`")
    # `study` makes the file a study file (below); a sweep file is one workload (`base`) and
    # one searched arm, its `final.compare` entries unsearched arms
    kind: str = _key("str", "`sweep`", "`sweep`, `study`")
    # the run config every trial starts from (every field of the run-config tables)
    base: dict = _key("run config", "required")
    # what is searched and how (below)
    search: dict = _key("block")
    # what one trial reserves and runs on (below)
    trial: dict = _key("block")
    # the final stage: the selected configurations and the references on fresh seeds (below);
    # none: search only
    final: dict = _key("block", "null")
    # rounds between a trial's checkpoints (0: none; an interrupted trial then restarts from
    # round 1)
    checkpoint_every: int = _key("int", "`5`", "≥ 0")
    # where results go; a relative one is a folder of dated sweeps below the results root
    results_dir: str = _key("str", "`sweeps/<name>`", "a path or a URI")
    # named overrides of this file (`--scale NAME`), e.g. a smoke test
    scales: dict = _key("mapping", "`{}`", "name -> dotted overrides")


@dataclass(frozen=True)
class StudyFile:
    """The top-level keys of a study file (``kind: study``): every arm tuned on the same
    validation budget on every workload, selected, and rerun on fresh seeds (``reuse-ray sweep
    FILE``, ``--scale NAME``); read into :class:`ExperimentSpec`."""

    # the study's name: its sweeps are `<name>-<workload>`
    name: str = _key("str", "the file's stem", "letters, digits, `-`, `_`")
    # `study`: this file is a study file
    kind: str = _key("str", "`sweep`", "`sweep`, `study`")
    # workload name -> a run config (its base); every arm runs on every workload
    workloads: dict = _key("mapping", "required", "name -> run config")
    # arm name -> `fixed:` (dotted run-config fields the arm fixes, with `method.name`) and
    # `space:` (a registered space of its own knobs); or an ablation, not searched:
    # `ablation_of:` a searched arm and `fixed:` the fields it changes — its final runs are
    # each of that arm's choices with them on top
    arms: dict = _key("mapping", "required", "name -> `fixed:`, `space:` or `ablation_of:`")
    # `trials_per_arm` (at most this many configurations per arm), `client_rounds` (per arm:
    # one number or one per workload; selected clients × rounds trained; 0 = trials_per_arm
    # full runs), `seed` (the sampler's)
    budget: dict = _key(
        "block",
        "`trials_per_arm: 6`, `client_rounds: 0`, `seed: 0`",
        "integers > 0, ≥ 0, a seed",
    )
    # `scheduler` (none, asha, hyperband: one per arm, and per arm and uplink level when
    # `uplink_levels` are set), `grace_period`, `reduction_factor`, `reeval_top`,
    # `reeval_seeds` (robust selection), `max_concurrent_trials` (at most this many trials at
    # once; 1: the same search launch after launch)
    search: dict = _key(
        "block", "`scheduler: none`", "the sweep file's `search.` fields named here"
    )
    # knobs every arm searches over one range
    shared: dict = _key(
        "mapping",
        "`{train.lr: [0.01, 0.2, log]}`",
        "dotted field -> [low, high] or [low, high, log]",
    )
    # the Top-K ratio r's range wherever an arm's method sparsifies
    topk_range: list = _key(
        "list", "`[0.01, 1.0, log]`", "[low, high] or [low, high, log], 0 < low < high"
    )
    # the selections made per arm
    objectives: list = _key(
        "list", "`[val_acc, retention]`", "`val_acc`, `retention`, first `val_acc`"
    )
    # fractions f of dense FedAvg's uplink over the planned rounds (f·T·K·B0 bytes), set as
    # `fl.uplink_levels` on every run: each run is read at the last round within each level,
    # in both ledgers (table `levels`); per arm, level and ledger the configuration whose
    # reading is the most accurate on validation (`ARM@up10` for the restricted ledger,
    # `ARM@up10-measured` where the measured ledger chose another; `unable`, with its reason,
    # where no configuration has a reading)
    uplink_levels: list = _key("list", "`[]`", "increasing fractions in (0, 1)")
    # bytes to target: this fraction of the reference arm's mean final-stage validation
    # accuracy (0: none)
    target_of_reference: float = _key("float", "`0`", "[0, 1]")
    # the retention rule's bar: keep ≥ this share of the reference arm's best validation
    # accuracy
    retention: float = _key("float", "`0.98`", "(0, 1]")
    # the reference arm (of the retention rule, the uplink levels and the target)
    retention_reference: str = _key("str", "the first arm", "an arm's name")
    # fresh seeds, disjoint from the workloads' search seeds, on which every chosen
    # configuration reruns, reading the test split once
    final: dict = _key("block", "required", "`seeds:` a list of seeds")
    # arms the leaderboard's paired differences are taken against
    compare_to: list = _key("list", "`[]`", "arm names")
    # a validation accuracy per workload for bytes to target, fixed in advance
    targets: dict = _key("mapping", "`{}`", "workload -> (0, 1]")
    # what one trial reserves (the sweep file's `trial:` block)
    trial: dict = _key("block")
    # rounds between a trial's checkpoints
    checkpoint_every: int = _key("int", "`5`", "≥ 0")
    # where results go; a relative one is a folder of dated studies below the results root
    results_dir: str = _key("str", "`studies/<name>`", "a path or a URI")
    # named overrides of this file (`--scale NAME`), e.g. a smoke test
    scales: dict = _key("mapping", "`{}`", "name -> dotted overrides")


SWEEP_KEYS = tuple(k for k in SweepFile.__dataclass_fields__ if k != "kind")
STUDY_KEYS = tuple(StudyFile.__dataclass_fields__)


def check_checkpoint_every(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            "checkpoint_every",
            f"{value!r}; allowed: rounds between trial checkpoints, an integer >= 0 (0: none)",
        )
    return value


def check_budget(field: str, client_rounds: int, cfg) -> None:
    """A client-round budget buys at least one round of the search's clients (or is 0: none);
    a smaller one would end every trial before its first report."""
    per = cfg.fl.clients_per_round
    if 0 < client_rounds < per:
        raise ConfigError(
            field,
            f"{client_rounds} client-rounds buy less than one round of a trial's "
            f"{per} clients (fl.clients_per_round); allowed: 0 (no budget) or at least {per}",
        )


def check_name(name: Any) -> str:
    """A sweep's or study's ``name``: letters, digits, ``-`` and ``_``."""
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError("name", f"{name!r}; allowed: letters, digits, '-' and '_'")
    return name


def check_fresh_seeds(path: str, seeds: Any, search_seeds: set[int], what: str) -> tuple:
    """The final stage's seeds: a non-empty list of seeds the search never used."""
    if not isinstance(seeds, list | tuple) or not seeds:
        raise ConfigError(path, f"{what} needs a list of fresh seeds")
    for v in seeds:
        check_seed(path, v)
    reused = sorted(set(seeds) & set(search_seeds))
    if reused:
        raise ConfigError(
            path, f"{reused} were used by the search; allowed: seeds the search never used"
        )
    return tuple(seeds)


def check_levels(value: Any) -> tuple[float, ...]:
    """``uplink_levels``: increasing fractions in (0, 1)."""
    value = value or []
    ok = isinstance(value, list | tuple) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < 1 for v in value
    )
    if not ok or list(value) != sorted(set(value)):
        raise ConfigError(
            "uplink_levels",
            f"{value!r}; allowed: increasing fractions in (0, 1) of dense FedAvg's uplink over "
            "the planned rounds, e.g. [0.1, 0.25, 0.5]",
        )
    return tuple(float(v) for v in value)


def check_span(path: str, value: Any) -> tuple[float, float, bool]:
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


def check_ablation(name: str, parent: Any, fixed: Any, block: dict, arms_raw: dict):
    """A study's ablation arm (:class:`.spec.Arm`): the searched arm it ablates and the
    fields it changes, no space."""
    searched = [k for k, b in arms_raw.items() if not (b or {}).get("ablation_of")]
    if parent not in searched:
        raise ConfigError(
            f"arms.{name}.ablation_of", f"{parent!r}; allowed: a searched arm: {searched}"
        )
    if "space" in block:
        raise ConfigError(f"arms.{name}.space", "an ablation is not searched; allowed: none")
    if not isinstance(fixed, dict) or not fixed:
        raise ConfigError(
            f"arms.{name}.fixed",
            "expected the dotted run-config fields the ablation changes, e.g. "
            "{method.dg.gate: 'off'}",
        )
    return Arm(name, dict(fixed), None, searched=False, ablation_of=str(parent))
