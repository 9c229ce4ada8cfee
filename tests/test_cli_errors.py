"""Every bad input is one line, exit 2, no traceback (and --debug shows the traceback).

Each case writes what it needs under a temporary folder, calls the CLI in process and checks the
outcome: a one-line ``reuse-ray: …`` message naming the field, file or argument, with exit 2.
The first block is the inputs a new user tried; the second, more of our own.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest
import yaml

from reuse_ray.cli import main

RUN = {  # a valid, quick local run config
    "seed": 1,
    "data": {"name": "digits"},
    "model": {"name": "cnn", "hidden": 16},
    "train": {"epochs": 1, "batch_size": 64},
    "fl": {"num_clients": 10, "clients_per_round": 2, "rounds": 1, "eval_every": 1},
    "method": {"name": "fedavg"},
    "engine": {"backend": "local"},
}
SWEEP = {
    "name": "bad",
    "base": RUN,
    "search": {"searcher": "tpe", "space": "fedavg", "num_samples": 2},
}


def _file(tmp, name, content):
    p = tmp / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return str(p)


def _with(base, path, value):
    out = yaml.safe_load(yaml.safe_dump(base))
    cur = out
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur.setdefault(k, {})
    cur[keys[-1]] = value
    return out


def _runs_only(status: str | None):
    """A results folder holding the finished run's runs table only (its status changed)."""

    def make(tmp):
        import pandas as pd

        runs = pd.read_parquet(tmp / "done" / "runs")
        if status is not None:
            runs["status"] = status
            runs["run_id"] = runs["run_id"] + "-other"  # another run than the finished one
        (tmp / "only" / "runs").mkdir(parents=True)
        runs.to_parquet(tmp / "only" / "runs" / "part-0.parquet")
        return ["report", str(tmp / "only"), "--out", str(tmp / "rep")]

    return make


def run_args(*args):
    """``run`` of the valid config into a temporary results folder, with these arguments."""
    return lambda tmp: ["run", _file(tmp, "c.yaml", RUN), "--results", str(tmp / "res"), *args]


def run_cfg(**sets):
    return lambda tmp: [
        "run",
        _file(tmp, "c.yaml", RUN),
        "--results",
        str(tmp / "res"),
        *sum((["--set", f"{k}={v}"] for k, v in sets.items()), []),
    ]


def run_file(content):
    return lambda tmp: ["run", _file(tmp, "c.yaml", content), "--results", str(tmp / "res")]


def sweep_file(content):
    return lambda tmp: ["sweep", _file(tmp, "s.yaml", content), "--results", str(tmp / "res")]


def run_module(source):
    """``run`` of the valid config with ``method.module`` a user's file holding ``source``."""
    return lambda tmp: run_set(f"method.module={_file(tmp, 'mine.py', source)}")(tmp)


def run_set(*items):
    return lambda tmp: [
        "run",
        _file(tmp, "c.yaml", RUN),
        "--results",
        str(tmp / "res"),
        *sum((["--set", i] for i in items), []),
    ]


