"""report.html in a real browser (headless Chromium through Playwright): every figure loads,
the page fits a 1280-px window without sideways scrolling, no Markdown marks are left, and a
screenshot is kept as an artifact ($REUSE_RAY_ARTIFACTS, else the test's folder)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_analysis import _write_run

from analysis import write_report


def _launch(p):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        if exe:
            return p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        return p.chromium.launch(args=["--no-sandbox"])  # Playwright's own Chromium
    except Exception as err:  # noqa: BLE001 - no browser at all: say so
        pytest.skip(
            f"no headless Chromium here ({type(err).__name__}: "
            f"{(str(err).strip().splitlines() or [''])[0]}); "
            "install Debian's chromium or run `playwright install chromium`"
        )


@pytest.mark.slow  # an end-to-end run: the full suite keeps it
def test_report_html_renders_in_chromium(tmp_path):
    # imported here, not at collection (~0.9 s in every pytest worker)
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    long = {"cfg.method.dg.tau0": 0.91169880000000001, "cfg.method.dg.gate": "proxy"}
    for s in range(1, 7):
        _write_run(tmp_path, "fedavg", s, f"a{s}", [0.5, 0.6, 0.7], test=0.7)
        _write_run(
            tmp_path,
            "dg_fedreuse",
            s,
            f"b{s}",
            [0.5, 0.62, 0.72],
            test=0.71,
            extra=long,
            up_per_round=40,
        )
        _write_run(
            tmp_path,
            "dg_fedreuse",
            s,
            f"c{s}",
            [0.5, 0.61, 0.73],
            test=0.72,
            extra={**long, "cfg.method.dg.tau0": 0.5},
            up_per_round=30,
        )
    import pandas as pd

    from reuse_ray.tuning.trials import trial_row, write_trials

    params = {"dg.tau_min": 0.8134931, "dg.tau0": 0.9116988, "dg.rho": 0.7279635, "r": 0.2}
    rows = [
        trial_row(
            sweep="s",
            stage="search",
            run_id=f"t{k}",
            searcher="tpe",
            objective="val_acc",
            params=params,
            status="stopped" if k < 2 else "finished",
            trial_id=f"x_0000{k}",
            val_acc=0.5 + k / 10,
            round_reached=2 if k < 2 else 3,
        )
        for k in range(4)
    ]
    write_trials(str(tmp_path), "s", pd.DataFrame(rows))
    write_report(tmp_path, reference="fedavg")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "2 stopped early by the scheduler** at round 2 " in md and "**stopped**" in md
    page_path = tmp_path / "report" / "report.html"
    shot = Path(os.environ.get("REUSE_RAY_ARTIFACTS", tmp_path)) / "report-1280.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = _launch(p)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(page_path.as_uri())
        page.wait_for_load_state("load")
        images = page.eval_on_selector_all("img", "els => els.map(e => e.naturalWidth)")
        boxes = page.eval_on_selector_all(
            "img",
            "els => els.map(e => { const r = e.getBoundingClientRect(); "
            "return [r.left, r.width, document.body.clientWidth]; })",
        )
        # the parameters of a trial: one left-aligned line of code, not wrapped JSON
        cell = page.eval_on_selector(
            "td:has(> code)",
            "e => [getComputedStyle(e).textAlign, e.getBoundingClientRect().height, "
            "e.querySelector('code').getBoundingClientRect().height]",
        )
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        text = page.inner_text("body")
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert images and all(w > 0 for w in images), images
    for left, width, body in boxes:  # centred, and no longer a small figure at the left
        assert width >= 700 and abs(left - (1280 - width) / 2) < 40, (left, width, body)
    align, _, code_h = cell
    assert align == "left" and code_h < 24, cell  # one line
    assert scroll_width <= 1280
    assert "`" not in text
    assert shot.stat().st_size > 0
