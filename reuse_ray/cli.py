"""Command line: ``reuse-ray run CONFIG.yaml [--set a.b=value ...]`` and ``reuse-ray fetch``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import ConfigError, load_run_config


def _print(msg: str) -> None:
    print(msg, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    from .data import DatasetUnavailableError
    from .engine import run_fl

    overrides = list(args.set or [])
    if args.results:
        overrides.append(f"results_dir={args.results}")
    if args.backend:
        overrides.append(f"engine.backend={args.backend}")
    try:
        cfg = load_run_config(args.config, overrides)
    except (ConfigError, FileNotFoundError) as err:
        print(f"reuse-ray: {err}", file=sys.stderr)
        return 2
    try:
        summary = run_fl(cfg, progress=_print)
    except DatasetUnavailableError as err:
        print(f"reuse-ray: {err}", file=sys.stderr)
        return 2
    finally:
        _shutdown_ray()
    row = summary.row
    out = Path(cfg.results_dir).resolve()
    _print(
        f"run {summary.run_id}: {summary.status}; final val_acc={row['final_val_acc']}, "
        f"test_acc={row['test_acc']}, cumulative restricted uplink saving="
        f"{100 * (row['cum_saving_restricted'] or 0):.3f}%"
    )
    _print(f"results: {out}  (pandas.read_parquet('{out}/rounds'))")
    return 0 if summary.status == "finished" else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    from .data import DatasetUnavailableError
    from .tuning import load_sweep, run_sweep

    overrides = list(args.set or [])
    if args.results:
        overrides.append(f"results_dir={args.results}")
    try:
        spec = load_sweep(args.sweep, overrides)
    except (ConfigError, FileNotFoundError) as err:
        print(f"reuse-ray: {err}", file=sys.stderr)
        return 2
    try:
        run_sweep(spec, resume=args.resume, final_only=args.final, say=_print)
    except (DatasetUnavailableError, FileNotFoundError, FileExistsError, ValueError) as err:
        print(f"reuse-ray: {err}", file=sys.stderr)
        return 2
    finally:
        _shutdown_ray()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from analysis import AnalysisError, write_report

    try:
        path = write_report(args.results, args.out, args.round, args.reference, args.target)
    except (AnalysisError, ValueError) as err:
        print(f"reuse-ray: {err}", file=sys.stderr)
        return 2
    _print(f"report: {path.resolve()} (and report.html, PNG figures beside it)")
    return 0


def _shutdown_ray() -> None:
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def cmd_fetch(args: argparse.Namespace) -> int:
    from .data import fetch

    root = fetch(args.dataset, args.root, args.image_size)
    _print(f"{args.dataset} is in {root}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reuse-ray", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run one FL run from a config (or a sweep file's base block)")
    r.add_argument("config", help="YAML run config, or a sweep file whose base: block is used")
    r.add_argument("--set", action="append", metavar="a.b=value", help="override a field")
    r.add_argument("--results", help="results directory (overrides results_dir)")
    r.add_argument(
        "--backend", choices=["ray", "local"], help="engine backend (default: engine.backend)"
    )
    r.set_defaults(func=cmd_run)
    sw = sub.add_parser("sweep", help="run a Ray Tune + Optuna sweep from a sweep file")
    sw.add_argument("sweep", help="YAML sweep file (see sweeps/)")
    sw.add_argument(
        "--set",
        action="append",
        metavar="a.b=value",
        help="override a field of the sweep file, e.g. base.fl.rounds=10",
    )
    sw.add_argument("--results", help="results directory (overrides results_dir)")
    sw.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted sweep: finished trials are not rerun",
    )
    sw.add_argument(
        "--final", action="store_true", help="only run the final stage of a finished search"
    )
    sw.set_defaults(func=cmd_sweep)
    rp = sub.add_parser("report", help="tables, paired statistics and plots from Parquet results")
    rp.add_argument("results", nargs="+", help="results directories (local paths or URIs)")
    rp.add_argument("--out", help="output folder (default: RESULTS/report)")
    rp.add_argument("--round", type=int, help="fixed budget T (default: last common round)")
    rp.add_argument("--reference", help="arm the paired differences are taken against")
    rp.add_argument("--target", type=float, help="validation accuracy for bytes-to-target")
    rp.set_defaults(func=cmd_report)
    f = sub.add_parser("fetch", help="download a dataset into the data root (needs internet)")
    f.add_argument("dataset")
    f.add_argument("--root", default=None)
    f.add_argument("--image-size", type=int, default=28)
    f.set_defaults(func=cmd_fetch)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
