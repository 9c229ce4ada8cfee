"""Define-by-run search spaces: each method registers its own; the ``search_spaces`` package
holds any others (a space that is not one method's)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from ..config import ConfigError


def available_spaces() -> list[str]:
    """Every method's registered space, and the modules of the ``search_spaces`` package."""
    import search_spaces

    from ..algorithms.registry import spaces

    extra = [m.name for m in pkgutil.iter_modules(search_spaces.__path__)]
    return sorted(set(spaces()) | set(extra))


def load_space(name: str) -> Callable:
    """A method's registered space, else ``search_spaces.<name>.space``; a clear error names
    the allowed spaces."""
    from ..algorithms.registry import spaces

    registered = spaces()
    if name in registered:
        return registered[name]
    allowed = available_spaces()
    if name not in allowed:
        raise ConfigError("search.space", f"unknown space {name!r}; allowed: {', '.join(allowed)}")
    module = importlib.import_module(f"search_spaces.{name}")
    fn = getattr(module, "space", None)
    if not callable(fn):
        raise ConfigError("search.space", f"search_spaces/{name}.py defines no space(trial)")
    return fn
