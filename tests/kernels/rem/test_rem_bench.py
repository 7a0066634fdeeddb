"""bench rsa's timing: paired steps in alternating order, medians and the spread of the pair ratios."""

import statistics

import pytest
import torch

from recurbench.kernels.rem import bench


def test_paired_steps_alternate_which_layer_goes_first_after_a_warm_up(monkeypatch):
    calls: list[str] = []
    # Each "step" takes a known time: the baseline 10 s, the RSA step 11 s, then 13 s on its third pair.
    durations = {"base": iter([10.0] * 5), "rsa": iter([11.0, 11.0, 13.0, 11.0, 11.0])}
    clock = [0.0]

    def fake_step(name):
        def step():
            calls.append(name)
            if len(calls) > 4:  # after the four warm-up steps, advance the fake clock
                clock[0] += next(durations[name])
        return step

    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(bench.time, "process_time", lambda: clock[0])
    out = bench._paired_steps(fake_step("base"), fake_step("rsa"), 5, torch.device("cpu"))

    assert calls[:4] == ["base", "rsa", "base", "rsa"]
    assert calls[4:] == ["base", "rsa", "rsa", "base", "base", "rsa", "rsa", "base", "base", "rsa"]
    assert out["pairs"] == 5
    assert out["time_baseline_step_s"] == 10.0 and out["time_rsa_step_s"] == 11.0
    assert out["overhead_pct"] == pytest.approx(10.0)
    per_pair = [10.0, 10.0, 30.0, 10.0, 10.0]
    assert out["overhead_pct_paired_quartiles"] == pytest.approx(
        statistics.quantiles(per_pair, n=4, method="inclusive")
    )
    assert out["overhead_pct_cpu_time"] == pytest.approx(10.0)


def test_paired_steps_need_at_least_one_pair():
    with pytest.raises(ValueError, match="pairs must be at least 1, got 0"):
        bench._paired_steps(lambda: None, lambda: None, 0, torch.device("cpu"))
