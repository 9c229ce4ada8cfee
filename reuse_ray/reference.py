"""``docs/reference.md``, generated from the code: every field of a run config (each block and
each method's own block), of a sweep file and of a study file, and every column of the Parquet
tables — its type, default, allowed values and one line of meaning.

The meaning is the comment the source gives the field (on its line, else the comment lines just
above it); allowed values come from the validators (``check_choice`` / ``check_range`` in a
block's ``__post_init__``). ``python -m reuse_ray.reference > docs/reference.md`` writes the
page; a test fails when the page is stale or a field or column has no meaning.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap
import typing
from typing import Any


def _comments(cls_or_source: Any) -> dict[str, str]:
    """name -> the comment of each ``name: type = …`` line of a class body (or of a list of
    ``pa.field("name", …)`` lines): the trailing comment, else the comment lines above."""
    src = cls_or_source if isinstance(cls_or_source, str) else inspect.getsource(cls_or_source)
    src = textwrap.dedent(src)
    lines = src.splitlines()
    trailing = {i: _trailing(line) for i, line in enumerate(lines, 1)}
    out: dict[str, str] = {}
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        name = None
        if stripped.startswith('pa.field("'):
            name = stripped.split('"')[1]
        elif ":" in stripped and not stripped.startswith(("#", "def ", "class ", '"', "@")):
            head = stripped.split(":")[0]
            if head.isidentifier() and len(line) - len(line.lstrip()) == 4:
                name = head
        if name is None or name in out:
            continue
        text = trailing.get(i, "") if not line.lstrip().startswith("#") else ""
        k = i
        # a trailing comment whose parenthesis stays open goes on in the comment lines below
        while text.count("(") > text.count(")") and k < len(lines):
            if not lines[k].strip().startswith("#"):
                break
            text += " " + lines[k].strip().lstrip("#").strip()
            k += 1
        if not text:  # the comment block just above
            above, k = [], i - 1
            while k >= 1 and lines[k - 1].strip().startswith("#"):
                above.insert(0, lines[k - 1].strip().lstrip("#").strip())
                k -= 1
            text = " ".join(above)
        out[name] = text
    return out


def _trailing(line: str) -> str:
    """The comment at the end of a code line ("" if none): a ``#`` outside string quotes."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[k + 1 :].strip() if line[:k].strip() else ""
    return ""


def _allowed(cls: type) -> dict[str, str]:
    """field -> allowed values, read from ``check_choice`` / ``check_range`` calls in the
    class's validators (``__post_init__`` and the checks it calls; a dotted name such as
    ``search.searcher`` is the field ``searcher``)."""
    if getattr(cls, "__post_init__", None) is None:
        return {}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    module = sys.modules[cls.__module__]
    out = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        args = node.args
        if not args or not isinstance(args[0], ast.Constant):
            continue
        name = str(args[0].value).rsplit(".", 1)[-1]
        if name in out:
            continue
        if node.func.id == "check_choice" and len(args) >= 3:
            try:
                values = eval(compile(ast.Expression(args[2]), "<ref>", "eval"), vars(module))
            except Exception:  # noqa: BLE001 - a computed choice list: no entry
                continue
            out[name] = ", ".join(f"`{v}`" for v in values)
        elif node.func.id == "check_range" and len(args) >= 3:
            lo = ast.unparse(args[2])
            hi = ast.unparse(args[3]) if len(args) >= 4 else None
            kw = {k.arg: ast.unparse(k.value) for k in node.keywords}
            left = "(" if kw.get("lo_open") == "True" else "["
            right = ")" if kw.get("hi_open") == "True" else "]"
            out[name] = f"{left}{lo}, {hi}{right}" if hi else f"≥ {lo}"
    return out


def _values(text: str, names: dict[str, Any], prefix: str = "") -> str:
    """``text`` with each constant it names written out: a tuple, list or mapping of names as
    its values (its keys), a number as itself, ``self.x`` as the field ``x``."""
    import re

    def value(m: re.Match) -> str:
        word = m.group(0)
        if word.startswith("self."):
            return f"`{prefix}{word[5:]}`"
        v = names.get(word)
        if isinstance(v, dict | tuple | list) and v and all(isinstance(x, str) for x in v):
            return ", ".join(f"`{x}`" for x in v)
        if isinstance(v, int) and v > 2**31 and (v + 1).bit_count() == 1:
            return f"2^{(v + 1).bit_length() - 1} − 1"
        return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else word

    return re.sub(r"\bself\.[a-z_][a-z_0-9]*\b|\b[A-Z][A-Z0-9_]{2,}\b", value, text)


