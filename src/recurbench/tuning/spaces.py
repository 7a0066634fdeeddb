"""Search spaces: define-by-run functions ``trial -> typed config``.

Invalid combinations are removed by reparameterising, not rejected: every proposal of
:func:`suggest_rem_heads` is a valid REM head layout (sum of heads = n_heads, cyclical heads paired,
one dilation per dilated head), because the trial samples *fractions* that are mapped onto counts;
the BPTT lengths a RelLSTM agent tries (:func:`bptt_candidates`) are only those recurrent PPO can cut
the profile's rollouts and minibatches into.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd


def autocorrelation(values: np.ndarray, max_lag: int) -> np.ndarray:
    """Mean autocorrelation over columns at lags 0..max_lag of a ``[N, C]`` (or ``[N]``) array."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    n = x.shape[0]
    max_lag = min(max_lag, n - 2)
    x = x - x.mean(axis=0)
    denom = (x**2).sum(axis=0)
    denom[denom == 0] = 1.0
    # FFT-based ACF: O(N log N) per column.
    size = 1 << int(np.ceil(np.log2(2 * n - 1)))
    spectrum = np.fft.rfft(x, size, axis=0)
    acf = np.fft.irfft(spectrum * np.conj(spectrum), size, axis=0)[: max_lag + 1] / denom
    return acf.mean(axis=1)


def seasonal_periods(
    values: np.ndarray, step: pd.Timedelta | None = None, max_lag: int = 800, min_acf: float = 0.1
) -> list[int]:
    """Seasonal periods of a training split, in steps, from its autocorrelation (mean over columns).

    The fundamental period is the strongest local maximum of the ACF (24 for hourly ETT/Weather, 96
    for 15-minute ETT). Calendar periods (a day and a week, in steps of ``step``) are added when the
    ACF has a local maximum there above ``min_acf`` (168 for hourly ETTh1). Searching the ACF for
    weekly peaks without the calendar proved noisy: the daily peaks decay slowly under the trend.
    """
    acf = autocorrelation(values, max_lag)

    def is_peak(k: int) -> bool:
        return 1 < k < len(acf) - 1 and acf[k] >= acf[k - 1] and acf[k] >= acf[k + 1] and acf[k] > min_acf

    peaks = [k for k in range(2, len(acf) - 1) if is_peak(k)]
    found: set[int] = {max(peaks, key=lambda k: acf[k])} if peaks else set()
    if step is not None and step > pd.Timedelta(0):
        for span in (pd.Timedelta(days=1), pd.Timedelta(days=7)):
            k = span / step
            if float(k).is_integer() and is_peak(int(k)):
                found.add(int(k))
    return sorted(found)


def dilation_candidates(periods: Sequence[int], seq_len: int, small: Sequence[int] = (2, 4)) -> list[int]:
    """Candidate dilation factors: small ones plus the seasonal periods, each shorter than the input."""
    return sorted({d for d in (*small, *periods) if 1 < d < seq_len})


BPTT_LENGTHS = (8, 16, 32)
"""The truncated-BPTT lengths (``ppo.seq_len``) tuned for RelLSTM; the paper's is 16."""


def bptt_candidates(n_steps: int, batch_size: int, lengths: Sequence[int] = BPTT_LENGTHS) -> list[int]:
    """The ``lengths`` that divide both ``n_steps`` and ``batch_size``: recurrent PPO cuts each env's
    rollout and each minibatch into ``seq_len``-step sequences (:class:`~recurbench.agents.ppo.MemoryPPO`),
    so a trial never draws a length that would fail there. The same for every trial of a study (a
    profile's settings are part of its default name)."""
    return [n for n in lengths if n_steps % n == 0 and batch_size % n == 0]


@dataclass(frozen=True)
class REMHeadChoice:
    k: tuple[int, int, int, int, int, int]
    dilations: tuple[int, ...]
    gate_init: float


def suggest_rem_heads(
    trial: object,
    n_heads: int,
    dilations: Sequence[int],
    *,
    gate_range: tuple[float, float] = (-3.0, 3.0),
) -> REMHeadChoice:
    """k1..k6, one dilation per dilated head and the gate initialisation mu (RSA paper, Table 5 / Sec. 3).

    Reparameterised so that every sample is valid: the number of cyclical (cos, sin) *pairs* is drawn,
    the rest are regular heads, and the dilated share of each kind is drawn as a fraction of its count.
    """
    pairs = trial.suggest_int("cyclical_pairs", 0, n_heads // 2)
    regular = n_heads - 2 * pairs
    dilated_regular = round(trial.suggest_float("dilated_regular_fraction", 0.0, 1.0) * regular)
    dilated_pairs = round(trial.suggest_float("dilated_pairs_fraction", 0.0, 1.0) * pairs) if pairs else 0
    if not dilations:
        dilated_regular = dilated_pairs = 0
    k = (regular - dilated_regular, pairs - dilated_pairs, pairs - dilated_pairs, dilated_regular, dilated_pairs, dilated_pairs)
    n_dilated = dilated_regular + 2 * dilated_pairs
    chosen = tuple(trial.suggest_categorical(f"dilation_{i}", list(dilations)) for i in range(n_dilated))
    gate_init = trial.suggest_float("gate_init", *gate_range)
    return REMHeadChoice(k=k, dilations=chosen, gate_init=gate_init)
