"""The documentation against the code: the generated reference is current and leaves no field
or column without a meaning; every relative link and anchor in README and docs/ resolves."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from reuse_ray import reference

ROOT = Path(__file__).resolve().parents[1]


def test_the_reference_page_is_current_and_complete():
    page = (ROOT / "docs" / "reference.md").read_text()
    assert page == reference.render(), (
        "docs/reference.md is stale: python -m reuse_ray.reference > docs/reference.md"
    )
    assert reference.missing() == []


def test_a_field_without_a_comment_is_caught():
    @dataclasses.dataclass(frozen=True)
    class Block:
        documented: int = 1  # what it does
        # a comment block above counts too
        above: int = 2
        bare: int = 3

    rows = {r["field"]: r["meaning"] for r in reference.field_rows(Block)}
    assert rows == {
        "documented": "what it does",
        "above": "a comment block above counts too",
        "bare": "",
    }


def _anchors(md: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to -."""
    out = set()
    for line in md.splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            text = re.sub(r"[^\w\- ]", "", text)
            out.add(text.replace(" ", "-"))
    return out


def test_every_relative_link_and_anchor_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


SHIPPED_TEXT = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "sweeps").glob("*.yaml")),
    *sorted((ROOT / "configs").glob("*.yaml")),
    *sorted((ROOT / "examples").glob("*.yaml")),
]


def test_no_shipped_text_cites_a_file_outside_the_repository():
    """Users get the repository only: no page or shipped file points at the project's own
    planning documents or at a folder beside the checkout."""
    outside = re.compile(
        r"ALGORITHMS\.md|ARCHITECTURE\.md|PERFORMANCE\.md|\.\./shared|shared/seeds"
    )
    cited = [
        f"{p.name}: {m.group(0)}" for p in SHIPPED_TEXT for m in outside.finditer(p.read_text())
    ]
    assert not cited, cited


def test_every_repository_path_a_shipped_file_names_exists():
    """`docs/x.md`, `configs/x.yaml`, `sweeps/x.yaml`, `examples/x` and `results/x` named in a
    page or in a sweep or config file's comments are there."""
    named = re.compile(
        r"(?<![\w/])((?:docs|configs|sweeps|examples|benchmarks)/[\w./-]+\.(?:md|yaml|py|ipynb))"
    )
    missing = [
        f"{p.name}: {m}"
        for p in SHIPPED_TEXT
        for m in named.findall(p.read_text())
        if not (ROOT / m).exists()
    ]
    assert not missing, missing


def test_every_run_config_a_page_shows_loads():
    """A ``yaml`` block of the guide that is a run config reads as one, field checks and all."""
    from reuse_ray.configio import load_run_config

    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "guide.md").read_text(), re.S)
    assert blocks
    for i, block in enumerate(blocks):
        path = Path(f"/tmp/guide-block-{os.getpid()}-{i}.yaml")
        path.write_text(block)
        try:
            cfg = load_run_config(str(path), [])
        finally:
            path.unlink()
        assert cfg.run_id


def test_the_results_page_shows_the_shipped_paper_rows_tables():
    """docs/results.md's paper-row tables: `python -m analysis.paper results/paper_fashionmnist`;
    the README's table is the first of them."""
    import contextlib
    import io

    from analysis import paper

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        paper.main([str(ROOT / "results" / "paper_fashionmnist")])
    assert out.getvalue().strip() in (ROOT / "docs" / "results.md").read_text()
    first = _markdown_tables(out.getvalue())[0]
    assert first.startswith("| arm | seeds | test acc @ 90 (%)")
    assert first in (ROOT / "README.md").read_text()


def _markdown_tables(text: str) -> list[str]:
    """Every Markdown table of ``text``: runs of consecutive lines that start with ``|``."""
    tables, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append("\n".join(current))
            current = []
    return tables


