"""The kind of machine a process computes on: what decides a run's last bits there.

A config and a seed give the same Parquet metrics bit for bit on machines of one kind
(docs/methods.md, Conventions: Reproducibility). torch's kernels can take other paths on another
processor or GPU (MKL's matrix products, oneDNN's convolutions, ATen's vector code, cuDNN), so a
pool whose client workers run on several kinds trains each client on whichever worker was free,
and a rerun of the same config may then differ. The Ray backend collects every worker's kind
when the run starts and says so when they differ.
"""

from __future__ import annotations

import os
import platform
from collections import Counter


def cpu_info() -> dict[str, str]:
    """The processor's ``vendor_id`` and ``model name`` from /proc/cpuinfo (empty where
    unknown)."""
    found = {"vendor_id": "", "model name": ""}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in found and not found[key]:
                    found[key] = value.strip()
                if all(found.values()):
                    break
    except OSError:
        pass
    return found


def _cpu_name() -> str:
    """The processor's vendor and model (else what platform knows)."""
    name = " ".join(v for v in cpu_info().values() if v)
    return name or platform.processor() or platform.machine()


def machine_kind(device: str = "cpu") -> dict[str, str]:
    """What decides this process's last bits: the processor, torch's version and the CPU
    capability ATen dispatches to, and on ``cuda`` the GPU's name."""
    import torch

    # plain strings (torch's version is a str subclass of torch's): the kind travels to a
    # driver that imports no torch
    kind = {
        "cpu": _cpu_name(),
        "torch": str(torch.__version__),
        "capability": str(torch.backends.cpu.get_cpu_capability()),
    }
    if device == "cuda" and torch.cuda.is_available():
        kind["gpu"] = str(torch.cuda.get_device_name(torch.cuda.current_device()))
    return kind


def describe(kind: dict[str, str]) -> str:
    """A kind in a few words: ``AuthenticAMD AMD EPYC, torch 2.14.1, AVX512``."""
    parts = [kind.get("cpu", "?"), f"torch {kind.get('torch', '?')}", kind.get("capability", "?")]
    if "gpu" in kind:
        parts.append(kind["gpu"])
    return ", ".join(parts)


def mixed_kinds_note(kinds: list[dict[str, str]]) -> str | None:
    """One line for a pool whose workers run on more than one kind of machine (None for one
    kind): how many workers on each, and what it means for a rerun."""
    counts = Counter(describe(kind) for kind in kinds)
    if len(counts) < 2:
        return None
    mix = "; ".join(f"{n} on {name}" for name, n in sorted(counts.items()))
    return (
        f"the client workers run on {len(counts)} kinds of machine ({mix}): a client's "
        "update can differ in the last bits with the worker that trains it, so a rerun "
        "of this config may not reproduce this run bit for bit; for reproducible runs "
        "give the client workers nodes of one kind"
    )


def check_environment(cfg) -> None:
    """What a run (a ``RunConfig``) needs from this machine, checked before any data or Ray
    work: a writable results directory, and CUDA where ``engine.device=cuda`` runs in this
    process."""
    from .errors import UserError
    from .results.storage import Storage

    Storage.of(cfg.results_dir).check_writable()
    e = cfg.engine
    starts_local_ray = e.backend == "ray" and not (e.ray_address or os.environ.get("RAY_ADDRESS"))
    if e.device == "cuda" and (e.backend == "local" or starts_local_ray):
        import torch

        if not torch.cuda.is_available():
            raise UserError(
                "engine.device: cuda, but this machine has no usable GPU — "
                "allowed here: cpu or auto"
            )
    cpus = os.cpu_count() or 1
    if starts_local_ray and e.device != "cuda" and e.cpu_per_worker > cpus:
        raise UserError(
            f"engine.cpu_per_worker: {e.cpu_per_worker:g}, but this machine has "
            f"{cpus} CPUs — allowed: (0, {cpus}]"
        )


def describe_machine() -> str:
    """This machine in one line: CPUs and their model, memory, operating system."""
    cpu = cpu_info()["model name"] or platform.processor() or platform.machine()
    mem = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages / 2**30:.0f} GiB"
    except (ValueError, OSError):
        pass
    return f"{os.cpu_count()} CPUs ({cpu}){mem}, {platform.system()}"


def code_commit() -> str | None:
    """The git commit of the checkout the package runs from (``+dirty`` with uncommitted
    changes), or None outside a git checkout."""
    import subprocess
    from pathlib import Path

    top = Path(__file__).resolve().parents[1]
    if not (top / "pyproject.toml").is_file():  # an installed copy: no checkout of its own
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(top), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(top), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
