"""Small statistics over seeds: mean ± sample SD, paired differences, percentile bootstrap CIs."""

from __future__ import annotations

import numpy as np


def mean_sd(x) -> tuple[float, float]:
    """Mean and sample SD (ddof = 1; NaN with fewer than two values)."""
    a = np.asarray(x, dtype=float)
    a = a[np.isfinite(a)]
    if len(a) == 0:
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else float("nan")


def bootstrap_ci(
    x, n_boot: int = 10_000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean, resampling the values (seeds) with replacement."""
    a = np.asarray(x, dtype=float)
    a = a[np.isfinite(a)]
    if len(a) == 0:
        return float("nan"), float("nan")
    if len(a) == 1:
        return float(a[0]), float(a[0])
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, len(a), size=(n_boot, len(a)))].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


MIN_CI_PAIRS = 5  # fewer paired seeds than this: no confidence interval is shown


def paired_text(n: int, mean: float, lo: float, hi: float, digits: int = 3) -> str:
    """A paired difference as text: ``+0.012 [-0.004, +0.027]`` (the CI from
    ``MIN_CI_PAIRS`` pairs on), else the mean and the number of pairs; empty without pairs."""
    if not n or not np.isfinite(mean):
        return ""
    if n < MIN_CI_PAIRS:
        return f"{mean:+.{digits}f} ({n} pair{'s' if n != 1 else ''})"
    return f"{mean:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"