def test_the_readme_and_results_page_show_the_shipped_studys_tables(capsys):
    """`reuse-ray report results/study_fashionmnist --leaderboard` reprints, offline, the study's
    header and every table docs/results.md shows; every paired CI the README's summary and the
    page's reading cite is one the command prints."""
    from reuse_ray.cli import main

    assert main(["report", str(ROOT / "results" / "study_fashionmnist"), "--leaderboard"]) == 0
    out = capsys.readouterr().out
    readme = (ROOT / "README.md").read_text()
    page = (ROOT / "docs" / "results.md").read_text()
    leaderboard, levels, front, to_target = _markdown_tables(out)
    header = out.splitlines()[0]
    assert header.startswith("Study `study_fashionmnist`") and header in page
    assert "| workload | level | limit MB |" in levels
    for table in (leaderboard, levels, front, to_target):
        assert table in page
    section = readme.split("\n## Results\n")[1].split("\n## ")[0]
    study = page.split("\n## The Fashion-MNIST study\n")[1].split("\n## ")[0]
    ci = r"[+-]\d+\.\d{2,3} \[[+-]\d+\.\d{2,3}, [+-]\d+\.\d{2,3}\]"
    cited = re.findall(ci, section)
    assert cited, "the README's summary cites no paired CI"
    cited += re.findall(ci, study.split("| dataset | arm |")[0])
    missing = [ci for ci in cited if ci not in out]
    assert not missing, f"CIs the README cites that the report does not print: {missing}"


def test_the_search_space_table_says_what_each_space_searches():
    """The reference's search-space table, checked against the spaces' own source by hand."""
    from reuse_ray.space_table import packaged_spaces, space_rows

    rows = space_rows()
    by = {(r["space"], r["parameter"].strip("`")): r for r in rows}
    assert {r["space"] for r in rows} == set(packaged_spaces())
    assert {p for s, p in by if s == "fedavg"} == {"fl.server_lr", "method.topk_ratio"}
    assert by["fedavg", "fl.server_lr"]["range"] == "[0.3, 1.5]"
    assert by["fedavg", "method.topk_ratio"]["scale"] == "real, log"
    assert by["fedprox", "method.fedprox.mu"]["range"] == "[1e-05, 1]"
    assert {p for s, p in by if s == "laq"} == {
        "method.laq.bits",
        "method.laq.c_thr",
        "method.laq.max_clock",
    }
    assert by["laq", "method.laq.bits"]["scale"] == "integer, linear"
    assert by["dg_fedreuse", "method.dg.tau_min"]["range"] == "[0.01, `method.dg.tau0`]"
    assert by["mifa", "method.mifa.init"]["range"] == "zero, wait"
    assert all(r["drawn"] == "always" for r in rows)  # no shipped space branches
    page = (ROOT / "docs" / "reference.md").read_text()
    assert "## Search spaces" in page and "| laq | `method.laq.c_thr` | [0.0001, 1] |" in page


def test_a_branch_parameter_shows_its_share_of_the_draws(monkeypatch):
    from reuse_ray import space_table
    from reuse_ray.tuning import spaces

    def branchy(trial):
        if trial.suggest_categorical("kind", ["a", "b"]) == "a":
            trial.suggest_float("x", 0.0, 2.0, step=0.5)
        return {"fixed.thing": 3}

    monkeypatch.setattr(spaces, "load_space", lambda name: branchy)
    seen, fixed = space_table.space_draws("mine", 200)
    n = len(seen["x"])
    assert 60 < n < 140 and fixed == {"fixed.thing": {"3"}}
    monkeypatch.setattr(spaces, "available_spaces", lambda: ["mine"])
    rows = {r["parameter"]: r for r in space_table.space_rows(200)}
    assert rows["`x`"]["drawn"] == f"{n} of 200 draws"
    assert rows["`x`"]["scale"] == "real, step 0.5" and rows["`x`"]["range"] == "[0, 2]"
    assert rows["`kind`"]["range"] == "a, b" and rows["`fixed.thing`"]["range"] == "set to 3"


def test_every_figure_of_the_readmes_performance_table_is_in_performance_md():
    """Each number the README's performance table quotes (ranges' ends included) is written in
    docs/performance.md, where its command, machine and date are."""
    readme = (ROOT / "README.md").read_text()
    perf = (ROOT / "docs" / "performance.md").read_text()
    start = readme.index("| what | measured | goal |")
    table = readme[start : readme.index("\n\n", start)]
    measured = [line.split("|")[2] for line in table.splitlines()[2:]]
    assert len(measured) >= 10
    numbers = {n for cell in measured for n in re.findall(r"\d+\.\d+", cell)}
    missing = sorted(n for n in numbers if n not in perf)
    assert not missing, missing


