"""The process's memory allocator, set for training loops (no torch here: cheap to import)."""

from __future__ import annotations

import ctypes
import functools
import os
import platform

# glibc's malloc options (mallopt): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 64 << 20  # blocks below this come from the heap, not fresh mappings
TRIM_THRESHOLD = 256 << 20  # free memory kept at the heap's top before returning any


@functools.cache  # once per process: the driver and the local engine's worker share one
def retain_freed_memory() -> bool:
    """Let glibc's malloc keep the memory a training step frees for the next step.

    By default malloc serves large blocks (from 128 KB, a threshold that adapts up to 32 MB)
    from fresh ``mmap`` regions and returns the heap's free top to the kernel, so a training
    step can fault its activations' pages in again, zeroed, every time: on W (``cnn_valid``,
    batch 128) the Ray engine's client workers took about 520,000 minor faults a round and 12 %
    of the CPU in the kernel, against 4,000 and 1.2 % with the memory kept
    (``benchmarks/engine_overhead.py``, arms ``ray`` and ``ray-malloc-default``). The round
    time gained 13–20 % in three interleaved pairs of runs, 10 % in another run and nothing
    in a third (docs/performance.md); peak PSS grows by about 0.06 GB. Raising
    both thresholds keeps the memory; the numbers computed do not change. No-op off glibc, or
    when ``$REUSE_RAY_MALLOC`` is ``default``; returns whether it applied."""
    if os.environ.get("REUSE_RAY_MALLOC") == "default" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
