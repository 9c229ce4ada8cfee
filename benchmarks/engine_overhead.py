"""Engine overhead on workload W: every engine as its own process, interleaved, in one run.

W (``workload_w.py``): 20,000 synthetic 1×28×28 images, 50 clients (Dirichlet 0.5), 10 a round
by reuse_ray's keyed schedule, 3 local epochs, batch 128, SGD 0.05 / 0.9 / 1e-4, dense FedAvg,
validation after every round; on the unpadded ``cnn_valid`` (the classic MNIST CNN a user
compares against) and on the project's padded ``cnn`` (hidden 128, about twice the convolution
work).

Arms, each launched as a fresh process (``--arms``):
  plain-2t  a plain PyTorch FedAvg loop, no framework, 2 threads (its best on 2 cores)
  plain-2t-cl  the same loop with channels-last convolution weights (what ``ray-cl`` runs)
  plain-2t-keep  the same loop with malloc keeping freed memory, as reuse_ray's processes do
            (``reuse_ray.allocator.retain_freed_memory``)
  plain-1t  the same loop at 1 thread (plain-1t-cl: channels-last)
  local     reuse_ray's sequential local engine (1 thread)
  ray       reuse_ray's Ray engine (client-worker actors of 1 CPU, 1 thread each; the server
            in worker 0's process, ``engine.server_process: worker``, the default)
  ray-own   the Ray engine with the server in an actor process of its own
            (``engine.server_process: own``)
  ray-attached  the Ray engine connecting to a Ray instance that was already running (as a
            job submitted to a cluster does): a fresh one per repeat, started before the launch
            and left idle until its processes settle; its processes and workers are measured
            with the arm, their CPU counted from the launch on
  ray-cl    the Ray engine with ``engine.channels_last: true`` (channels-last convolutions)
  ray-malloc-default  the Ray engine with malloc left at its defaults (``REUSE_RAY_MALLOC=default``)
  flower    Flower 1.42's simulation runtime (``peer_flower.py``, 2 actors × 1 CPU), run by
            the interpreter ``--flower-python`` names (its own venv: see peer_flower.py)

For each: start-up (launch to the start of round 1), the first round (to its end, validation
included; on the Ray engine, whose validation of round t runs beside round t+1, to the end of
round 1's training and server step), s/round (median of rounds 2–5, from one round's end to
the next, validation included), launch-to-exit wall and
the peak PSS of the whole process tree (``/proc/<pid>/smaps_rollup``, summed over the launched
process and every descendant — Ray's GCS, raylet, agents and workers included — sampled every
0.5 s by a thread at the lowest priority, so the sampling takes idle time, not the arm's).
Medians over ``--repeats``; ratios against plain-2t of the same run. A second table says
where the CPU went during rounds 2–5 (``/proc/<pid>/stat``, sampled with the PSS): cores used by
the launched process (the driver), the client workers (each), the server actor and every other
process (Ray's own; Flower's actors), the share of it spent in the kernel, and the workers'
minor page faults per round. A third says what the tree held at its peak: the PSS (and private
anonymous memory) of the driver, each worker, the server and the other processes, the largest named.
A fourth says what start-up cost: the CPU seconds the tree spent from launch to round 1 by
role (reaped children counted with their parent), their total, and that total ÷ the cores —
the least wall time start-up can take on this machine.

    python benchmarks/engine_overhead.py [--rounds 6] [--repeats 2] [--models cnn_valid,cnn]
        [--arms plain-2t,plain-1t,local,ray,flower] [--flower-python .venv-flower/bin/python]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import proctree

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ARMS = (
    "plain-2t",
    "plain-2t-cl",
    "plain-2t-keep",
    "plain-1t",
    "plain-1t-cl",
    "local",
    "ray",
    "ray-own",
    "ray-attached",
    "ray-cl",
    "ray-malloc-default",
    "flower",
)


# ------------------------------------------------------------------ the arms (child processes)


def child_plain(
    model: str,
    rounds: int,
    samples: int,
    threads: int,
    channels_last: bool = False,
    keep: bool = False,
) -> dict:
    import torch
    import workload_w as W

    if keep:
        from reuse_ray.allocator import retain_freed_memory

        retain_freed_memory()
    torch.set_num_threads(threads)
    w = W.load(model, samples)
    net = w.model()
    if channels_last:
        net.to(memory_format=torch.channels_last)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    stamps: dict = {"start1": time.time(), "ends": []}
    for t in range(1, rounds + 1):
        selected = W.schedule(t)
        total = sum(len(w.parts[i]) for i in selected)
        new = {k: torch.zeros_like(v) for k, v in state.items()}
        for i in selected:
            net.load_state_dict(state)
            n = W.train_client(net, w, i, t)
            for k, v in net.state_dict().items():
                new[k] += v * (n / total)
        state = new
        net.load_state_dict(state)
        W.evaluate_state(net, w)
        stamps["ends"].append(time.time())
    return stamps


class _Stamped:
    """A backend that notes when round 1 starts (the engine's rows say when each round is
    recorded, which on the Ray engine is after the next round trained)."""

    def __init__(self, inner, stamps: dict):
        self.inner, self.stamps, self.name = inner, stamps, inner.name

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def run_round(self, t: int, selected: list[int]):
        if t == 1:
            self.stamps["start1"] = time.time()
        report = self.inner.run_round(t, selected)
        if t == 1:  # round 1 trained; on the Ray engine its validation runs beside round 2
            self.stamps["first_end"] = time.time()
        return report


def child_engine(model: str, rounds: int, samples: int, arm: str) -> dict:
    import workload_spec as W  # no torch: the Ray engine's driver imports none

    from reuse_ray.config import RunConfig
    from reuse_ray.configio import from_dict
    from reuse_ray.engine import RunHooks
    from reuse_ray.engine.observers import OnRound
    from reuse_ray.runner import make_backend, run_fl

    stamps: dict = {"ends": []}
    backend = "ray" if arm.startswith("ray") else "local"
    results = tempfile.mkdtemp(prefix=f"overhead-{arm}-")
    raw = W.run_config(model, rounds, samples, backend, results)
    raw["engine"]["channels_last"] = arm.endswith("-cl")
    raw["engine"]["server_process"] = "own" if arm == "ray-own" else "worker"
    cfg = from_dict(RunConfig, raw)
    ends = OnRound(lambda _row, _blob: stamps["ends"].append(time.time()))
    hooks = RunHooks(observers=(ends,), evaluate_test=False, tensorboard=False)
    run_fl(cfg, backend=_Stamped(make_backend(cfg), stamps), hooks=hooks)
    return stamps


def run_child(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE))
    if args.child.startswith("plain-"):
        out = child_plain(
            args.model,
            args.rounds,
            args.samples,
            int(args.child[6]),
            args.child.endswith("-cl"),
            args.child.endswith("-keep"),
        )
    else:
        out = child_engine(args.model, args.rounds, args.samples, args.child)
    print("RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------ measuring a process tree


def _role(pid: int, root: int, cmd: bytes) -> str:
    """driver (``root``), worker (a ``ClientWorkerActor``, or the ``ServingWorkerActor`` that
    also hosts the server), server (a ``ServerActor`` of its own) or ray (every other
    process: Ray's own, Flower's)."""
    return (
        "driver"
        if pid == root
        else "worker"
        if b"WorkerActor" in cmd
        else "server"
        if b"ServerActor" in cmd
        else "ray"
    )


def _label(cmd: bytes) -> str:
    """A process's short name: ``ray::Name`` as Ray titles it, else the module (``-m``),
    script or binary."""
    words = [w for w in cmd.split(b"\0") if w]
    if not words:
        return "?"
    if words[0].startswith(b"ray::"):
        return words[0].decode(errors="replace").split()[0]
    if len(words) > 2 and words[1] == b"-m":  # python -m module: the module
        return words[2].decode(errors="replace")
    scripts = [w for w in words[1:] if w.endswith(b".py")]
    return Path((scripts[0] if scripts else words[0]).decode(errors="replace")).name


def tree_memory(root: int, cluster: int | None = None) -> dict[int, tuple[str, str, int, int]]:
    """``pid -> (role, short name, PSS bytes, anonymous bytes)`` for ``root`` and all its
    descendants (``/proc/<pid>/smaps_rollup``), and those of ``cluster``."""
    out = {}
    for pid in proctree.tree(root, cluster):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            fields = proctree.smaps(pid)
        except (OSError, ValueError, IndexError):
            continue
        out[pid] = (
            _role(pid, root, cmd),
            _label(cmd),
            fields.get("Pss", 0),
            fields.get("Anonymous", 0),
        )
    return out


def tree_cpu(
    root: int, cluster: int | None = None
) -> dict[int, tuple[str, float, float, int, float]]:
    """``pid -> (role, user s, kernel s, minor faults, reaped children's s)`` for ``root`` and
    its descendants (and those of ``cluster``); role: driver (``root``), worker, server or ray.
    The last is the CPU of the process's children that have exited and been waited for
    (``cutime + cstime``): a helper its parent reaped leaves the tree but not the sum (a Ray
    worker that exits is reaped by no one: see :func:`startup_cpu`)."""
    out = {}
    for pid in proctree.tree(root, cluster):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2 :].split()
        out[pid] = (
            _role(pid, root, cmd),
            int(f[11]) / proctree.TICK,
            int(f[12]) / proctree.TICK,
            int(f[7]),
            (int(f[13]) + int(f[14])) / proctree.TICK,
        )
    return out


def cpu_window(samples: list, start: float, end: float) -> dict:
    """Cores used by role between the samples nearest ``start`` and ``end``, the kernel's
    share of all of it, and the workers' minor faults."""
    if not samples:
        return {}
    a = min(samples, key=lambda x: abs(x[0] - start))
    b = min(samples, key=lambda x: abs(x[0] - end))
    span = b[0] - a[0]
    if span <= 0:
        return {}
    cores: dict[str, list[float]] = {}
    kernel = total = faults = 0.0
    for pid, (role, user, sys_, flt, _) in b[1].items():
        u0, s0, f0 = a[1].get(pid, (role, 0.0, 0.0, 0, 0.0))[1:4]
        used = (user - u0) + (sys_ - s0)
        cores.setdefault(role, []).append(used / span)
        kernel += sys_ - s0
        total += used
        if role == "worker":
            faults += flt - f0
    return {
        "cores": cores,
        "kernel": kernel / total if total else 0.0,
        "faults": faults,
        "span": span,
    }


def startup_cpu(samples: list, start1: float, base: dict | None = None) -> dict[str, float]:
    """CPU seconds the tree spent from launch to the start of round 1, by role: each process
    as last sampled before ``start1`` (with its reaped children's time), less what it had
    spent by the launch (``base``, a :func:`tree_cpu` taken then: an attached arm's Ray
    processes were running before it; every other process started after it). A process that
    exited before round 1 counts as last seen: Ray's raylet ignores SIGCHLD, so the kernel
    adds the time of a worker that exits (the data-loading task's) to no parent, and only
    the samples saw it (up to a sampling interval of its end is missed). On ``n`` cores
    start-up cannot take less wall time than this total ÷ ``n``."""
    last: dict[int, tuple[str, float]] = {}
    for _, procs in (x for x in samples if x[0] <= start1):
        for pid, (role, user, sys_, _, reaped) in procs.items():
            spent = user + sys_ + reaped
            if base and pid in base:
                spent -= sum(base[pid][1:3]) + base[pid][4]
            last[pid] = (role, spent)
    out: dict[str, float] = {}
    for role, spent in last.values():
        out[role] = out.get(role, 0.0) + spent
    return out


def launch(cmd: list[str], env: dict[str, str], cluster: int | None = None) -> dict:
    """Run one arm; returns its stamps plus launch-to-exit wall, peak tree PSS and where the
    CPU went in rounds 2–5. ``cluster``: the pid of the process that started the Ray
    instance the arm joins (its descendants are measured with the arm's tree)."""
    base = tree_cpu(cluster) if cluster else None
    t_launch = time.time()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
    )
    samples: list = []
    peaks: list = [0, {}]  # the tree's peak PSS and its processes then
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()

    def sample() -> None:
        # reading smaps_rollup of a Ray tree costs ~50 ms of CPU a sample (0.085 of a core at
        # two samples a second): at the lowest priority the sampler takes idle time, not the
        # arm's (nice is per thread on Linux; the arm was forked by the main thread)
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        while proc.poll() is None:
            mem = tree_memory(proc.pid, cluster)
            total = sum(pss for _, _, pss, _ in mem.values())
            if total > peaks[0]:
                peaks[:] = [total, mem]
            samples.append((time.time(), tree_cpu(proc.pid, cluster)))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc.wait()
    sampler.join()
    peak, at_peak = peaks
    reader.join()
    wall = time.time() - t_launch
    result = [ln for ln in lines if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not result:
        tail = "".join(lines[-15:])
        raise SystemExit(f"arm {' '.join(cmd[-8:])} failed (exit {proc.returncode}):\n{tail}")
    stamps = json.loads(result[-1][len("RESULT ") :])
    ends = stamps["ends"]
    steady = [b - a for a, b in zip(ends[:4], ends[1:5], strict=True)]  # rounds 2..5
    return {
        "startup": stamps["start1"] - t_launch,
        "first": stamps.get("first_end", ends[0]) - stamps["start1"],
        "round": statistics.median(steady),
        "wall": wall,
        "pss": peak,
        "cpu": cpu_window(samples, ends[0], ends[4]),
        "startup_cpu": startup_cpu(samples, stamps["start1"], base),
        "at_peak": at_peak,
    }


def cpu_line(arm: str, cpu: dict, rounds: float) -> str:
    """One row of the CPU table: cores by role, kernel share, worker faults per round."""
    if not cpu:
        return f"  | {arm} | – | – | – | – | – | – |"
    c = cpu["cores"]
    workers = " + ".join(f"{x:.2f}" for x in sorted(c.get("worker", []), reverse=True)) or "–"
    per_round = cpu["faults"] / rounds if rounds else 0.0
    return (
        f"  | {arm} | {sum(c.get('driver', [])):.2f} | {workers} | "
        f"{sum(c.get('server', [])):.2f} | {sum(c.get('ray', [])):.2f} | "
        f"{100 * cpu['kernel']:.1f} % | {per_round:,.0f} |"
    )


def startup_line(arm: str, wall: float, cpu: dict[str, float]) -> str:
    """One row of the start-up table: CPU seconds by role, their total and its floor."""
    if not cpu:
        return f"  | {arm} | {wall:.1f} | – | – | – | – | – | – |"
    total = sum(cpu.values())
    cols = " | ".join(
        f"{cpu[r]:.1f}" if r in cpu else "–" for r in ("driver", "worker", "server", "ray")
    )
    return f"  | {arm} | {wall:.1f} | {cols} | {total:.1f} | {total / (os.cpu_count() or 1):.1f} |"


def memory_line(arm: str, at_peak: dict) -> str:
    """One row of the memory table: PSS (private memory in brackets) of the driver, each
    worker, the server and the other processes, the largest of those named, at the tree's
    peak."""
    if not at_peak:
        return f"  | {arm} | – | – | – | – | – |"

    def gb(pss: int, anon: int) -> str:
        return f"{pss / 1e9:.2f} ({anon / 1e9:.2f})"

    by: dict[str, list] = {}
    for role, label, pss, anon in at_peak.values():
        by.setdefault(role, []).append((pss, anon, label))

    def total(role: str) -> str:
        got = by.get(role, [])
        return gb(sum(x[0] for x in got), sum(x[1] for x in got)) if got else "–"

    workers = " + ".join(gb(p, a) for p, a, _ in sorted(by.get("worker", []), reverse=True))
    others = sorted(by.get("ray", []), reverse=True)
    named = ", ".join(f"{label} {p / 1e6:.0f}" for p, _, label in others[:4])
    rest = f"{total('ray')}: {named} MB" if others else "–"
    return (
        f"  | {arm} | {total('driver')} | {workers or '–'} | {total('server')} | {rest} | "
        f"{sum(x[2] for x in at_peak.values()) / 1e9:.2f} |"
    )


@contextlib.contextmanager
def ray_cluster(env: dict[str, str]):
    """A running Ray instance for the ``ray-attached`` arm, as a cluster's head node is:
    ``ray start --head --block`` on a free port of 127.0.0.1, in a temporary folder of its own,
    without the dashboard (as the local arms start Ray), once it says it started (or exits:
    then its output is the error). Yields (the ``ray start`` process's
    pid, the arm's environment: the address, and the token the arm must present). It is
    first left idle until its processes have settled (under 0.1 of a core over a second, at
    most 30 s), as a cluster a job is submitted to has; ``ray start`` is stopped by SIGTERM,
    which ends every process it started."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="overhead-cluster-")
    # Ray's single-machine mode names the node 127.0.0.1 and binds its servers there; an arm
    # joining it must be in the same mode to find its raylet
    local = dict(env, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    cmd = [
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--head",
        "--block",
        "--port",
        str(port),
        "--node-ip-address",
        "127.0.0.1",
        "--include-dashboard",
        "false",
        "--temp-dir",
        temp,
        "--disable-usage-stats",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=local, cwd=ROOT
    )
    try:
        said: list[str] = []
        for line in proc.stdout:  # type: ignore[union-attr]
            said.append(line)
            if "Ray runtime started" in line:
                break
        if proc.poll() is not None or not any("Ray runtime started" in x for x in said):
            raise SystemExit("ray start --head failed:\n" + "".join(said[-15:]))
        threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()  # type: ignore[union-attr]
        t_end, prev = time.time() + 30, None
        while time.time() < t_end:
            now = (time.time(), sum(u + k + r for _, u, k, _, r in tree_cpu(proc.pid).values()))
            if prev and (now[1] - prev[1]) / (now[0] - prev[0]) < 0.1:
                break
            prev = now
            time.sleep(1.0)
        yield proc.pid, dict(local, RAY_ADDRESS=f"127.0.0.1:{port}", RAY_AUTH_MODE="token")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)


def arm_command(arm: str, args: argparse.Namespace, model: str) -> list[str] | None:
    common = ["--model", model, "--rounds", str(args.rounds), "--samples", str(args.samples)]
    if arm == "flower":
        if not args.flower_python:
            return None
        return [args.flower_python, str(HERE / "peer_flower.py"), *common]
    return [sys.executable, str(Path(__file__).resolve()), "--child", arm, *common]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--models", default="cnn_valid,cnn")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument(
        "--flower-python",
        default=os.environ.get("REUSE_RAY_FLOWER_PYTHON"),
        help="the Flower venv's python (default $REUSE_RAY_FLOWER_PYTHON; "
        "without it the flower arm is left out)",
    )
    ap.add_argument("--child", choices=ARMS[:-1], help=argparse.SUPPRESS)
    ap.add_argument("--model", default="cnn_valid", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return run_child(args)
    if args.rounds < 6:
        raise SystemExit("--rounds: at least 6 (s/round is the median of rounds 2-5)")
    arms = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        raise SystemExit(f"--arms: unknown {unknown} — allowed: {', '.join(ARMS)}")
    if "flower" in arms and not args.flower_python:
        print("flower arm left out: no --flower-python (see benchmarks/peer_flower.py)")
        arms.remove("flower")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    env.pop("RAY_ADDRESS", None)
    for model in args.models.split(","):
        print(
            f"workload W on {model}: {args.samples} images, 50 clients, 10/round, 3 epochs, "
            f"batch 128, validation every round, {args.rounds} rounds, "
            f"{args.repeats} interleaved repeats",
            flush=True,
        )
        runs: dict[str, list[dict]] = {a: [] for a in arms}
        for rep in range(args.repeats):
            for arm in arms:
                arm_env = (
                    dict(env, REUSE_RAY_MALLOC="default") if arm == "ray-malloc-default" else env
                )
                if arm == "ray-attached":
                    with ray_cluster(env) as (cluster, cluster_env):
                        m = launch(arm_command(arm, args, model), cluster_env, cluster)
                else:
                    m = launch(arm_command(arm, args, model), arm_env)
                runs[arm].append(m)
                print(
                    f"  [{rep + 1}/{args.repeats}] {arm:8s} {m['round']:6.2f} s/round, "
                    f"start-up {m['startup']:5.1f} s, first round {m['first']:5.2f} s, "
                    f"wall {m['wall']:5.1f} s, peak PSS {m['pss'] / 1e9:4.2f} GB",
                    flush=True,
                )
        med = {
            a: {
                k: statistics.median(r[k] for r in runs[a])
                for k in runs[a][0]
                if k not in ("cpu", "at_peak", "startup_cpu")
            }
            for a in arms
        }
        ref = med.get("plain-2t")
        print(f"\n  {model}, medians of {args.repeats}:")
        print(
            "  | engine | s/round (2–5) | × plain-2t | start-up s | first round ÷ steady "
            "| launch-to-exit s | × plain-2t | peak PSS GB |"
        )
        print("  |---|---|---|---|---|---|---|---|")
        for a in arms:
            m = med[a]
            x = f"{m['round'] / ref['round']:.3f}" if ref else "–"
            xw = f"{m['wall'] / ref['wall']:.2f}" if ref else "–"
            print(
                f"  | {a} | {m['round']:.2f} | {x} | {m['startup']:.1f} | "
                f"{m['first'] / m['round']:.2f} | {m['wall']:.1f} | {xw} | "
                f"{m['pss'] / 1e9:.2f} |"
            )
        print(f"\n  {model}, where the CPU went in rounds 2–5 (the last repeat of each arm):")
        print(
            "  | engine | driver cores | worker cores | server cores | other processes' cores "
            "| kernel share | worker minor faults / round |"
        )
        print("  |---|---|---|---|---|---|---|")
        for a in arms:
            last = runs[a][-1]
            print(cpu_line(a, last["cpu"], 4 if last["cpu"] else 0))
        print(
            f"\n  {model}, CPU seconds from launch to round 1 (the last repeat of each arm; "
            f"the floor is their total ÷ {os.cpu_count()} cores):"
        )
        print(
            "  | engine | start-up s | driver | workers | server | other processes | total "
            "| floor s |"
        )
        print("  |---|---|---|---|---|---|---|---|")
        for a in arms:
            print(startup_line(a, runs[a][-1]["startup"], runs[a][-1]["startup_cpu"]))
        print(
            f"\n  {model}, memory at the tree's peak PSS (the last repeat of each arm; GB, "
            "PSS with the private anonymous memory in brackets):"
        )
        print(
            "  | engine | driver | workers | server | other processes (the largest, PSS) | tree |"
        )
        print("  |---|---|---|---|---|---|")
        for a in arms:
            print(memory_line(a, runs[a][-1]["at_peak"]))
        print(flush=True)


if __name__ == "__main__":
    main()