REPORTED = [  # the inputs of the issue
    ("yaml-run", run_file("fl: {rounds: 3\nseed: 1\n"), "c.yaml: not valid YAML at line"),
    ("yaml-sweep", sweep_file("name: x\nbase: [1, 2\n"), "s.yaml: not valid YAML at line"),
    ("yaml-tab", run_file("fl:\n\trounds: 3\n"), "not valid YAML at line 2"),
    ("yaml-set", run_set("train.lr=[1"), "--set train.lr=[1: not valid YAML"),
    ("seed-2**70", run_set(f"seed={2**70}"), "'seed'"),
    (
        "num-clients-5000",
        run_set("fl.num_clients=5000", "fl.clients_per_round=5"),
        "fl.num_clients",
    ),
    (
        "synthetic-1x2x2",
        run_set("data.name=synthetic", "data.synthetic_shape=[1,2,2]"),
        "too small for the shallow CNN",
    ),
    (
        "fedluar-delta",
        run_set("method.name=fedluar", "method.fedluar.delta=100"),
        "method.fedluar.delta: 100",
    ),
    (
        "fedsteer-core",
        run_set("method.name=fedsteer", "method.fedsteer.core_size=50"),
        "method.fedsteer.core_size: 50",
    ),
    (
        "cpu-per-worker",
        run_set("engine.backend=ray", "engine.cpu_per_worker=4096"),
        "engine.cpu_per_worker",
    ),
    (
        "results-proc",
        lambda tmp: ["run", _file(tmp, "c.yaml", RUN), "--results", "/proc/x"],
        "results_dir: cannot write",
    ),
    (
        "fetch-root-proc",
        lambda tmp: ["fetch", "mnist", "--root", "/proc/x", "--download"],
        "fetch --root: cannot create",
    ),
    ("cuda-no-gpu", run_set("engine.device=cuda"), "engine.device: cuda"),
    ("retention-high", sweep_file(_with(SWEEP, "search.retention", "high")), "search.retention"),
    ("checkpoint-often", sweep_file(_with(SWEEP, "checkpoint_every", "often")), "checkpoint_every"),
    ("search-seed-zero", sweep_file(_with(SWEEP, "search.seed", "zero")), "search.seed"),
    (
        "report-round-9999",
        lambda tmp: ["report", str(tmp / "done"), "--round", "9999"],
        "--round 9999: every run completed rounds 1..1",
    ),
    (
        "report-reference",
        lambda tmp: ["report", str(tmp / "done"), "--reference", "nope"],
        "--reference 'nope' is not an arm",
    ),
    (
        "report-only-failed",
        _runs_only("failed"),
        "no finished run to report (1 unfinished, left out: rerun them to finish them)",
    ),
    ("report-no-rounds", _runs_only(None), "finished run(s) but no rounds table holds their rows"),
    (
        "mlflow-scheme",
        run_args("--mlflow", "garbage://x"),
        "--mlflow garbage://x: cannot track there (unknown scheme 'garbage')",
    ),
    (
        "mlflow-folder",
        run_args("--mlflow", "/proc/x/ml"),
        "--mlflow /proc/x/ml: cannot track there",
    ),
    (
        "mlflow-server",
        lambda tmp: ["sweep", _file(tmp, "s.yaml", SWEEP), "--mlflow", "http://127.0.0.1:1"],
        "--mlflow http://127.0.0.1:1: cannot track there",
    ),
    (
        "report-round-0",
        lambda tmp: ["report", str(tmp / "done"), "--round", "0"],
        "--round 0: every run completed rounds 1..1",
    ),
    ("fetch-imagenet", lambda tmp: ["fetch", "imagenet"], "fetch: unknown dataset 'imagenet'"),
    (
        "fetch-size-7",
        lambda tmp: ["fetch", "pathmnist", "--image-size", "7"],
        "fetch --image-size: 7",
    ),
    ("duplicate-key", run_file("fl: {rounds: 1}\nfl: {rounds: 2}\n"), "duplicate key 'fl'"),
    ("empty-config", run_file(""), "is empty"),
    ("lr-inf", run_set("train.lr=inf"), "not a finite number"),
    ("rounds-2.0", run_set("fl.rounds=2.0"), "expected an integer, got 2.0"),
    ("config-dir", lambda tmp: ["run", str(tmp)], "is a directory"),
    ("config-missing", lambda tmp: ["run", str(tmp / "no.yaml")], "config file not found: '"),
    ("sweep-missing", lambda tmp: ["sweep", str(tmp / "no.yaml")], "sweep file not found: '"),
    ("sweep-dir", lambda tmp: ["sweep", str(tmp)], "is a directory"),
    ("base-drops-keys", run_file({"base": RUN, "fl": {"rounds": 3}}), "belong under base:"),
    (
        "run-a-study-file",
        run_file({"kind": "study", "workloads": {"w": RUN}}),
        "is a study file (several workloads and arms), not one run; run the study with",
    ),
    ("other-method-block", run_set("method.dg.rho=0.5"), "method.dg': a block of method"),
    (
        "unreachable-address",
        run_args("--backend", "ray", "--address", "127.0.0.1:1"),
        "cannot reach a Ray cluster",
    ),
]

