"""Reading run configs: YAML files, ``--set a.b=value`` overrides and plain mappings into the
frozen dataclasses of :mod:`reuse_ray.config`, with errors that name the dotted field. A method
block's owner is looked up in the registry, which imports a ``method.module`` first."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

from .checks import FLOAT32_MAX, ConfigError
from .config import MethodConfig, RunConfig, field_types
from .yamlio import load_yaml_mapping, parse_yaml


def load_method_module(ref: str) -> None:
    from .algorithms.registry import load_method_module as load

    load(ref)


def _spec(name: str):
    from .algorithms.registry import get_method

    return get_method(name)


def method_from_dict(data: dict[str, Any], path: str = "method") -> MethodConfig:
    """Build :class:`MethodConfig` from YAML: the shared fields and the named method's block."""
    from .algorithms.registry import config_blocks

    data = dict(data)
    shared = {f.name for f in dataclasses.fields(MethodConfig)} - {"params"}
    if "params" in data:
        raise ConfigError(f"{path}.params", "not a YAML field; give the method's own block")
    if data.get("module") is not None:
        if not isinstance(data["module"], str):
            raise ConfigError(f"{path}.module", f"expected a string, got {data['module']!r}")
        try:
            load_method_module(data["module"])
        except ConfigError as err:
            raise err.prefixed(path) from None
    name = data.get("name", "fedavg")
    if not isinstance(name, str):
        raise ConfigError(f"{path}.name", f"expected a string, got {name!r}")
    try:
        spec = _spec(name)
    except KeyError as err:
        raise ConfigError(f"{path}.name", str(err.args[0])) from None
    blocks = config_blocks()
    params = None
    for key in list(data):
        if key in shared:
            continue
        if key == spec.block:
            block = data.pop(key)
            if block is None:
                block = {}
            if not isinstance(block, dict):
                raise ConfigError(f"{path}.{key}", f"expected a mapping of fields, got {block!r}")
            params = from_dict(spec.config, block, f"{path}.{key}")
        elif key in blocks:
            raise ConfigError(
                f"{path}.{key}",
                f"a block of method(s) {', '.join(_block_owners(key))}, but {path}.name is "
                f"{name!r}; remove it"
                + (f" (this method's block is {path}.{spec.block})" if spec.block else ""),
            )
        else:
            allowed = sorted(shared) + ([spec.block] if spec.block else [])
            raise ConfigError(f"{path}.{key}", f"unknown field; allowed: {', '.join(allowed)}")
    hints = field_types(MethodConfig)
    kwargs = {k: _coerce(f"{path}.{k}", hints[k], v) for k, v in data.items() if k in shared}
    try:
        return MethodConfig(**kwargs, params=params)
    except ConfigError as err:
        if not err.field.startswith(path + "."):
            raise err.prefixed(path) from None
        raise


def _block_owners(block: str) -> list[str]:
    from .algorithms.registry import block_owners

    return block_owners(block)


def _coerce(path: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(path, inner[0], value)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping of fields, got {value!r}")
        if tp is MethodConfig:
            return method_from_dict(value, path)
        return from_dict(tp, value, path)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(path, f"expected a list, got {value!r}")
        return tuple(_coerce(path, args[0], v) for v in value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {value!r}")
        return value
    if tp is int:  # an integral float such as 2.0 is refused too: say 2
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            number = None
            if isinstance(value, str):
                try:
                    number = float(value)  # YAML reads "1e-4" without a dot as a string
                except ValueError:
                    pass
            if number is None:
                raise ConfigError(path, f"expected a number, got {value!r}")
            value = number
        if not math.isfinite(value):
            raise ConfigError(path, f"{value!r} is not a finite number; allowed: finite numbers")
        if abs(value) > FLOAT32_MAX:  # it meets float32 tensors (learning rates, weights …)
            raise ConfigError(
                path,
                f"{value!r} is beyond float32's range; allowed: numbers of "
                f"magnitude at most {FLOAT32_MAX:.4g}",
            )
        return float(value)
    if tp is str:
        if isinstance(value, bool):
            raise ConfigError(
                path,
                f"expected a string, got {value!r}; YAML reads unquoted off/on/yes/no as "
                "booleans, so quote the word (e.g. 'off')",
            )
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {path}")


T = typing.TypeVar("T")


def from_dict(cls: type[T], data: dict[str, Any], path: str = "") -> T:
    """Build a config dataclass from a plain mapping, rejecting unknown fields."""
    hints = field_types(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{path}.{key}" if path else str(key)
        if key not in names:
            raise ConfigError(full, f"unknown field; allowed: {', '.join(names)}")
        kwargs[key] = _coerce(full, hints[key], value)
    try:
        return cls(**kwargs)
    except ConfigError as err:
        if path and not err.field.startswith(path + "."):
            raise err.prefixed(path) from None
        raise


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c = value`` inside nested dicts, creating levels as needed."""
    parts = dotted.split(".")
    cur = data
    for p in parts[:-1]:
        nxt = cur.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(dotted, f"'{p}' is not a block of fields")
        cur = nxt
    cur[parts[-1]] = value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set a.b=value`` overrides; values are parsed with yaml.safe_load."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "override must look like a.b=value")
        key, raw = item.split("=", 1)
        if not all(part.strip() for part in key.split(".")):
            raise ConfigError(
                item, "override must look like a.b=value (a field name on each side of every dot)"
            )
        value = parse_yaml(raw, f"--set {item}") if raw.strip() else ""
        if isinstance(value, bool) and raw.strip().lower() not in ("true", "false"):
            value = raw.strip()  # off/on/yes/no on the command line mean the word
        set_dotted(data, key.strip(), value)
    return data


def load_config_dict(path: str | Path) -> dict[str, Any]:
    """Read a run config YAML; a sweep file's ``base:`` block is the run config (a study file
    is refused: it names several)."""
    raw = load_yaml_mapping(path, "config file")
    if raw.get("kind") == "study":
        raise ConfigError(
            "kind",
            f"{path} is a study file (several workloads and arms), not one run; run the study "
            f"with `reuse-ray sweep {path}`, or one run from a run config or a sweep file",
        )
    if "base" in raw:
        from .tuning.files import SWEEP_KEYS  # the sweep file's keys, documented there

        stray = sorted(k for k in raw if k not in SWEEP_KEYS)
        if stray:
            raise ConfigError(
                stray[0],
                f"{path} is a sweep file (it has base:), so run-config fields belong "
                "under base:; allowed at its top: " + ", ".join(SWEEP_KEYS),
            )
        base = raw["base"] or {}
        if not isinstance(base, dict):
            raise ConfigError("base", "expected a mapping of run-config fields")
        return dict(base)
    return raw


def load_run_config(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Load, override and validate a run config."""
    data = load_config_dict(path)
    apply_overrides(data, overrides or [])
    return from_dict(RunConfig, data)


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


def load_scaled(path, overrides: list[str] | None, scale: str | None, what: str) -> dict[str, Any]:
    """A sweep or study file's mapping with its named scale and ``a.b=value`` overrides
    (dotted from the file's root) applied, not yet validated."""
    raw = load_yaml_mapping(path, what)
    apply_scale(raw, scale)
    apply_overrides(raw, overrides or [])
    return raw