def _type(tp: Any) -> str:
    text = tp if isinstance(tp, str) else getattr(tp, "__name__", str(tp))
    return str(text).replace("typing.", "")


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "(block)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def field_rows(cls: type, prefix: str = "") -> list[dict[str, str]]:
    """One row per field of a frozen config dataclass (nested blocks: their own rows; a field
    that is no key of its own in YAML, ``metadata={"yaml": False}``, none), constants written
    out as their values."""
    meaning, allowed = _comments(cls), _allowed(cls)
    names = vars(sys.modules[cls.__module__])
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if f.name.startswith("_") or f.metadata.get("yaml") is False:
            continue
        tp = hints.get(f.name, f.type)
        if dataclasses.is_dataclass(tp):
            continue  # a block: its own table
        doc = f.metadata  # a file's key (tuning.files.SweepFile) gives its own type and default
        rows.append(
            {
                "field": f"{prefix}{f.name}",
                "type": doc.get("type") or _type(f.type),
                "default": doc["default"] if "default" in doc else _default(f),
                "allowed": doc.get("allowed") or _values(allowed.get(f.name, ""), names, prefix),
                "meaning": _values(meaning.get(f.name, ""), names, prefix),
            }
        )
    return rows


def _table(rows: list[dict[str, str]], cols: tuple[str, ...]) -> str:
    def cell(v: str) -> str:
        return str(v).replace("|", "\\|")

    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)
    return "\n".join([head, *("| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows)])


FIELD_COLS = ("field", "type", "default", "allowed", "meaning")


def run_config_sections() -> list[tuple[str, list[dict[str, str]]]]:
    """(title, rows) of every block of a run config, then of every registered method's own
    block (``method.<block>``)."""
    from .algorithms.registry import get_method, method_names
    from .config import RunConfig

    out = [("Top level", field_rows(RunConfig))]
    hints = typing.get_type_hints(RunConfig)
    ours = [n for n in method_names() if get_method(n).module.startswith("reuse_ray.")]
    for f in dataclasses.fields(RunConfig):
        block = hints[f.name]
        if dataclasses.is_dataclass(block):
            rows = field_rows(block, f"{f.name}.")
            for row in rows:
                if row["field"] == "method.name":  # checked against the registry, not a list
                    row["allowed"] = ", ".join(f"`{n}`" for n in ours)
            out.append((f"`{f.name}:`", rows))
    owners: dict[str, list[str]] = {}
    classes: dict[str, type] = {}
    for name in ours:  # a user's method (method.module) is not the package's to document
        m = get_method(name)
        cls, key = m.config, m.block or m.name
        if cls is None or key is None:
            continue
        owners.setdefault(key, []).append(name)
        classes.setdefault(key, cls)
    for key, names in owners.items():
        title = f"`method.{key}:` ({', '.join(names)})"
        out.append((title, field_rows(classes[key], f"method.{key}.")))
    return out


def column_sections() -> list[tuple[str, list[dict[str, str]]]]:
    """(table, rows) of every Parquet table's declared columns, with the schema's comments."""
    from .algorithms import api
    from .results import schema

    src = inspect.getsource(schema)
    names = {**vars(api), **vars(schema)}
    meaning = _comments(src)
    out = []
    for table, fields in (
        ("runs", schema.RUN_COLUMNS),
        ("rounds", list(schema.ROUNDS)),
        ("client_events", list(schema.CLIENT_EVENTS)),
        ("clients", list(schema.CLIENTS)),
        ("levels", list(schema.LEVELS)),
        ("trials", list(schema.TRIALS)),
    ):
        section = _section_source(src, table)
        local = _comments(section) if section else {}
        rows = [
            {
                "column": f.name,
                "type": str(f.type),
                "meaning": _values(local.get(f.name) or meaning.get(f.name, ""), names),
            }
            for f in fields
        ]
        out.append((table, rows))
    return out


def _section_source(src: str, table: str) -> str:
    """The schema module's source of one table's field list (a column's meaning is read there
    first: ``seed`` means the same in every table, ``status`` does not)."""
    marker = {
        "runs": "RUN_COLUMNS = [",
        "rounds": "ROUNDS = pa.schema(",
        "client_events": "CLIENT_EVENTS = pa.schema(",
        "clients": "CLIENTS = pa.schema(",
        "levels": "LEVELS = pa.schema(",
        "trials": "TRIALS = pa.schema(",
    }[table]
    start = src.find(marker)
    if start < 0:
        return ""
    # a list of fields ends at its closing bracket, a pa.schema([...]) call at its parenthesis
    end = src.find("\n)" if marker.endswith("(") else "\n]", start)
    return textwrap.indent(src[start:end], "    ") if end > 0 else ""


def spec_sections() -> list[tuple[str, str, list[dict[str, str]]]]:
    """(title, intro, rows) of the sweep file and the study file: their top-level keys
    (:class:`~reuse_ray.tuning.files.SweepFile`, :class:`~reuse_ray.tuning.files.StudyFile`),
    then a sweep file's ``search:``, ``trial:`` and ``final:`` blocks."""
    from .tuning import files, spec

    sweep = field_rows(files.SweepFile)
    for cls, prefix in (spec.SearchSpec, "search."), (spec.TrialSpec, "trial."):
        sweep += field_rows(cls, prefix)
    sweep += field_rows(spec.FinalSpec, "final.")
    # a final.compare entry is read into an unsearched arm (spec.Arm), not a field of its own
    sweep.append(
        {
            "field": "final.compare",
            "type": "list of mappings",
            "default": "`[]`",
            "allowed": "",
            "meaning": "unsearched references (dotted fields; optional `label:`, default "
            "compare-<j>, and `seeds:`, a subset of final.seeds)",
        }
    )
    return [
        (
            "Sweep file",
            _intro(files.SweepFile) + " Its `search:`, `trial:` and `final:` blocks follow.",
            sweep,
        ),
        ("Study file", _intro(files.StudyFile), field_rows(files.StudyFile)),
    ]


def _intro(cls: type) -> str:
    """A file class's docstring, to the clause that says what it is read into."""
    text = " ".join(inspect.getdoc(cls).split())
    return text.split("; read into")[0].replace("``", "`") + "."


def render() -> str:
    """The whole page."""
    parts = [
        "# Reference: every field and every column",
        "",
        "Generated from the code by `python -m reuse_ray.reference > docs/reference.md` (a "
        "test keeps it current). Types and defaults come from the config dataclasses, allowed "
        "values from their validators, meanings from the comments beside each field; the "
        "guide ([guide.md](guide.md)) says how they fit together.",
        "",
        "## Run config",
        "",
        "A run config (`reuse-ray run FILE`, a sweep's `base:` block, a study's workload) sets "
        "any of these; `--set a.b=value` overrides one.",
    ]
    for title, rows in run_config_sections():
        parts += ["", f"### {title}", "", _table(rows, FIELD_COLS)]
    for title, intro, rows in spec_sections():
        parts += ["", f"## {title}", "", intro, "", _table(rows, FIELD_COLS)]
    from .space_table import COLS, SAMPLES, space_rows

    parts += [
        "",
        "## Search spaces",
        "",
        "What each space searches (`search.space`, a study arm's `space`), read from the "
        f"spaces: each is sampled {SAMPLES} times (random sampler, seed 0); `drawn` says how "
        "often a parameter was drawn (a branch's parameter shows its share), and a bound set "
        "by an earlier draw is named by it. A study's `shared` block adds its parameters "
        "(`train.lr` in the shipped studies) to every arm's space.",
        "",
        _table(space_rows(), COLS),
    ]
    parts += [
        "",
        "## Parquet columns",
        "",
        "Every results folder holds these tables, one file per run and table, hive-partitioned "
        "by `method`. The `runs` table also has one `cfg.<field>` column per run-config field "
        "above (lists as JSON text) and `config_json`, the whole config.",
    ]
    for table, rows in column_sections():
        parts += ["", f"### `{table}`", "", _table(rows, ("column", "type", "meaning"))]
    return "\n".join(parts) + "\n"


def missing() -> list[str]:
    """Every field or column the page would leave without a meaning."""
    out = [r["field"] for _, rows in run_config_sections() for r in rows if not r["meaning"]]
    out += [r["field"] for _, _, rows in spec_sections() for r in rows if not r["meaning"]]
    out += [f"{t}.{r['column']}" for t, rows in column_sections() for r in rows if not r["meaning"]]
    return out


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render())
