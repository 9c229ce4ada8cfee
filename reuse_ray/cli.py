"""Command line: ``reuse-ray run | sweep | report | fetch | compact | expand`` (also
``python -m reuse_ray``; the folder commands are in :mod:`.cli_folders`).

A mistake in what the user gave is one line, ``reuse-ray: <what> — <allowed / what to do>``,
and exit status 2; ``--debug`` (or ``REUSE_RAY_DEBUG=1``) adds the traceback. Any other error is
a bug: its traceback is shown, with a line saying so.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import traceback
import warnings

from .cli_folders import compact_parser, expand_parser, fetch_parser
from .errors import Terminated, UserError


def _print(msg: str) -> None:
    print(msg, flush=True)


def _run_overrides(args: argparse.Namespace) -> list[str]:
    from .results.storage import from_command_line

    overrides = list(args.set or [])
    if getattr(args, "results", None):
        overrides.append(f"results_dir={from_command_line(args.results)}")
    if getattr(args, "backend", None):
        overrides.append(f"engine.backend={args.backend}")
    if getattr(args, "address", None):
        overrides.append(f"engine.ray_address={args.address}")
    return overrides


def cmd_run(args: argparse.Namespace) -> int:
    from .configio import load_run_config
    from .results.storage import anchored, display
    from .runner import run_fl

    cfg = load_run_config(args.config, _run_overrides(args))
    cfg = cfg.replace(results_dir=anchored(cfg.results_dir)[0])
    _print(f"results root: {display(cfg.results_dir)}")
    try:
        from .engine import RunHooks

        summary = run_fl(cfg, progress=_print, force=args.force, hooks=RunHooks(mlflow=args.mlflow))
    finally:
        _shutdown_ray()
    row = summary.row
    out = display(cfg.results_dir)

    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.4f}"

    _print(
        f"run {summary.run_id}: {summary.status}; final val_acc={fmt(row['final_val_acc'])}, "
        f"test_acc={fmt(row['test_acc'])}, cumulative restricted uplink saving="
        f"{100 * (row['cum_saving_restricted'] or 0):.3f}%"
    )
    _print(f"results: {out}  (pandas.read_parquet('{out}/rounds'))")
    return 0 if summary.status == "finished" else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    """A sweep file or a study file (``kind: study``): every option means the same for both —
    ``--scale`` a named scale of the file, ``--address`` the cluster to join, ``--resume`` the
    interrupted experiment continued, ``--final`` the final stage over a finished search."""
    from .results.storage import from_command_line
    from .tuning import load_experiment, run_experiment

    overrides = list(args.set or [])
    if args.results:
        overrides.append(f"results_dir={from_command_line(args.results)}")
    common = dict(
        resume=args.resume,
        final_only=args.final,
        say=_print,
        verbose=args.verbose,
        mlflow=args.mlflow,
        address=args.address,
    )
    exp = load_experiment(args.sweep, overrides, args.scale)
    try:
        run_experiment(exp, **common)
    finally:
        _shutdown_ray()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """The report, or the leaderboard; the analysis layer's warnings (the unfinished runs it
    left out) are one ``note:`` line each, printed once the report is written."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = _report(args)
    for w in caught:
        text = str(w.message)
        if text.startswith("excluded "):  # analysis.load's count of the runs it left out
            _print(
                f"note: {text.split('; pass include_unfinished')[0]} (the report compares "
                f"finished runs only)"
            )
        else:  # any other warning as Python shows it
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return code