def test_the_guides_groupby_snippet_gives_the_paper_rows_five_arms(monkeypatch, capsys):
    """The guide's snippet, executed as written (from the repository root): the shipped paper
    row's 11 runs in its five arms."""
    guide = (ROOT / "docs" / "guide.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    (snippet,) = [b for b in blocks if "groupby(keys" in b]
    monkeypatch.chdir(ROOT)
    exec(compile(snippet, "guide.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "5"


def test_a_users_method_leaves_the_reference_page_as_it_is(monkeypatch):
    """The page documents the package: a method a test (or a user's method.module) registered in
    the same process changes none of it (CI found the example's space in one process's page)."""
    from reuse_ray.algorithms import registry

    before = reference.render()

    def own_space(trial):
        trial.suggest_float("method.mine.knob", 0.0, 1.0)

    spec = registry.MethodSpec("mine", lambda p, env: None, space=own_space, module="my_pkg")
    monkeypatch.setitem(registry._REGISTRY, "mine", spec)
    assert "mine" in registry.spaces()
    assert reference.render() == before


def test_the_reference_writes_constants_out_as_their_values():
    """A validator's bound or a comment that names a constant shows its values: a tuple of
    names, a number, another field (self.x); the page names none of the package's constants,
    and leaves out method.params (no YAML key of its own)."""
    names = {"KINDS": ("a", "b"), "CAP": 7, "TOP": 2**63 - 1}
    assert reference._values("one of KINDS, at most CAP", names) == "one of `a`, `b`, at most 7"
    assert reference._values("[self.low, TOP]", names, "fl.") == "[`fl.low`, 2^63 − 1]"
    assert reference._values("UNKNOWN stays", names) == "UNKNOWN stays"
    page = reference.render()
    for constant in ("MAX_SEED", "DATASETS", "RUN_STATUS", "DECISIONS", "self."):
        assert constant not in page, constant
    assert "| method.params |" not in page
    assert "| decision | string | one of `fresh`, `reused`, `lazy`" in page


def _python_blocks() -> list[tuple[str, str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [
        (p.name, block)
        for p in pages
        for block in re.findall(r"```python\n(.*?)```", p.read_text(), re.S)
    ]


# a snippet that starts an experiment runs as a test of its own (it takes minutes)
RUN_ELSEWHERE = {"run_experiment(exp": "tests/tuning/test_specs.py"}


def test_every_python_block_of_the_readme_and_docs_runs_as_written(monkeypatch, capsys):
    """Each ```python block of README.md and docs/, executed from the repository root as a user
    pastes it; one that starts an experiment names the test that runs it."""
    monkeypatch.chdir(ROOT)
    blocks = _python_blocks()
    assert len(blocks) >= 5
    for page, block in blocks:
        elsewhere = [t for k, t in RUN_ELSEWHERE.items() if k in block]
        if elsewhere:
            assert "load_experiment(" in (ROOT / elsewhere[0]).read_text(), (page, block)
            continue
        try:
            exec(compile(block, page, "exec"), {})
        except Exception as err:  # noqa: BLE001 - name the page and the block
            raise AssertionError(f"{page}: {type(err).__name__}: {err}\n{block}") from None


def test_a_column_shared_by_tables_has_a_meaning_per_table():
    """A column name in several tables means what its own table says: the reference gives each
    table's meaning, and only the identity columns (the run, its seed, the client) may share
    one text (a run's total and a round's value of one name must say which they are)."""
    from collections import defaultdict

    meanings: dict[str, dict[str, str]] = defaultdict(dict)
    for table, rows in reference.column_sections():
        for r in rows:
            meanings[r["column"]][table] = r["meaning"]
    identity = {"run_id", "seed", "client_id"}
    shared = {col: per for col, per in meanings.items() if len(per) > 1 and col not in identity}
    assert {"wall_s", "val_acc", "up_measured", "cum_saving_restricted"} <= set(shared)
    same = {c: per for c, per in shared.items() if len(set(per.values())) < len(per)}
    assert not same, same
