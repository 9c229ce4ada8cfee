"""The folder commands of the command line: ``reuse-ray fetch`` (a dataset's files),
``compact`` and ``expand`` (a results folder to share, and back); :mod:`.cli` wires them in."""

from __future__ import annotations

import argparse

from .errors import UserError


def _print(msg: str) -> None:
    print(msg, flush=True)


def cmd_fetch(args: argparse.Namespace) -> int:
    from .data import fetch

    if args.dataset in ("digits", "synthetic"):
        what = (
            "embedded (scikit-learn's digits)"
            if args.dataset == "digits"
            else "generated from the run's seed"
        )
        _print(f"{args.dataset} is {what}: there is nothing to fetch")
        return 0
    if args.image_size is not None and args.dataset != "pathmnist":
        raise UserError(
            f"fetch --image-size: only PathMNIST comes in several sizes; {args.dataset} has "
            "one — drop --image-size"
        )
    root = fetch(args.dataset, args.root, args.image_size or 28, download=args.download)
    _print(f"{args.dataset} is in {root}")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    import pandas as pd

    from analysis.tables import markdown

    from .results.compact import compact
    from .results.storage import display

    report = compact(args.src, args.dst, say=_print, update=args.update)
    _print(markdown(pd.DataFrame(report), digits=2))
    _print(f"compacted: {display(args.dst)} (reuse-ray report {display(args.dst)} reads it)")
    return 0


def cmd_expand(args: argparse.Namespace) -> int:
    import pandas as pd

    from analysis.tables import markdown

    from .results.compact import expand
    from .results.storage import display

    _print(markdown(pd.DataFrame(expand(args.src, args.dst)), digits=0))
    _print(
        f"expanded: {display(args.dst)} (reuse-ray sweep SPEC --results {display(args.dst)} "
        "--resume continues it)"
    )
    return 0


def fetch_parser(sub) -> argparse.ArgumentParser:
    f = sub.add_parser(
        "fetch",
        help="say where a dataset's files are (read whole), or with --download fetch them into "
        "the data root where internet is available",
    )
    f.add_argument("dataset")
    f.add_argument("--root", default=None)
    f.add_argument("--image-size", type=int, default=None, help="PathMNIST only: 28, 64, 128, 224")
    f.add_argument(
        "--download",
        action="store_true",
        help="download missing files into the data root (needs internet); without it nothing "
        "is fetched or created",
    )
    f.set_defaults(func=cmd_fetch)
    return f


def compact_parser(sub) -> argparse.ArgumentParser:
    c = sub.add_parser(
        "compact",
        help="copy a results folder to share or ship it: each run table in one file per "
        "method (the same rows, a fraction of the bytes); the folder itself is left as it is",
    )
    c.add_argument("src", help="the results folder (a path or a URI)")
    c.add_argument("dst", help="a new or empty folder (a path or a URI)")
    c.add_argument(
        "--update",
        action="store_true",
        help="DST may be an earlier compacted copy of the same results: add the settled runs "
        "it lacks (finished, diverged, failed, stopped) as one more file per method, so a "
        "copy kept beside a study still computing grows by what the study added",
    )
    c.set_defaults(func=cmd_compact)
    return c


def expand_parser(sub) -> argparse.ArgumentParser:
    e = sub.add_parser(
        "expand",
        help="the reverse of compact: a compacted copy as a working results folder (each "
        "run's rows in its own files), where sweep --resume continues the study",
    )
    e.add_argument("src", help="a compacted copy (a path or a URI)")
    e.add_argument("dst", help="a new or empty folder (a path or a URI)")
    e.set_defaults(func=cmd_expand)
    return e
