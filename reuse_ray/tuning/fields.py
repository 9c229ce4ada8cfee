"""Field checks of sweep and study files: each names the field and what is allowed."""

from __future__ import annotations

from typing import Any

from ..config import MAX_SEED, ConfigError


def _seed(path: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ConfigError(path, f"{value!r}; allowed: an integer in [0, 2**63 - 1]")


def _checkpoint_every(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            "checkpoint_every",
            f"{value!r}; allowed: rounds between trial checkpoints, an integer >= 0 (0: none)",
        )
    return value


def _deep_copy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deep_copy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deep_copy(v) for v in d]
    return d


def _take(block: dict[str, Any], path: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise ConfigError(path, "expected a mapping of fields")
    for k in block:
        if k not in allowed:
            name = k if path == "<root>" else f"{path}.{k}"
            raise ConfigError(name, f"unknown field; allowed: {', '.join(allowed)}")
    return block


def _choice(path: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(path, f"unknown value {value!r}; allowed: {', '.join(allowed)}")


def _positive(path: str, value: Any, integer: bool = False, zero: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    ok = ok and (value >= 0 if zero else value > 0) and (not integer or float(value).is_integer())
    if not ok:
        kind = "an integer" if integer else "a number"
        raise ConfigError(path, f"{value!r}; allowed: {kind} {'>= 0' if zero else '> 0'}")


__all__ = ["_checkpoint_every", "_choice", "_deep_copy", "_positive", "_seed", "_take"]


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
