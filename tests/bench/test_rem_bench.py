"""bench rsa's timing: paired steps in alternating order, medians and the spread of the pair ratios."""

import statistics

import pytest
import torch

from recurbench.bench import rem as bench


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


def test_bench_rem_reports_error_speed_and_the_forward_bandwidth(monkeypatch):
    counts = iter([1000, 1030])  # minor faults before and after the timed calls
    monkeypatch.setattr(bench, "_minor_faults", lambda: next(counts))
    out = bench.bench_rem(64, heads=6, head_dim=8, batch=2, repeats=2, threads=1, memory=False)
    assert out["minor_page_faults_fwd_bwd"] == 15  # per timed call, the warm-up left out
    assert out["default_impl"] == "chunked" and out["dense_skipped"] is None
    assert out["max_abs_err"] < 1e-4  # chunked vs dense, fp32
    assert out["speedup_fwd_bwd"] == pytest.approx(out["time_dense_fwd_bwd_s"] / out["time_default_fwd_bwd_s"])
    # V read once and P V written once: 2 x B T H D float32 values over the forward time.
    moved = 2 * 2 * 64 * 6 * 8 * 4
    assert out["effective_bandwidth_fwd_gbps"] == pytest.approx(moved / out["time_default_fwd_s"] / 1e9)
    assert out["bandwidth_vs_copy"] == pytest.approx(out["effective_bandwidth_fwd_gbps"] / out["copy_bandwidth_gbps"])
    assert out["copy_bandwidth_gbps"] > 0
    assert out["hbm_peak_gbps"] is None and out["bandwidth_vs_hbm_peak"] is None  # no NVML figure on a CPU


def test_hbm_peak_is_twice_the_memory_clock_times_the_bus_width(monkeypatch):
    import sys
    import types

    nvml = types.SimpleNamespace(
        NVML_CLOCK_MEM=2, nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetMaxClockInfo=lambda handle, kind: {("gpu0", 2): 2619}[(handle, kind)],
        nvmlDeviceGetMemoryBusWidth=lambda handle: {"gpu0": 5120}[handle],
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    # An H100 SXM's HBM3: 2619 MHz, 5120 bits -> 3.35 TB/s, its data-sheet figure.
    assert bench.hbm_peak_bandwidth(torch.device("cuda", 0)) == pytest.approx(3.352e12, rel=1e-3)
    assert bench.hbm_peak_bandwidth(torch.device("cpu")) is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    assert bench.hbm_peak_bandwidth(torch.device("cuda", 0)) is None
