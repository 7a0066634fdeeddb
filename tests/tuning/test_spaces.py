from __future__ import annotations

import numpy as np
import optuna
import pandas as pd
import pytest

from recurbench.tuning.spaces import bptt_candidates, dilation_candidates, seasonal_periods, suggest_rem_heads


@pytest.mark.parametrize("n_heads", [1, 2, 3, 4, 7, 8, 16])
def test_every_proposal_is_a_valid_head_layout(n_heads):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=n_heads))
    seen = set()
    for _ in range(60):
        trial = study.ask()
        choice = suggest_rem_heads(trial, n_heads, [2, 24, 168])
        k = choice.k
        assert sum(k) == n_heads and min(k) >= 0
        assert k[1] == k[2] and k[4] == k[5]  # cyclical heads come in cos/sin pairs
        assert len(choice.dilations) == k[3] + k[4] + k[5]
        assert set(choice.dilations) <= {2, 24, 168}
        assert -3 <= choice.gate_init <= 3
        seen.add(k)
        study.tell(trial, 0.0)
    if n_heads >= 4:
        assert len(seen) > 3  # the space is explored, not collapsed onto one layout


def test_without_dilation_candidates_no_head_is_dilated():
    study = optuna.create_study()
    choice = suggest_rem_heads(study.ask(), 8, [])
    assert choice.k[3:] == (0, 0, 0) and choice.dilations == ()


@pytest.mark.parametrize("step, expected", [("1h", [24, 168]), ("15min", [96, 672])])
def test_seasonal_periods_of_a_daily_and_weekly_series(step, expected):
    rng = np.random.default_rng(0)
    index = pd.date_range("2020-01-01", periods=24 * 7 * 20 * (4 if step == "15min" else 1), freq=step)
    hours = (index - index[0]) / pd.Timedelta("1h")
    daily = np.sin(2 * np.pi * hours / 24)
    weekly = 0.8 * (index.dayofweek >= 5)
    series = np.stack([daily + weekly + 0.3 * rng.standard_normal(len(index)), daily], axis=1)
    assert seasonal_periods(series, pd.Timedelta(step), max_lag=800) == expected


def test_seasonal_periods_of_the_real_training_split(data_dir):
    from recurbench.data import WindowSpec, prepare

    data = prepare("ETTh1", WindowSpec(96, 48, 24), data_dir)
    periods = seasonal_periods(data.train.data, data.series.step)
    assert periods == [24, 168]
    assert dilation_candidates(periods, seq_len=96) == [2, 4, 24]
    assert dilation_candidates(periods, seq_len=336) == [2, 4, 24, 168]


@pytest.mark.parametrize(
    ("n_steps", "batch_size", "expected"),
    [(64, 256, [8, 16, 32]), (128, 256, [8, 16, 32]), (48, 48, [8, 16]), (64, 40, [8]), (12, 12, [])],
)
def test_bptt_candidates_divide_the_rollout_and_the_minibatch(n_steps, batch_size, expected):
    """The quick and paper profiles' PPO (64 or 128 steps, batches of 256) admit every length tried."""
    assert bptt_candidates(n_steps, batch_size) == expected
