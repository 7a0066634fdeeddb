"""Statistics across seeds: mean ± std, and the interquartile mean with bootstrap intervals.

The interquartile mean (IQM) and its percentile-bootstrap confidence interval follow Agarwal et al.,
"Deep RL at the Edge of the Statistical Precipice" (NeurIPS 2021, the rliable library): the IQM is
the mean of the middle 50% of runs (25% trimmed from each end, ``floor(0.25 n)`` runs per side, as
``scipy.stats.trim_mean``), and intervals over several tasks come from a *stratified* bootstrap that
resamples runs within each task. The bootstrap is seeded, so a table is the same every time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Fewer seeds than this and no IQM interval is reported (it would say nothing).
MIN_SEEDS_FOR_IQM = 3
BOOTSTRAP_REPS = 2000


@dataclass(frozen=True)
class Summary:
    mean: float
    std: float
    """Sample standard deviation (ddof = 1); NaN for a single run."""
    n: int


def summarise(values: Sequence[float]) -> Summary:
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if x.size == 0:
        return Summary(math.nan, math.nan, 0)
    return Summary(float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else math.nan, int(x.size))


def iqm(values: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean: sort, drop ``floor(n/4)`` values at each end, average the rest."""
    x = np.sort(np.asarray(values, dtype=float).ravel())
    if x.size == 0:
        return math.nan
    cut = int(0.25 * x.size)
    return float(x[cut : x.size - cut].mean())


def _iqm_rows(samples: np.ndarray) -> np.ndarray:
    """IQM of each row of ``samples`` [reps, n], vectorised."""
    n = samples.shape[1]
    cut = int(0.25 * n)
    return np.sort(samples, axis=1)[:, cut : n - cut].mean(axis=1)


def iqm_ci(
    groups: Sequence[Sequence[float]], *, reps: int = BOOTSTRAP_REPS, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """IQM over all runs of all ``groups`` (one group per task) and its stratified percentile-bootstrap
    interval: each replicate resamples, with replacement, the runs within every group separately."""
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not arrays:
        return math.nan, math.nan, math.nan
    point = iqm(np.concatenate(arrays))
    rng = np.random.default_rng(seed)
    resampled = np.concatenate([a[rng.integers(0, a.size, size=(reps, a.size))] for a in arrays], axis=1)
    stats = _iqm_rows(resampled)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(stats, [tail, 1.0 - tail])
    return point, float(lo), float(hi)
