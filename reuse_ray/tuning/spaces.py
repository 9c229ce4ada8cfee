"""Loading define-by-run search spaces from the ``search_spaces`` package."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from ..config import ConfigError


def available_spaces() -> list[str]:
    import search_spaces

    return sorted(m.name for m in pkgutil.iter_modules(search_spaces.__path__))


def load_space(name: str) -> Callable:
    """``search_spaces.<name>.space``; a clear error names the allowed spaces."""
    allowed = available_spaces()
    if name not in allowed:
        raise ConfigError("search.space", f"unknown space {name!r}; allowed: {', '.join(allowed)}")
    module = importlib.import_module(f"search_spaces.{name}")
    fn = getattr(module, "space", None)
    if not callable(fn):
        raise ConfigError("search.space", f"search_spaces/{name}.py defines no space(trial)")
    return fn