def _report(args: argparse.Namespace) -> int:
    from analysis import write_report
    from analysis.report import report_line

    args.results = [_newest_sweep(loc) for loc in args.results]
    if args.leaderboard:
        for flag, value in (("--out", args.out), ("--target", args.target)):
            if value is not None:
                raise UserError(
                    f"{flag}: not used with --leaderboard, which prints its table here — "
                    f"drop {flag}, or drop --leaderboard to write the report"
                )
        from analysis import load
        from analysis.report import _final_or_all
        from analysis.studies import budget_section, study_header
        from analysis.tables import check_results, leaderboard, markdown

        from .results.reader import read_metadata

        res = load(args.results)
        study = read_metadata(args.results[0])
        final = _final_or_all(res)
        check_results(final, ", ".join(args.results))
        if args.reference is not None:  # the user's reference arm (checked by leaderboard)
            refs: tuple[str, ...] = (args.reference,)
        else:  # a study's own references
            arms = set(final.runs["arm"])
            refs = tuple(r for r in (study or {}).get("compare_to", ()) if r in arms)
        table = markdown(leaderboard(final, args.round, refs), digits=3)  # checks first
        if study:
            _print(study_header(study, res))
        _print(table)
        if study:
            from analysis.frontier import sections

            for line in budget_section(study, res, full=False):
                _print(line)
            for line in sections(res, study):  # a study with uplink levels: who wins at each
                _print(line)
        return 0
    path = write_report(args.results, args.out, args.round, args.reference, args.target)
    _print(report_line(path))
    return 0


def _newest_sweep(location: str) -> str:
    """A folder of dated sweeps (``…/sweeps/quickstart``) stands for its newest sweep."""
    from .results.reader import is_results_root
    from .results.storage import Storage, display, latest_dated

    try:
        store = Storage.of(location)
        has_runs = store.is_dir("runs")
        newest = None if has_runs or not is_results_root(location) else latest_dated(location)
    except (OSError, ValueError):
        return location
    if newest is None:
        return location
    _print(f"{display(location)} holds dated sweeps; reporting the newest: {display(newest)}")
    return newest


def _shutdown_ray() -> None:
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


RESULTS_HELP = (
    "results folder: a path or a URI such as s3://bucket/x (default: the file's "
    "results_dir, relative ones below $REUSE_RAY_RESULTS or ~/reuse_ray_results)"
)
RUN_RESULTS_HELP = (
    "results folder: a path or a URI such as s3://bucket/x (default: the config's "
    "results_dir — for a sweep file, its base: block's — relative ones below "
    "$REUSE_RAY_RESULTS or ~/reuse_ray_results)"
)


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit 2, like every other user mistake."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"reuse-ray: {message} — see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="reuse-ray",
        description="Federated-learning runs and sweeps on Ray, for research on reusing cached\n"
        "or stale client updates (also: python -m reuse_ray).",
        epilog="examples:\n"
        "  reuse-ray sweep sweeps/quickstart.yaml\n"
        "  reuse-ray run configs/dg_paper.yaml --set fl.rounds=30 --backend local\n"
        "  reuse-ray report ~/reuse_ray_results/sweeps/quickstart\n"
        "  reuse-ray fetch fashionmnist",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks of user errors too")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (
        _run_parser,
        _sweep_parser,
        _report_parser,
        fetch_parser,
        compact_parser,
        expand_parser,
    ):
        parser = add(sub)
        # --debug after the subcommand too (reuse-ray run … --debug)
        parser.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    return p


def _run_parser(sub) -> argparse.ArgumentParser:
    r = sub.add_parser("run", help="run one FL run from a config (or a sweep file's base block)")
    r.add_argument("config", help="YAML run config, or a sweep file whose base: block is used")
    r.add_argument("--set", action="append", metavar="a.b=value", help="override a field")
    r.add_argument("--results", help=RUN_RESULTS_HELP)
    r.add_argument(
        "--backend", choices=["ray", "local"], help="engine backend (default: engine.backend)"
    )
    r.add_argument("--address", help="Ray cluster address (sets engine.ray_address)")
    r.add_argument("--mlflow", metavar="URI", help="also log to MLflow at URI (e.g. file:./mlruns)")
    r.add_argument(
        "--force",
        action="store_true",
        help="recompute a run that already finished in this results directory (the finished "
        "rows are replaced only when the new attempt finishes)",
    )
    r.set_defaults(func=cmd_run)
    return r


