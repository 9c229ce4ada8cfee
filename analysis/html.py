"""The report as one HTML page that stands alone: the Markdown report rendered with a small
stylesheet, its figures embedded as data URIs, wide tables scrolling in their own box."""

from __future__ import annotations

import html
from pathlib import Path

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       color: #1f2328; max-width: 1180px; margin: 24px auto; padding: 0 16px; }
h1, h2, h3 { line-height: 1.25; } h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
p { overflow-wrap: anywhere; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #f6f8fa;
       padding: 1px 4px; border-radius: 4px; overflow-wrap: anywhere; }
.table { overflow-x: auto; max-width: 100%; margin: 8px 0 16px; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #d0d7de; padding: 3px 6px; text-align: right; vertical-align: top; }
th { background: #f6f8fa; text-align: left; } td:first-child { text-align: left; }
td { max-width: 360px; overflow-wrap: break-word; }
td code { white-space: nowrap; }
td:has(> code) { text-align: left; max-width: none; }
img { display: block; margin: 12px auto; max-width: 100%; height: auto; }
"""


def _inline(text: str) -> str:
    """Markdown inline marks as HTML: `code` and **bold**; everything else escaped."""
    out = []
    for k, part in enumerate(text.split("`")):
        if k % 2:
            out.append(f"<code>{html.escape(part)}</code>")
        else:
            bits = html.escape(part).split("**")
            out.append("".join(f"<b>{b}</b>" if j % 2 else b for j, b in enumerate(bits)))
    return "".join(out)


def _img(src: str, base: Path | None) -> str:
    """An image embedded as a data URI, so the HTML file stands alone."""
    import base64

    path = (base / src) if base is not None else Path(src)
    if path.is_file():
        data = base64.b64encode(path.read_bytes()).decode()
        return f'<p><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}"></p>'
    return f'<p><img alt="{html.escape(src)}" src="{html.escape(src)}"></p>'


def page(md: str, base: Path | None = None) -> str:
    """A self-contained HTML rendering of the report's Markdown: styled, tables that scroll
    inside their own box (the page never scrolls sideways), figures embedded."""
    body, in_table = [], False
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [_inline(c.strip()) for c in line.strip().strip("|").split("|")]
            if set(line.replace("|", "").strip()) <= {"-"}:
                continue
            if not in_table:
                body.append('<div class="table"><table>')
                in_table = True
                body.append("<tr>" + "".join(f"<th>{c}</th>" for c in cells) + "</tr>")
                continue
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            body.append("</table></div>")
            in_table = False
        if line.startswith("!["):
            body.append(_img(line[line.index("(") + 1 : line.rindex(")")], base))
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            body.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
        elif line.strip() == "_(no rows)_":
            body.append("<p><i>(no rows)</i></p>")
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
    if in_table:
        body.append("</table></div>")
    return (
        "<!doctype html><html lang=en><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>reuse_ray report</title><style>{STYLE}</style><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
