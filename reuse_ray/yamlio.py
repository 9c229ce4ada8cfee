"""Reading YAML the way a user expects: errors name the file (or the ``--set`` argument), the
line and the column; duplicate keys and empty files are errors, not silent surprises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import UserError


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in out:
            m = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (a second block would replace the first)", m
            )
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _where(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if mark is None:
        return problem
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def parse_yaml(text: str, source: str) -> Any:
    """``yaml.safe_load`` with duplicate keys rejected; errors name ``source`` and the place."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        raise UserError(f"{source}: not valid YAML at {_where(err)}") from None


def load_yaml_mapping(path: str | Path, what: str = "config") -> dict[str, Any]:
    """A YAML file that must hold a non-empty mapping (a run config or a sweep file)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{what} {str(p)!r} is a directory — give a YAML file")
    if not p.is_file():
        raise UserError(f"{what} not found: {str(p)!r}")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{what} {str(p)!r} cannot be read ({err})") from None
    data = parse_yaml(text, str(p))
    if data is None:
        raise UserError(f"{what} {str(p)!r} is empty — give at least one field")
    if not isinstance(data, dict):
        raise UserError(
            f"{what} {str(p)!r} must hold a mapping of fields, not a {type(data).__name__}"
        )
    return data
