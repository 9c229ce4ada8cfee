"""Field checks of sweep and study files: each names the field and what is allowed."""

from __future__ import annotations

from typing import Any

from ..checks import MAX_SEED, ConfigError
from ..configio import apply_overrides


def check_seed(path: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ConfigError(path, f"{value!r}; allowed: an integer in [0, 2**63 - 1]")


def check_checkpoint_every(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            "checkpoint_every",
            f"{value!r}; allowed: rounds between trial checkpoints, an integer >= 0 (0: none)",
        )
    return value


def deep_copy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: deep_copy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [deep_copy(v) for v in d]
    return d


def take_fields(block: dict[str, Any], path: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise ConfigError(path, "expected a mapping of fields")
    for k in block:
        if k not in allowed:
            name = k if path == "<root>" else f"{path}.{k}"
            raise ConfigError(name, f"unknown field; allowed: {', '.join(allowed)}")
    return block


def check_positive(path: str, value: Any, integer: bool = False, zero: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    ok = ok and (value >= 0 if zero else value > 0) and (not integer or float(value).is_integer())
    if not ok:
        kind = "an integer" if integer else "a number"
        raise ConfigError(path, f"{value!r}; allowed: {kind} {'>= 0' if zero else '> 0'}")


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


def apply_scale(raw: dict[str, Any], scale: str | None) -> None:
    """A sweep or study file's named scale (``scales.<name>``: dotted overrides of the file, e.g.
    a smoke test), applied in place; the ``scales`` block itself is removed. Unknown names are
    one line naming the file's scales."""
    import json

    scales = raw.pop("scales", None) or {}
    if not isinstance(scales, dict):
        raise ConfigError("scales", "expected a mapping of scale name -> dotted overrides")
    if scale is None:
        return
    if not scales:
        raise ConfigError(
            "--scale", f"{scale!r}: the file names no scales (a scales: block of name -> overrides)"
        )
    if scale not in scales:
        raise ConfigError("--scale", f"{scale!r}; allowed: {', '.join(scales)}")
    block = scales[scale]
    if not isinstance(block, dict):
        raise ConfigError(f"scales.{scale}", "expected a mapping of dotted overrides")
    apply_overrides(raw, [f"{k}={json.dumps(v)}" for k, v in block.items()])


def check_name(name: Any) -> str:
    """A sweep's or study's ``name``: letters, digits, ``-`` and ``_``."""
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError("name", f"{name!r}; allowed: letters, digits, '-' and '_'")
    return name


def check_share(path: str, value: Any) -> float:
    """A share in (0, 1], such as a retention bar or a validation target."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(path, f"{value!r}; allowed: a number in (0, 1]")
    return float(value)


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


def read_file(path, overrides: list[str] | None, scale: str | None, what: str) -> dict[str, Any]:
    """A sweep or study file's mapping with its named scale and ``a.b=value`` overrides
    (dotted from the file's root) applied, not yet validated."""
    from ..yamlio import load_yaml_mapping

    raw = load_yaml_mapping(path, what)
    apply_scale(raw, scale)
    apply_overrides(raw, overrides or [])
    return raw


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


def check_fraction(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(path, f"{value!r}; allowed: a number in [0, 1] (0: none)")
    return float(value)


def check_range(path: str, value: Any) -> tuple[float, float, bool]:
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
    from .spec import Arm

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
