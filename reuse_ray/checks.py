"""The checks every config block runs on construction, public so a method module's own block
(``reuse_ray/algorithms/<method>.py``, a user's ``method.module``) uses the same ones: each names
the dotted field and what is allowed (:class:`ConfigError`)."""

from __future__ import annotations

from typing import Any

from .errors import UserError

MAX_SEED = 2**63 - 1  # seeds are int64 in Parquet and in numpy's SeedSequence entropy


class ConfigError(UserError):
    """A configuration value is unknown, of the wrong type or out of range."""

    def __init__(self, field_path: str, message: str):
        self.field = field_path
        super().__init__(f"config field '{field_path}': {message}")

    def prefixed(self, prefix: str) -> ConfigError:
        inner = str(self).split(": ", 1)[1]
        return ConfigError(f"{prefix}.{self.field}", inner)


# --------------------------------------------------------------------------- checks


def check_range(
    name: str,
    value: float,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> None:
    ok = True
    if lo is not None:
        ok &= value > lo if lo_open else value >= lo
    if hi is not None:
        ok &= value < hi if hi_open else value <= hi
    if not ok:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        lo_s = "-inf" if lo is None else repr(lo)
        hi_s = "inf" if hi is None else repr(hi)
        raise ConfigError(name, f"{value!r} is out of range; allowed: {left}{lo_s}, {hi_s}{right}")


FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32 (torch.finfo(torch.float32).max)

RAY_ADDRESS_FORMS = "auto, local, host:port (a head node's GCS) or ray://host[:port] (Ray Client)"


def ray_address_problem(address: str) -> str | None:
    """Why ``address`` is not one Ray can connect to (None when it is): ``auto``, ``local``,
    ``host:port`` or ``ray://host[:port]``, the forms ``ray.init`` takes."""
    if address in ("auto", "local"):
        return None
    if address.startswith(("http://", "https://")):
        return (
            f"{address!r} is a dashboard address (what `ray job submit --address` takes); "
            f"allowed here: {RAY_ADDRESS_FORMS}"
        )
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep:  # no port: only a Ray Client address may omit it
        host, port = rest, None
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 host in brackets
    if not host or any(c in host for c in "/ ?#@") or (port is None and not client):
        return f"{address!r}; allowed: {RAY_ADDRESS_FORMS}"
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        return f"{address!r}: port {port!r} is not a number in 1..65535"
    return None


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(name, f"unknown value {value!r}; allowed: {', '.join(allowed)}")


# ------------------------------------------------- checks of experiment files' fields


def check_seed(path: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ConfigError(path, f"{value!r}; allowed: an integer in [0, 2**63 - 1]")


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


def check_share(path: str, value: Any) -> float:
    """A share in (0, 1], such as a retention bar or a validation target."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(path, f"{value!r}; allowed: a number in (0, 1]")
    return float(value)


def check_fraction(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(path, f"{value!r}; allowed: a number in [0, 1] (0: none)")
    return float(value)
