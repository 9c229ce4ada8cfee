"""A data-only checkpoint format: nothing in a checkpoint file can run code when it is loaded.

A run's checkpoint (the driver's sums and rows, the server's ``w``, the method state and the
clients' states) is a tree of dataclasses, mappings, sequences, tensors, bytes and scalars. It is
written as one ``torch.save`` file holding a JSON document of the tree and the tensors it refers
to, and read back with ``torch.load(weights_only=True)``, which accepts tensors and plain
containers only. Dataclasses are rebuilt by name, and only from this package's modules or a
method module already loaded for the run (``method.module``); any other name is refused. The
format carries a version, checked on load.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import math
import sys
from typing import Any

import numpy as np

from .errors import UserError
from .lazy import torch

FORMAT = "reuse_ray.checkpoint/1"


class CheckpointError(UserError):
    """A checkpoint file is not one this version wrote, or names a class it may not build."""


def _allowed_module(name: str) -> bool:
    from .algorithms.registry import FILE_MODULE_PREFIX, method_names

    if name == "reuse_ray" or name.startswith("reuse_ray."):
        return True
    if name.startswith(FILE_MODULE_PREFIX) and name in sys.modules:
        return True
    from .algorithms.registry import get_method

    return any(get_method(m).module == name for m in method_names())


def _encode(obj: Any, tensors: list[torch.Tensor]) -> Any:
    from .algorithms.table import ClientTable

    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"__float__": repr(obj)}
    if isinstance(obj, torch.Tensor):
        tensors.append(obj.detach().cpu().clone())
        return {"__tensor__": len(tensors) - 1}
    if isinstance(obj, np.ndarray):
        tensors.append(torch.from_numpy(np.ascontiguousarray(obj)).clone())
        return {"__ndarray__": len(tensors) - 1}
    if isinstance(obj, np.generic):
        return _encode(obj.item(), tensors)
    if isinstance(obj, bytes | bytearray):
        data = bytearray(obj)
        tensors.append(
            torch.frombuffer(data, dtype=torch.uint8).clone()
            if data
            else torch.zeros(0, dtype=torch.uint8)
        )
        return {"__bytes__": len(tensors) - 1}
    if isinstance(obj, ClientTable):
        return {"__table__": _encode(obj.values_dict(), tensors)}
    if isinstance(obj, dict):
        return {"__dict__": [[_encode(k, tensors), _encode(v, tensors)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, tensors) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, tensors) for v in obj]
    if isinstance(obj, frozenset | set):
        kind = "__frozenset__" if isinstance(obj, frozenset) else "__set__"
        return {kind: [_encode(v, tensors) for v in sorted(obj, key=repr)]}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        return {
            "__dataclass__": f"{cls.__module__}:{cls.__qualname__}",
            "fields": {
                f.name: _encode(getattr(obj, f.name), tensors) for f in dataclasses.fields(obj)
            },
        }
    raise CheckpointError(f"cannot store a {type(obj).__name__} in a checkpoint")


def _class(ref: str) -> type:
    module, _, qualname = ref.partition(":")
    if not _allowed_module(module):
        raise CheckpointError(f"checkpoint names class {ref!r} outside reuse_ray; refused")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise CheckpointError(f"checkpoint names {ref!r}, which is not a dataclass; refused")
    return obj


def _decode(node: Any, tensors: list[torch.Tensor]) -> Any:
    from .algorithms.table import ClientTable

    if isinstance(node, list):
        return [_decode(v, tensors) for v in node]
    if not isinstance(node, dict):
        return node
    if "__tensor__" in node:
        return tensors[node["__tensor__"]]
    if "__ndarray__" in node:
        return tensors[node["__ndarray__"]].numpy()
    if "__bytes__" in node:
        return tensors[node["__bytes__"]].numpy().tobytes()
    if "__float__" in node:
        return float(node["__float__"])
    if "__table__" in node:
        return ClientTable.from_values(_decode(node["__table__"], tensors))
    if "__dict__" in node:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in node["__dict__"]}
    if "__tuple__" in node:
        return tuple(_decode(v, tensors) for v in node["__tuple__"])
    if "__frozenset__" in node:
        return frozenset(_decode(v, tensors) for v in node["__frozenset__"])
    if "__set__" in node:
        return {_decode(v, tensors) for v in node["__set__"]}
    if "__dataclass__" in node:
        cls = _class(node["__dataclass__"])
        obj = object.__new__(cls)  # no __init__: the values were valid when they were saved
        names = {f.name for f in dataclasses.fields(cls)}
        for name, value in node["fields"].items():
            if name not in names:
                raise CheckpointError(f"{node['__dataclass__']} has no field {name!r}")
            object.__setattr__(obj, name, _decode(value, tensors))
        return obj
    raise CheckpointError(f"unknown checkpoint node {sorted(node)!r}")


def dumps(obj: Any) -> bytes:
    """The checkpoint bytes of ``obj``."""
    tensors: list[torch.Tensor] = []
    tree = _encode(obj, tensors)
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "tree": json.dumps(tree), "tensors": tensors}, buf)
    return buf.getvalue()


def loads(blob: bytes) -> Any:
    """Inverse of :func:`dumps`; never unpickles anything but tensors and plain containers."""
    try:
        doc = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    except Exception as err:  # noqa: BLE001 - any failure: not a checkpoint this version wrote
        raise CheckpointError(
            f"not a reuse_ray checkpoint ({type(err).__name__}: {str(err).splitlines()[0][:200]})"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise CheckpointError(f"checkpoint format {found!r}; this version reads {FORMAT!r}")
    return _decode(json.loads(doc["tree"]), list(doc["tensors"]))
