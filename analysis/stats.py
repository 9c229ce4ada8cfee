"""Small statistics over seeds: mean ± sample SD, paired differences and their intervals.

Paired differences over seeds get **Student t intervals** (:func:`t_ci`): at the 5–10 seeds a
study has, a percentile bootstrap of the mean is too narrow (simulated at 5 normal pairs it
covers about 83 % for a nominal 95 %; tests/analysis/test_coverage.py measures both). Several
comparisons within one level are adjusted together by Holm's step-down rule (:func:`holm`).
"""

from __future__ import annotations

import numpy as np


def _t():
    """Student's t distribution (scipy imported on first use: ~1.7 s that a report with
    one seed per label never needs)."""
    from scipy.stats import t

    return t


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


def t_ci(x, alpha: float = 0.05) -> tuple[float, float]:
    """Student t interval of the mean: mean ± t_{n−1, 1−α/2} · s/√n over the finite values
    (NaN with fewer than two)."""
    a = np.asarray(x, dtype=float)
    a = a[np.isfinite(a)]
    if len(a) < 2:
        return float("nan"), float("nan")
    half = float(_t().ppf(1 - alpha / 2, len(a) - 1)) * float(a.std(ddof=1)) / np.sqrt(len(a))
    m = float(a.mean())
    return m - half, m + half


def t_pvalue(x) -> float:
    """Two-sided p-value of the one-sample t test of mean 0 (a paired difference's); 1.0 for a
    sample without spread and mean 0, 0.0 without spread and another mean, NaN below 2."""
    a = np.asarray(x, dtype=float)
    a = a[np.isfinite(a)]
    if len(a) < 2:
        return float("nan")
    sd = float(a.std(ddof=1))
    if sd == 0.0:
        return 1.0 if float(a.mean()) == 0.0 else 0.0
    t = float(a.mean()) / (sd / np.sqrt(len(a)))
    return float(2 * _t().sf(abs(t), len(a) - 1))


def holm(pvalues) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error ≤ α when each is compared to α):
    sorted ascending, p_(k) · (m − k + 1), made monotone, capped at 1; NaN stays NaN and does
    not count in m."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(len(p), np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    running = 0.0
    for k, i in enumerate(ok[np.argsort(p[ok], kind="stable")]):
        running = max(running, min(1.0, p[i] * (m - k)))
        out[i] = running
    return out.tolist()


def with_failures(values, failed: int, chance: float) -> float:
    """The mean over every run, a failed (diverged) one counted at ``chance`` accuracy: what a
    user who cannot rerun a failure would see on average."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    n = len(a) + int(failed)
    return float((a.sum() + failed * chance) / n) if n else float("nan")


MIN_CI_PAIRS = 5  # fewer paired seeds than this: no confidence interval is shown


def paired_text(n: int, mean: float, lo: float, hi: float, digits: int = 3) -> str:
    """A paired difference as text: ``+0.012 [-0.004, +0.027]`` (the CI from
    ``MIN_CI_PAIRS`` pairs on), else the mean and the number of pairs; empty without pairs."""
    if not n or not np.isfinite(mean):
        return ""
    if n < MIN_CI_PAIRS:
        return f"{mean:+.{digits}f} ({n} pair{'s' if n != 1 else ''})"
    return f"{mean:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"
