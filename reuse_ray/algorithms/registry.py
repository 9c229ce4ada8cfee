"""The method registry: every table of methods derives from it (design: Engines).

A method module registers a builder with :func:`register`, naming its config block (the
frozen dataclass read from ``method.<block>`` of a run config), its define-by-run search space and
what its uplink accepts. ``reuse-ray`` then knows the method everywhere: config validation, the
Parquet schema's ``cfg.method.<block>.*`` columns, sweeps and the engine. A method outside the
package is a module named by ``method.module`` (a dotted name or a ``.py`` path), imported before
its name is looked up (see ``examples/my_method.py``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUILTIN_MODULES = (
    "fedavg",
    "fedadam",
    "dg_fedreuse",
    "fedluar",
    "fedsteer",
    "mifa",
    "fedstale",
    "scaffold",
    "ef21",
    "laq",
)


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: how to build it and what its config looks like."""

    name: str
    build: Callable[[Any, Any], Any]  # (its config block or None, MethodEnv) -> Method
    config: type | None = None  # frozen dataclass of the method's own knobs
    block: str | None = None  # key of that block under ``method:`` (default: the name)
    space: Callable | None = None  # define-by-run Optuna space: space(trial) -> dict | None
    sparse_uplink: bool = True  # accepts method.topk_ratio < 1
    error_feedback: bool = False  # Fed-EF may wrap its Top-K uplink
    module: str = ""


WORKDIR_ENV = "REUSE_RAY_WORKDIR"  # set in a trial: the folder its driver ran in
FILE_MODULE_PREFIX = "reuse_ray_method_"  # module names of methods loaded from .py paths
_REGISTRY: dict[str, MethodSpec] = {}
_loaded = False


def register(
    name: str,
    *,
    config: type | None = None,
    block: str | None = None,
    space: Callable | None = None,
    sparse_uplink: bool = True,
    error_feedback: bool = False,
) -> Callable:
    """Decorator for a builder ``build(params, env) -> Method`` of the method ``name``."""

    def wrap(build: Callable) -> Callable:
        _REGISTRY[name] = MethodSpec(
            name,
            build,
            config,
            (block or name) if config is not None else None,
            space,
            sparse_uplink,
            error_feedback,
            build.__module__,
        )
        return build

    return wrap


def load_builtins() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for mod in BUILTIN_MODULES:
            importlib.import_module(f"reuse_ray.algorithms.{mod}")


def load_module(ref: str) -> str:
    """Import a method module by dotted name or ``.py`` path; returns its module name."""
    if ref.endswith(".py"):
        path = Path(ref).expanduser()
        # a trial runs in Tune's trial folder: a relative path is the driver's (its folder)
        if not path.is_absolute() and not path.is_file() and os.environ.get(WORKDIR_ENV):
            path = Path(os.environ[WORKDIR_ENV]) / path
        path = path.resolve()
        if not path.is_file():
            raise FileNotFoundError(f"method.module: no file {ref}")
        name = f"{FILE_MODULE_PREFIX}{path.stem}"
        held = sys.modules.get(name)
        if held is not None and getattr(held, "__file__", None) != str(path):
            # another file of the same name is loaded: this one gets a name of its own
            digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
            name = f"{name}_{digest}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
        return name
    importlib.import_module(ref)
    return ref


def load_method_module(ref: str) -> tuple[str, ...]:
    """:func:`load_module` for a config's ``method.module``; returns the names of the methods it
    registers. A missing file, a module that cannot be found and a module that registers no
    method are a :class:`~reuse_ray.checks.ConfigError` naming the field; a syntax error or an
    exception in the user's own code is a :class:`~reuse_ray.errors.UserCodeError` naming the
    file and line, with the user's frames (it is the user's error, not a bug of reuse_ray)."""
    from ..checks import ConfigError

    try:
        name = load_module(ref)
    except FileNotFoundError as err:
        raise ConfigError("module", str(err).split(": ", 1)[-1]) from None
    except SyntaxError as err:
        where = f"{err.filename}, line {err.lineno}"
        raise ConfigError("module", f"{where}: syntax error: {err.msg}") from None
    except Exception as err:  # noqa: BLE001 - the user's code raised: say where, not "a bug"
        frames = _user_frames(err)
        if not frames:  # nothing of the user's ran: the module itself is not there
            raise ConfigError("module", f"cannot import {ref!r}: {err}") from None
        last = frames[-1]
        from ..errors import UserCodeError

        shown = "".join(traceback.format_list(frames)).rstrip()
        raise UserCodeError(
            f"method.module {ref!r} raised {type(err).__name__}: {err} "
            f"({last.filename}, line {last.lineno}); your code's frames follow",
            shown,
        ) from None
    names = tuple(
        s.name for s in _REGISTRY.values() if s.module == name or s.module.startswith(name + ".")
    )
    if not names:
        raise ConfigError(
            "module",
            f"{ref!r} registers no method — decorate its builder with "
            "@register('<name>', ...) from reuse_ray.algorithms (see examples/my_method.py)",
        )
    return names


def _user_frames(err: BaseException) -> list[traceback.FrameSummary]:
    """The frames of ``err``'s traceback in the user's code: neither reuse_ray's nor the
    standard library's (the import machinery)."""
    import sysconfig

    ours = (str(Path(__file__).resolve().parents[1]), sysconfig.get_paths()["stdlib"], "<frozen ")
    return [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith(ours)]


def _ordered() -> list[MethodSpec]:
    """Built-in methods in BUILTIN_MODULES order (whatever was imported first), then others in
    registration order: one order in every process, so every Parquet schema agrees."""
    load_builtins()
    rank = {f"reuse_ray.algorithms.{m}": k for k, m in enumerate(BUILTIN_MODULES)}
    specs = list(_REGISTRY.values())
    return sorted(specs, key=lambda s: rank.get(s.module, len(rank)))


def method_names() -> tuple[str, ...]:
    return tuple(s.name for s in _ordered())


def get_method(name: str) -> MethodSpec:
    """The registered method ``name``; KeyError lists the allowed names."""
    load_builtins()
    if name not in _REGISTRY:
        raise KeyError(f"unknown method {name!r}; allowed: {', '.join(method_names())}")
    return _REGISTRY[name]


def config_blocks() -> dict[str, type]:
    """block name -> config class, over every registered method (shared blocks once)."""
    return {s.block: s.config for s in _ordered() if s.block is not None}


def block_owners(block: str) -> list[str]:
    return [s.name for s in _ordered() if s.block == block]


def spaces() -> dict[str, Callable]:
    """method name -> its define-by-run search space."""
    return {s.name: s.space for s in _ordered() if s.space is not None}