SCALED = {**SWEEP, "scales": {"tiny": {"search.num_samples": 1}}}

OWN = [  # more of our own
    (
        "sweep-unknown-scale",
        lambda tmp: ["sweep", _file(tmp, "s.yaml", SCALED), "--scale", "huge"],
        "--scale': 'huge'; allowed: tiny",
    ),
    (
        "sweep-without-scales",
        lambda tmp: ["sweep", _file(tmp, "s.yaml", SWEEP), "--scale", "small"],
        "'small': the file names no scales",
    ),
    ("unknown-top-field", run_set("bogus=1"), "'bogus': unknown field"),
    ("unknown-nested", run_set("train.lrr=0.1"), "'train.lrr': unknown field"),
    ("string-for-int", run_set("fl.rounds=ten"), "expected an integer"),
    ("negative-rounds", run_set("fl.rounds=-1"), "'fl.rounds'"),
    ("cpr-over-n", run_set("fl.clients_per_round=11"), "fl.clients_per_round"),
    ("topk-zero", run_set("method.topk_ratio=0"), "method.topk_ratio"),
    ("topk-laq", run_set("method.name=laq", "method.topk_ratio=0.5"), "allowed: 1.0"),
    ("ef-laq", run_set("method.name=laq", "method.error_feedback=true"), "allowed with"),
    ("unknown-method", run_set("method.name=fedfoo"), "unknown method 'fedfoo'"),
    ("module-missing", run_set("method.module=nowhere/x.py"), "method.module"),
    ("module-unimportable", run_set("method.module=no_such_pkg.mod"), "cannot import"),
    ("module-syntax", run_module("x = 1\ndef f(:\n    pass\n"), "mine.py, line 2: syntax error"),
    ("module-registers-nothing", run_module("X = 1\n"), "registers no method"),
    (
        "module-other-name",
        run_module(Path(__file__).parents[1].joinpath("examples/my_method.py").read_text()),
        "'fedavg' is not registered by method.module",
    ),
    ("unknown-dataset", run_set("data.name=imagenet"), "'data.name'"),
    ("unknown-partition", run_set("partition.kind=zipf"), "'partition.kind'"),
    ("momentum-1", run_set("train.momentum=1.0"), "'train.momentum'"),
    ("eval-every-0", run_set("fl.eval_every=0"), "'fl.eval_every'"),
    ("participation", run_set("fl.participation=sometimes"), "'fl.participation'"),
    ("group-probs-empty", run_set("fl.group_probs=[]"), "'fl.group_probs'"),
    ("model-name", run_set("model.name=vgg"), "'model.name'"),
    ("backend", run_set("engine.backend=spark"), "'engine.backend'"),
    ("device", run_set("engine.device=tpu"), "'engine.device'"),
    (
        "server-process",
        run_set("engine.server_process=driver"),
        "'engine.server_process': unknown value 'driver'; allowed: worker, own",
    ),
    ("seed-negative", run_set("seed=-3"), "'seed'"),
    ("lr-nan", run_set("train.lr=nan"), "not a finite number"),
    ("lr-1e308", run_set("train.lr=1e308"), "'train.lr': 1e+308 is beyond float32's range"),
    ("set-no-equals", run_set("fl.rounds"), "override must look like"),
    ("set-empty-key", run_set("=3"), "'=3': override must look like"),
    ("set-empty-segment", run_set("fl..rounds=3"), "override must look like"),
    ("set-into-scalar", run_set("seed.x=1"), "'seed' is not a block"),
    ("yaml-list-root", run_file("- 1\n- 2\n"), "must hold a mapping"),
    ("binary-config", run_file(b"\xff\xfe\x00\x81bad"), "cannot be read"),
    (
        "dg-tau-order",
        run_set("method.name=dg_fedreuse", "method.dg.tau_min=0.99"),
        "method.dg.tau_min",
    ),
    (
        "fedstale-empty-round",
        run_set("method.name=fedstale", "method.fedstale.empty_round=x"),
        "method.fedstale.empty_round",
    ),
    ("laq-variant", run_set("method.name=laq", "method.laq.variant=paper"), "method.laq.variant"),
    (
        "mifa-schedule",
        run_set("method.name=mifa", "method.mifa.lr_schedule=cosine"),
        "method.mifa.lr_schedule",
    ),
    ("sweep-searcher", sweep_file(_with(SWEEP, "search.searcher", "annealing")), "search.searcher"),
    ("sweep-num-samples", sweep_file(_with(SWEEP, "search.num_samples", 0)), "search.num_samples"),
    ("sweep-space", sweep_file(_with(SWEEP, "search.space", "nope")), "unknown space 'nope'"),
    (
        "sweep-grid-with-tpe",
        sweep_file(_with(SWEEP, "search.grid", {"train.lr": [0.1]})),
        "search.grid': read by the grid and none searchers only",
    ),
    (
        "sweep-top-0",
        sweep_file(_with(SWEEP, "final", {"seeds": [5], "top": 0})),
        "'final.top': 0; allowed: an integer > 0",
    ),
    (
        "address-garbage",
        run_set("engine.backend=ray", "engine.ray_address=garbage"),
        "'engine.ray_address': 'garbage'; allowed: auto, local, host:port",
    ),
    (
        "address-port",
        run_set("engine.backend=ray", "engine.ray_address=h:99999"),
        "port '99999' is not a number in 1..65535",
    ),
    ("ray-address-env", run_set("engine.backend=ray"), "RAY_ADDRESS='nonsense'; allowed:"),
    (
        "address-dashboard",
        run_args("--backend", "ray", "--address", "http://127.0.0.1:8265"),
        "is a dashboard address",
    ),
    (
        "sweep-grid-scalar",
        sweep_file(_with(_with(SWEEP, "search.searcher", "grid"), "search.grid", {"fl.rounds": 3})),
        "search.grid",
    ),
    (
        "sweep-final-reuses-seed",
        sweep_file(_with(SWEEP, "final", {"seeds": [1]})),
        "were used by the search",
    ),
    ("sweep-final-no-seeds", sweep_file(_with(SWEEP, "final", {"seeds": []})), "final.seeds"),
    ("sweep-trial-backend", sweep_file(_with(SWEEP, "trial", {"backend": "k8s"})), "trial.backend"),
    ("sweep-bad-base", sweep_file(_with(SWEEP, "base.fl.rounds", "x")), "'fl.rounds'"),
    ("report-missing", lambda tmp: ["report", str(tmp / "nothing")], "no results directory"),
    ("report-target", lambda tmp: ["report", str(tmp / "done"), "--target", "2"], "--target 2.0"),
    (
        "unknown-flag",
        lambda tmp: ["run", "x.yaml", "--frobnicate"],
        "unrecognized arguments: --frobnicate",
    ),
    ("no-command", lambda tmp: [], "the following arguments are required"),
    # paths and options a command cannot use
    (
        "data-root-unknown-user",
        run_set("data.root=~nosuchuser/data"),
        "data.root: '~nosuchuser/data' starts with ~nosuchuser, but user 'nosuchuser' has no",
    ),
    (
        "fetch-root-unknown-user",
        lambda tmp: ["fetch", "mnist", "--root", "~nosuchuser/x"],
        "fetch --root: '~nosuchuser/x' starts with ~nosuchuser",
    ),
    (
        "results-too-long",
        lambda tmp: ["run", _file(tmp, "c.yaml", RUN), "--results", "/tmp/" + "a" * 5000],
        "--results: '/tmp/aaa",
    ),
    (
        "results-dir-too-long",
        lambda tmp: ["run", _file(tmp, "c.yaml", dict(RUN, results_dir="/tmp/" + "b" * 300))],
        "results_dir: '/tmp/bbb",
    ),
    (
        "sweep-results-too-long",
        lambda tmp: ["sweep", _file(tmp, "s.yaml", SWEEP), "--results", "/tmp/" + "a" * 5000],
        "is too long (5005 characters, a folder name of 5000)",
    ),
    (
        "leaderboard-out",
        lambda tmp: ["report", str(tmp / "done"), "--leaderboard", "--out", str(tmp / "x")],
        "--out: not used with --leaderboard",
    ),
    (
        "leaderboard-target",
        lambda tmp: ["report", str(tmp / "done"), "--leaderboard", "--target", "0.5"],
        "--target: not used with --leaderboard",
    ),
    (
        "leaderboard-reference",
        lambda tmp: ["report", str(tmp / "done"), "--leaderboard", "--reference", "nosuch"],
        "--reference 'nosuch' is not an arm of these results",
    ),
    (
        "budget-below-one-round",
        sweep_file(_with(SWEEP, "search.client_rounds", 1)),
        "'search.client_rounds': 1 client-rounds buy less than one round of a trial's 2 clients",
    ),
    ("fetch-truncated", lambda tmp: _truncated_mnist(tmp), "truncated or not the original file"),
    (
        "fetch-size-mnist",
        lambda tmp: ["fetch", "mnist", "--image-size", "64"],
        "fetch --image-size: only PathMNIST comes in several sizes",
    ),
]


