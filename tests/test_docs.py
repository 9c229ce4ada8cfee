"""The documentation against the code: the generated reference is current and leaves no field
or column without a meaning; every relative link and anchor in README and docs/ resolves."""

from __future__ import annotations

import dataclasses
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
