"""The checks every config block runs on construction, public so a method module's own block
(``reuse_ray/algorithms/<method>.py``, a user's ``method.module``) uses the same ones: each names
the dotted field and what is allowed (:class:`ConfigError`)."""

from __future__ import annotations

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
