"""Shared fixtures: tiny datasets written in their real on-disk formats, and small run configs."""

from __future__ import annotations

import dataclasses
import gzip
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from reuse_ray.config import RunConfig
from reuse_ray.configio import from_dict
from reuse_ray.data import idx


@pytest.fixture(autouse=True, scope="session")
def _results_root(tmp_path_factory):
    """The default results root ($REUSE_RAY_RESULTS) of every test: never the user's home."""
    before = os.environ.get("REUSE_RAY_RESULTS")
    os.environ["REUSE_RAY_RESULTS"] = str(tmp_path_factory.mktemp("results_root"))
    yield
    if before is None:
        os.environ.pop("REUSE_RAY_RESULTS", None)
    else:
        os.environ["REUSE_RAY_RESULTS"] = before


def write_idx(path: Path, arr: np.ndarray, compress: bool = False) -> None:
    """Write an IDX (SN3 Pascal-Vincent) file exactly as the MNIST distribution stores it."""
    assert arr.dtype == np.uint8
    header = struct.pack(">I", (0x08 << 8) | arr.ndim) + b"".join(
        struct.pack(">I", s) for s in arr.shape
    )
    data = header + arr.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def tiny_images(
    n: int, shape: tuple[int, ...], classes: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    x = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    return x, y.astype(np.uint8)


def write_mnist_like(
    root: Path,
    folder: str,
    n_train: int = 60,
    n_test: int = 20,
    classes: int = 10,
    prefix: str = "",
) -> dict[str, np.ndarray]:
    """torchvision layout: ROOT/<Class>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte."""
    raw = root / folder / "raw"
    out = {}
    for split, n, seed in (("train", n_train, 0), ("test", n_test, 1)):
        x, y = tiny_images(n, (28, 28), classes, seed)
        if prefix:
            img = raw / f"{prefix}-{split}-images-idx3-ubyte"
            lab = raw / f"{prefix}-{split}-labels-idx1-ubyte"
        else:
            tag = "train" if split == "train" else "t10k"
            img = raw / f"{tag}-images-idx3-ubyte"
            lab = raw / f"{tag}-labels-idx1-ubyte"
        write_idx(img, x)
        write_idx(lab, y)
        out[f"{split}_x"], out[f"{split}_y"] = x, y
    return out


def write_cifar_like(
    root: Path, hundred: bool = False, per_batch: int = 12, n_test: int = 20
) -> dict[str, np.ndarray]:
    """torchvision layout: the pickled batches of cifar-10-batches-py / cifar-100-python."""
    classes = 100 if hundred else 10
    folder = root / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    folder.mkdir(parents=True, exist_ok=True)
    label_key = "fine_labels" if hundred else "labels"
    rng = np.random.default_rng(3)
    out: dict[str, list] = {"train_x": [], "train_y": []}
    train_files = ["train"] if hundred else [f"data_batch_{i}" for i in range(1, 6)]
    for name in train_files:
        x = rng.integers(0, 256, size=(per_batch, 3 * 32 * 32), dtype=np.uint8)
        y = [int(v) for v in rng.integers(0, classes, size=per_batch)]
        with open(folder / name, "wb") as f:
            pickle.dump({"data": x, label_key: y}, f)
        out["train_x"].append(x)
        out["train_y"].extend(y)
    x = rng.integers(0, 256, size=(n_test, 3 * 32 * 32), dtype=np.uint8)
    y = [int(v) for v in rng.integers(0, classes, size=n_test)]
    with open(folder / ("test" if hundred else "test_batch"), "wb") as f:
        pickle.dump({"data": x, label_key: y}, f)
    meta_name, meta_key = (
        ("meta", "fine_label_names") if hundred else ("batches.meta", "label_names")
    )
    with open(folder / meta_name, "wb") as f:
        pickle.dump({meta_key: [f"c{i}" for i in range(classes)]}, f)
    return {
        "train_x": np.concatenate(out["train_x"]).reshape(-1, 3, 32, 32),
        "train_y": np.asarray(out["train_y"]),
        "test_x": x.reshape(-1, 3, 32, 32),
        "test_y": np.asarray(y),
    }


def write_pathmnist(root: Path, sizes=(40, 10, 15)) -> dict[str, np.ndarray]:
    """medmnist layout: ROOT/pathmnist.npz, {split}_images (N,28,28,3), {split}_labels (N,1)."""
    rng = np.random.default_rng(5)
    arrays = {}
    for split, n in zip(("train", "val", "test"), sizes, strict=True):
        arrays[f"{split}_images"] = rng.integers(0, 256, size=(n, 28, 28, 3), dtype=np.uint8)
        arrays[f"{split}_labels"] = (np.arange(n) % 9).reshape(-1, 1).astype(np.uint8)
    root.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(root / "pathmnist.npz", **arrays)
    return arrays


def make_layout(*sizes: int):
    """A StateLayout of 1-D tensors of the given sizes (for codec and ledger oracles)."""
    from reuse_ray.state import StateLayout, TensorSpec

    specs, off = [], 0
    for j, d in enumerate(sizes):
        specs.append(TensorSpec(f"t{j}", (d,), d, off, True))
        off += d
    return StateLayout(tuple(specs), off)


def shaped_layout(entries: list[tuple[str, tuple[int, ...]]]):
    """A StateLayout of trainable tensors with the given names and shapes."""
    from reuse_ray.state import StateLayout, TensorSpec

    specs, off = [], 0
    for name, shape in entries:
        n = int(np.prod(shape))
        specs.append(TensorSpec(name, shape, n, off, True))
        off += n
    return StateLayout(tuple(specs), off)


def crash_at(t: int):
    """A local backend that fails in round ``t`` (a killed process, as far as the files are
    concerned)."""
    from reuse_ray.engine import LocalBackend

    class CrashAt(LocalBackend):
        def run_round(self, t_now, selected):
            if t_now == t:
                raise KeyboardInterrupt("killed")
            return super().run_round(t_now, selected)

    return CrashAt()


# the second Ray lane: the modules whose tests start Ray instances of their own in subprocesses
# (a `ray start` head, the CLI, a simulated cluster), each under its own temp dir and ports, and
# modules that start Ray in their worker (ray.init), so that the two lanes take about as long
# (measured on clean clones, --durations: 1,276 s and 1,278 s in the two lanes on 2026-12-07;
# 1,308 s and 1,224 s on 2026-12-08 after the resume tests' sweeps joined one head; 1,253 s and
# 1,240 s once the engine's and the loopback's Ray tests, 27 s and 17 s, moved here; a third
# xdist worker for the tests without Ray took the suite from 1,504 s to 1,732 s, and three Ray
# lanes 1,783 s against 1,537 s for two, on the two cores)
SECOND_LANE = {
    "test_documented_commands.py",
    "test_sweep_resume.py",
    "test_multinode.py",
    "test_s3.py",
    "test_gpu_packing.py",
    "test_my_method.py",
    "test_packing.py",
    "test_engine.py",
    "test_loopback.py",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Lanes (``-n 2 --dist loadgroup``, pyproject.toml): the tests that start Ray (marked
    ``ray``) run in two groups (:data:`SECOND_LANE` and the rest), each in one worker, one test
    after the other — a module that starts Ray in its worker (``ray.init``) does so once and
    shuts it down before the next module — so at most two Ray instances of the suite live at
    once, each with its own ports and temp dir; the other tests fill the workers around them.
    Without xdist the marks do nothing."""
    for item in items:
        if item.get_closest_marker("ray"):
            second = item.path.name in SECOND_LANE
            item.add_marker(pytest.mark.xdist_group("ray_b" if second else "ray_a"))


def small_config(tmp_path: Path, **overrides) -> RunConfig:
    """A few-second FedAvg run on the embedded digits data."""
    base = {
        "seed": 7,
        "data": {"name": "digits"},
        "model": {"name": "cnn", "hidden": 32},
        "train": {"epochs": 1, "batch_size": 32},
        "fl": {"num_clients": 10, "clients_per_round": 4, "rounds": 3, "eval_every": 2},
        "method": {"name": "fedavg", "topk_ratio": 0.2},
        "engine": {"backend": "local"},
        "results_dir": str(tmp_path / "results"),
    }
    for key, value in overrides.items():
        cur = base
        parts = key.split("__")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = value
    return from_dict(RunConfig, base)


SYSTEM_DATA = {k: v.system_dirs for k, v in idx.IDX_DATASETS.items()}  # as the package ships


@pytest.fixture(autouse=True)
def _no_data_env(monkeypatch, tmp_path):
    """Keep tests away from any real data root of the machine, and from the system copies a
    package installed (the real-data tests ask for those with ``system_data``)."""
    monkeypatch.setenv("REUSE_RAY_DATA", str(tmp_path / "no-data-here"))
    os.environ.pop("RAY_ADDRESS", None)
    no_system_copies(monkeypatch)


def no_system_copies(monkeypatch) -> None:
    """The IDX datasets without their system folders (/usr/share/datasets/...)."""
    for name, spec in idx.IDX_DATASETS.items():
        monkeypatch.setitem(idx.IDX_DATASETS, name, dataclasses.replace(spec, system_dirs=()))


@pytest.fixture
def system_data(monkeypatch):
    """The IDX datasets' system folders as the package ships them."""
    for name, dirs in SYSTEM_DATA.items():
        spec = idx.IDX_DATASETS[name]
        monkeypatch.setitem(idx.IDX_DATASETS, name, dataclasses.replace(spec, system_dirs=dirs))


FASHION_MNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


@pytest.fixture
def fashion_mnist(system_data) -> Path:
    """The folder of Debian's ``dataset-fashion-mnist``. Where the package is absent the test
    skips and says why; on CI (``CI`` set) it fails instead: .ci/run installs the package."""
    folder = Path(SYSTEM_DATA["fashionmnist"][0])
    missing = [f for f in FASHION_MNIST_FILES if not (folder / f).is_file()]
    if missing:
        why = (
            f"Fashion-MNIST is not installed ({folder}/{missing[0]} is missing): "
            "apt-get install dataset-fashion-mnist"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{why} — .ci/run installs it, so CI must have it")
        pytest.skip(why)
    return folder


def method_env(
    layout,
    num_clients: int = 2,
    probs=None,
    topk_ratio: float = 1.0,
    error_feedback: bool = False,
    seed: int = 0,
    server_lr: float = 1.0,
):
    """A MethodEnv for building a method directly in a unit oracle."""
    from reuse_ray.algorithms import MethodEnv
    from reuse_ray.config import TrainConfig

    probs = tuple(probs) if probs is not None else (1.0,) * num_clients
    return MethodEnv(
        layout, (), seed, num_clients, probs, server_lr, topk_ratio, error_feedback, TrainConfig()
    )


def received(client: int, value, n: int = 1):
    """A decoded upload: a dense SparseUpdate from a list/tensor, or any value as given."""
    import torch

    from reuse_ray.algorithms import Received
    from reuse_ray.codecs import SparseUpdate

    if isinstance(value, list | tuple) and all(isinstance(v, float | int) for v in value):
        value = torch.tensor(value, dtype=torch.float32)
    if isinstance(value, torch.Tensor):
        value = SparseUpdate(value.numel(), None, value)
    return Received(client, n, value)


def init_ray_for_sweeps(num_cpus: int = 1) -> None:
    """This process's Ray for in-process sweeps and studies, with one CPU unless asked for
    more: a stage's trials run one after another in one reused trial process (its imports,
    ~4 s of CPU, are most of a tiny trial's cost). Trials side by side are tested where they
    matter: the schedulers' module, the small study, and the resume tests' CLI sweeps (which
    start a Ray with every CPU)."""
    import ray

    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now (for a server a test starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_temp_dir() -> str:
    """A short, unique root for a Ray instance a test starts (RAY_TMPDIR); Unix socket paths
    under it stay within their length limit."""
    import tempfile

    return tempfile.mkdtemp(prefix="rrt-", dir="/tmp")


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process this user can read."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="ignore")
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        table[int(entry)] = (ppid, cmd)
    return table


def start_ray_head(env: dict[str, str], num_cpus: int = 2) -> str:
    """``ray start --head`` under ``env`` (its ``RAY_TMPDIR``: stop it with
    :func:`stop_ray_under`), on free ports, without the dashboard; returns the address a driver
    joins it by (``RAY_ADDRESS``, as on a workstation with a ``ray start`` instance) — its
    start-up (~10 s) paid once for the commands of a module, not once per command."""
    import shutil
    import subprocess

    port = free_port()
    head = [shutil.which("ray") or "ray", "start", "--head", "--num-cpus", str(num_cpus)]
    head += ["--port", str(port), "--dashboard-agent-listen-port", str(free_port())]
    head += ["--include-dashboard", "false", "--disable-usage-stats"]
    env = {k: v for k, v in env.items() if k != "RAY_ADDRESS"}
    start = subprocess.run(head, env=env, capture_output=True, text=True, timeout=120)
    assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
    return f"127.0.0.1:{port}"


def stop_ray_under(temp_dir: str) -> int:
    """End the Ray processes a test started — and only those: the ones whose command line names
    its own temp dir (gcs, raylet, the monitor, the Ray Client server) and every process below
    them (the agents and workers, whose command lines do not name it: they outlived their
    raylet). Waits until they are gone. Returns how many were ended."""
    import signal
    import time

    table = _process_table()
    doomed = {p for p, (_, cmd) in table.items() if temp_dir in cmd and p != os.getpid()}
    grew = True
    while grew:  # their descendants, whatever their command lines
        below = {p for p, (pp, _) in table.items() if pp in doomed and p != os.getpid()}
        grew = not below <= doomed
        doomed |= below
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in doomed):
        time.sleep(0.1)
    import shutil

    shutil.rmtree(temp_dir, ignore_errors=True)
    return len(doomed)


def _alive(pid: int) -> bool:
    """A process that has not exited (a zombie awaiting its parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