def _sweep_parser(sub) -> argparse.ArgumentParser:
    sw = sub.add_parser("sweep", help="run a Ray Tune + Optuna sweep (or a study) from its file")
    sw.add_argument("sweep", help="YAML sweep or study file (see sweeps/)")
    sw.add_argument(
        "--set",
        action="append",
        metavar="a.b=value",
        help="override a field of the sweep file, e.g. base.fl.rounds=10",
    )
    sw.add_argument("--results", help=RESULTS_HELP)
    sw.add_argument("--address", help="Ray cluster address to join (default: engine.ray_address)")
    sw.add_argument("--scale", help="a named scale of the file (its scales: block), e.g. small")
    sw.add_argument("--mlflow", metavar="URI", help="log every trial to MLflow at URI")
    sw.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="-v: Tune's status tables too; -vv: also every trial's round lines",
    )
    sw.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted sweep or study: finished trials are not rerun",
    )
    sw.add_argument(
        "--final",
        action="store_true",
        help="skip the search: select from its finished trials, then the final stage",
    )
    sw.set_defaults(func=cmd_sweep)
    return sw


def _report_parser(sub) -> argparse.ArgumentParser:
    rp = sub.add_parser("report", help="tables, paired statistics and plots from Parquet results")
    rp.add_argument(
        "results",
        nargs="+",
        help="results folders (local paths or URIs); a folder of dated sweeps (a sweep's "
        "results_dir) reports the newest of them",
    )
    rp.add_argument("--out", help="output folder (default: RESULTS/report)")
    rp.add_argument("--round", type=int, help="fixed budget T (default: last common round)")
    rp.add_argument("--reference", help="arm the paired differences are taken against")
    rp.add_argument("--target", type=float, help="validation accuracy for bytes-to-target")
    rp.add_argument(
        "--leaderboard",
        action="store_true",
        help="print the per-arm leaderboard as a Markdown table (final stage runs)",
    )
    rp.set_defaults(func=cmd_report)
    return rp


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get("REUSE_RAY_DEBUG", "") not in ("", "0")
    before = _terminate_like_ctrl_c()
    try:
        _check_working_directory()
        if getattr(args, "mlflow", None):  # a bad tracking URI fails before any work
            from .results.tracking import check_tracking_uri

            check_tracking_uri(args.mlflow)
        return args.func(args)
    except UserError as err:
        if debug:
            traceback.print_exc()
        print(f"reuse-ray: {err}", file=sys.stderr)
        if getattr(err, "frames", "") and not debug:  # the user's own code raised it
            print(err.frames, file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM (Terminated), a stage Tune stopped
        print(f"reuse-ray: {_interrupted_line(args, err)}", file=sys.stderr)
        return 128 + (err.signum if isinstance(err, Terminated) else int(signal.SIGINT))
    except Exception:  # noqa: BLE001 - anything else is a bug: keep its traceback
        traceback.print_exc()
        print(
            "reuse-ray: unexpected error — this is a bug in reuse_ray; please report it with the "
            "traceback above (rerun with --debug for user errors' tracebacks)",
            file=sys.stderr,
        )
        return 1
    finally:
        if before is not _OFF_MAIN_THREAD:  # a handler not set from Python was the default
            signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)


def _check_working_directory() -> None:
    """A process whose working directory was removed under it fails later in ways that name
    nothing (reports of oneMKL's "Cannot load libtorch_cpu.so" point there; under `ray job
    submit` the directory is the job's unpacked working_dir): say so first."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise UserError(
            "the working directory of this process no longer exists (removed while it "
            "started) — start the command from an existing folder; under `ray job submit`, "
            "submit the job again"
        ) from None


def _interrupted_line(args: argparse.Namespace, err: KeyboardInterrupt) -> str:
    """The one line an interrupted command ends with: what stopped it, and how to go on."""
    what = str(err) if isinstance(err, Terminated) else "interrupted"
    if args.command == "sweep":
        return f"{what} — rerun with --resume to continue (finished runs are kept)"
    if args.command == "run":
        return f"{what} — the run is recorded as interrupted; rerun the command to start it again"
    return what


_OFF_MAIN_THREAD = object()


def _raise_terminated(signum: int, _frame) -> None:
    raise Terminated(signum)


def _terminate_like_ctrl_c():
    """While a command runs, SIGTERM raises :class:`Terminated` (a KeyboardInterrupt) in the
    main thread, so it ends the command as Ctrl-C does instead of killing the process before
    the run's rows and status are written. Returns the handler it replaced (as
    ``signal.signal`` does; ``_OFF_MAIN_THREAD`` where handlers cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return _OFF_MAIN_THREAD
    return signal.signal(signal.SIGTERM, _raise_terminated)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
