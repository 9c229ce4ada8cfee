"""torch, imported on first use by the modules a run's driver imports.

The Ray engine's driver loads the config (which imports every method module: they own their
config blocks), plans rounds and writes Parquet; it never computes with torch. The method
modules, the codecs, the layout and the records therefore name torch through :data:`torch`, a
stand-in that imports the real module on the first attribute read (inside a function: at
import time these modules only annotate with it). The driver process then holds no torch
(about 0.45 GB of PSS on W, ``benchmarks/engine_overhead.py``), while the workers and the
local engine, which compute, import it as soon as they touch a tensor. Modules that only
workers import (training, models, the worker) import torch as usual.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class LazyModule(types.ModuleType):
    """A module imported when one of its attributes is first read."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_module"] = None

    def _load(self) -> types.ModuleType:
        module = self.__dict__["_module"]
        if module is None:
            module = importlib.import_module(self.__name__)
            self.__dict__["_module"] = module
        return module

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._load(), attr)

    def __dir__(self) -> list[str]:
        return dir(self._load())

    def __repr__(self) -> str:
        state = "imported" if self.__dict__["_module"] is not None else "not imported yet"
        return f"<lazy module {self.__name__!r} ({state})>"


torch = LazyModule("torch")
nn = LazyModule("torch.nn")