def _truncated_mnist(tmp: Path) -> list[str]:
    """A data root whose MNIST test images stop short: ``fetch`` must not call it present."""
    from conftest import write_mnist_like

    write_mnist_like(tmp / "data", "MNIST")
    bad = tmp / "data" / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    bad.write_bytes(bad.read_bytes()[:-100])
    return ["fetch", "mnist", "--root", str(tmp / "data")]


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """A results folder holding one finished 1-round run (for report cases)."""
    root = tmp_path_factory.mktemp("done")
    assert main(["run", _file(root, "c.yaml", RUN), "--results", str(root / "done")]) == 0
    return root / "done"


@pytest.mark.parametrize(
    ("name", "argv", "fragment"), REPORTED + OWN, ids=[c[0] for c in REPORTED + OWN]
)
def test_bad_input_is_one_line_exit_2(name, argv, fragment, tmp_path, done, capsys, monkeypatch):
    (tmp_path / "done").symlink_to(done, target_is_directory=True)
    monkeypatch.setenv("REUSE_RAY_CONNECT_TIMEOUT", "5")
    if name == "ray-address-env":
        monkeypatch.setenv("RAY_ADDRESS", "nonsense")
    if name == "cuda-no-gpu":
        import torch

        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = argv(tmp_path)
    with pytest.raises(SystemExit) if not args or "--frobnicate" in args else nullcontext() as ex:
        rc = main(args)
    if ex is not None:
        rc = ex.value.code
    err = capsys.readouterr().err
    assert rc == 2, (rc, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("reuse-ray: "), err
    assert "Traceback" not in err
    assert fragment in lines[0], lines[0]


def test_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    argv = run_set("train.lr=inf")(tmp_path)
    assert main(["--debug", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("reuse-ray: ")
    assert main([*argv, "--debug"]) == 2  # after the subcommand too
    assert "Traceback" in capsys.readouterr().err
    assert main(argv) == 2 and "Traceback" not in capsys.readouterr().err
    monkeypatch.setenv("REUSE_RAY_DEBUG", "1")
    assert main(argv) == 2 and "Traceback" in capsys.readouterr().err


def test_a_bug_keeps_its_traceback_and_says_so(tmp_path, capsys, monkeypatch):
    import reuse_ray.runner as runner

    def boom(*a, **k):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(runner, "run_fl", boom)
    assert main(run_cfg()(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "this is a bug" in err


def test_fetch_without_network_names_the_download_not_fetch(tmp_path, capsys, monkeypatch):
    import torchvision.datasets as tvd

    def offline(*a, **k):
        raise RuntimeError("<urlopen error [Errno -3] Temporary failure in name resolution>")

    monkeypatch.setattr(tvd, "MNIST", offline)
    assert main(["fetch", "mnist", "--root", str(tmp_path / "data"), "--download"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("reuse-ray: downloading dataset 'mnist'") and "\n" not in err
    assert "reuse-ray fetch" not in err  # no hint to run the command that just failed


@pytest.mark.parametrize(
    "dataset", ["mnist", "emnist_balanced", "cifar10", "cifar100", "pathmnist"]
)
def test_fetch_without_download_touches_nothing_and_names_the_files(
    dataset, tmp_path, capsys, monkeypatch
):
    """Without --download, fetch reaches for no network and makes no folder: it says which
    files to put where."""
    import socket

    def no_network(*a, **k):
        raise AssertionError("fetch reached for the network unasked")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    root = tmp_path / "data"
    assert main(["fetch", dataset, "--root", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{dataset} is not on this machine" in err
    assert f"reuse-ray fetch {dataset} --download" in err
    expected = {
        "mnist": "train-images-idx3-ubyte",
        "emnist_balanced": "emnist-balanced-train-images-idx3-ubyte",
        "cifar10": "cifar-10-batches-py/ holding data_batch_1",
        "cifar100": "cifar-100-python/ holding train, test and meta",
        "pathmnist": "pathmnist.npz",
    }[dataset]
    assert expected in err
    assert not root.exists()  # nothing created


def test_python_dash_m_is_the_cli():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "reuse_ray", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "run" in out.stdout and "sweep" in out.stdout
    assert "``" not in out.stdout  # plain text, not the module docstring's markup


def test_help_is_plain_text_and_report_says_it_takes_the_newest(capsys):
    from reuse_ray.cli import build_parser

    for argv in (["--help"], ["report", "--help"], ["fetch", "--help"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        text = capsys.readouterr().out
        assert "``" not in text and "usage: reuse-ray" in text
        if argv[0] == "report":
            assert "newest" in " ".join(text.split())


def test_a_report_that_leaves_runs_out_says_so_in_one_note_line(tmp_path, done, capsys):
    (tmp_path / "done").symlink_to(done, target_is_directory=True)
    failed = _runs_only("failed")(tmp_path)[1]
    assert main(["report", str(done), failed, "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr()
    notes = [ln for ln in out.out.splitlines() if ln.startswith("note:")]
    assert notes == [
        "note: excluded 1 unfinished runs {'failed': 1} (the report compares finished runs only)"
    ]
    assert "Warning" not in out.err


@pytest.mark.ray
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_cluster_that_does_not_answer_leaves_no_results_folder(
    command, tmp_path, capsys, monkeypatch
):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("REUSE_RAY_CONNECT_TIMEOUT", "5")
    make = run_args if command == "run" else (lambda *a: sweep_file(SWEEP))
    args = make("--backend", "ray")(tmp_path) if command == "run" else make()(tmp_path)
    args += ["--address", f"127.0.0.1:{port}"]
    assert main(args) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and f"127.0.0.1:{port}" in err[0], err
    assert not (tmp_path / "res").exists()  # nothing created before the run could start


def test_an_exception_in_the_users_method_file_is_their_error_with_their_frames(tmp_path, capsys):
    source = "def helper():\n    return 1 / 0\n\n\nhelper()\n"
    assert main(run_module(source)(tmp_path)) == 2
    err = capsys.readouterr().err
    first, *frames = err.splitlines()
    mine = str(tmp_path / "mine.py")
    assert first.startswith("reuse-ray: method.module") and "ZeroDivisionError" in first
    assert f"({mine}, line 2)" in first  # the line that raised
    assert f'File "{mine}", line 5' in err and f'File "{mine}", line 2' in err
    assert "bug in reuse_ray" not in err and "Traceback" not in err
    assert not any("reuse_ray/" in ln for ln in frames)  # the user's frames only


def test_a_studys_leaderboard_with_a_bad_reference_prints_nothing_but_the_error(capsys):
    # the study's header line used to go out before the reference was checked
    study = Path(__file__).resolve().parents[1] / "results" / "study_fashionmnist"
    assert main(["report", str(study), "--leaderboard", "--reference", "nosuch"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("reuse-ray: --reference 'nosuch' is not an arm") and err.count("\n") == 1


def test_the_leaderboard_takes_its_reference_from_the_command_line(done, capsys):
    assert main(["report", str(done), "--leaderboard", "--reference", "fedavg"]) == 0
    out = capsys.readouterr().out
    assert "Δ test acc vs fedavg" in out


def test_a_removed_working_directory_is_named(tmp_path, capsys, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert main(["fetch", "digits"]) == 2
    err = capsys.readouterr().err
    assert "the working directory of this process no longer exists" in err
    assert "Traceback" not in err


def test_a_trial_process_ending_as_asked_prints_nothing(capsys):
    """Ray's SIGTERM handler raises SystemExit in an idle trial process at a stage's end; the
    trial's unraisable hook drops it, and shows any other exception."""
    import sys

    from reuse_ray.tuning.trainable import quiet_shutdown

    before = sys.unraisablehook
    try:
        quiet_shutdown()

        class Ends:  # a finalizer that raises, as Ray's SIGTERM handler makes one do
            def __init__(self, exc):
                self.exc = exc

            def __del__(self):
                raise self.exc

        Ends(SystemExit(1))  # collected at once: its exception cannot be raised anywhere
        assert capsys.readouterr().err == ""
        Ends(ValueError("shown"))
        assert "ValueError: shown" in capsys.readouterr().err
    finally:
        sys.unraisablehook = before


def test_a_sweep_file_has_named_scales_as_a_study_file_does(tmp_path):
    """``--scale NAME`` means the same for both kinds of file: the file's ``scales.NAME``
    overrides, applied before ``--set``; a run of the file's base ignores the block."""
    from reuse_ray.configio import load_run_config
    from reuse_ray.tuning import load_spec

    path = _file(tmp_path, "s.yaml", SCALED)
    assert load_spec(path).search.num_samples == 2
    assert load_spec(path, scale="tiny").search.num_samples == 1
    assert load_spec(path, ["search.num_samples=3"], scale="tiny").search.num_samples == 3
    assert load_run_config(path, []).fl.rounds == 1


@pytest.mark.parametrize("kind", ["sweep", "study"])
@pytest.mark.parametrize("how", ["--address", "engine.ray_address"])
def test_either_kind_of_file_joins_the_cluster_it_names(kind, how, tmp_path, capsys, monkeypatch):
    """``--address`` means the same for a sweep file and a study file, and so does the file's
    own ``engine.ray_address`` (a sweep's base, a study's workload): a cluster that does not
    answer is one line naming it, and no results folder is made."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("REUSE_RAY_CONNECT_TIMEOUT", "5")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    study = kind == "study"
    args = ["sweep", f"sweeps/{'study' if study else 'quickstart'}.yaml"]
    args += ["--results", str(tmp_path / "res")] + (["--scale", "small"] if study else [])
    where = "workloads.digits" if study else "base"
    if how == "--address":
        args += ["--address", address]
    else:
        args += ["--set", f"{where}.engine.ray_address={address}"]
    assert main(args) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and f"cannot reach a Ray cluster at {address}" in err[0], err
    assert not (tmp_path / "res").exists()


def test_a_refused_token_is_one_line_that_says_so(tmp_path, capsys, monkeypatch):
    """Ray's own ``AuthenticationError`` (no token, or another cluster's, under
    ``RAY_AUTH_MODE=token``) is one line naming the token and where it comes from, exit 2 —
    it was 'unexpected error … a bug in reuse_ray'. Ray's init is made to raise it, as it does
    when the head refuses the token (the cluster walk-through test refuses one for real)."""
    import socket

    import ray

    def refuse(*args, **kwargs):
        raise ray.exceptions.AuthenticationError(
            "Authentication token is missing or invalid. Set RAY_AUTH_TOKEN."
        )

    with socket.socket() as server:  # something listens, so the address probe passes
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        monkeypatch.setattr(ray, "init", refuse)
        args = sweep_file(SWEEP)(tmp_path) + ["--address", f"127.0.0.1:{port}"]
        assert main(args) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    assert "refused this process's token" in err[0] and "RAY_AUTH_TOKEN" in err[0], err
    assert "bug" not in err[0] and not (tmp_path / "res").exists()
