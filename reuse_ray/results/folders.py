"""An experiment's results folder, opened as the command asked (design: Interrupting and
resuming): a fresh dated folder or the newest one, a start refused over earlier results and a
``--resume``/``--final`` refused where nothing was started, every damaged table file set aside
before a resume keeps the rest, and the report written at the end."""

from __future__ import annotations

import dataclasses
import warnings

from ..errors import UserError
from .damage import find_damaged, set_aside
from .storage import Storage, dated_folder, display, join, latest_dated


def dated(spec, resume: bool, what: str = "sweep", flag: str = "--resume"):
    """The spec (a sweep's or a study's) with its own folder: a folder of dated experiments
    gets a fresh dated folder (``resume``, asked by ``flag`` — ``--resume`` or ``--final``: its
    newest)."""
    if not spec.dated:
        return spec
    if resume:
        newest = latest_dated(spec.results_dir)
        if newest is None:
            raise UserError(
                f"{flag}: no earlier {what} {spec.name!r} under "
                f"{display(spec.results_dir)} — run it without {flag}, or give "
                "its folder with --results"
            )
        return dataclasses.replace(spec, results_dir=newest, dated=False)
    return dataclasses.replace(spec, results_dir=dated_folder(spec.results_dir), dated=False)


def open_folder(spec, resume: bool, final_only: bool, what: str, started: bool, say) -> list[str]:
    """A sweep's or a study's folder, opened as asked: refuse a start over earlier results,
    or a ``--resume``/``--final`` where nothing was started; check it is writable; with
    either, set every damaged table file aside (named on the console). Returns the run ids
    set aside."""
    where = display(spec.results_dir)
    say(f"results root: {where}")
    if started and not resume and not final_only:
        raise UserError(
            f"{what} {spec.name!r} already has results in {where}; pass --resume to continue "
            "it, or --results DIR for a new one"
        )
    if (resume or final_only) and not started:
        flag = "--resume" if resume else "--final"
        raise UserError(
            f"{flag}: nothing to resume in {where} (no {what} {spec.name!r} was started "
            f"there) — run it without {flag} to start one there, or give the folder of the "
            f"interrupted {what} with --results"
        )
    Storage.of(spec.results_dir).check_writable(keep=True)
    return set_aside_damaged(spec.results_dir, say) if resume or final_only else []


def set_aside_damaged(results_dir: str, say) -> list[str]:
    """Before a resume: every table file read whole; a damaged run's files go aside (module
    ``results.damage``), named on the console, and its trial's run is recomputed after its
    stage (:func:`reuse_ray.tuning.launch.recompute_missing`). Returns the run ids set aside."""
    damaged = find_damaged(results_dir)
    if not damaged:
        return []
    folder, runs = set_aside(results_dir, damaged)
    for d in damaged:
        say(f"damaged result: {display(join(results_dir, d.rel))} cannot be read ({d.error})")
    say(
        f"  set aside in {display(folder)} with the rest of each damaged run's files; "
        + (f"{len(runs)} damaged runs are" if len(runs) != 1 else "1 damaged run is")
        + " recomputed"
    )
    return runs


def report_at_end(location: str, say) -> None:
    """Write the report of a finished sweep or study, then say where the results are; a report
    that fails loses no result and says how to retry."""
    where = display(location)
    try:
        from analysis import write_report
        from analysis.report import report_line

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = write_report(location)
        say(report_line(report))
    except Exception as err:  # noqa: BLE001 - the results stay; only the report is missing
        say(
            f"report: not written ({type(err).__name__}: {err}); run reuse-ray report "
            f"{where} to retry"
        )
    say(f"results root: {where}")
