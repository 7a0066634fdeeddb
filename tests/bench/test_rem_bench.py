"""bench rsa's timing (paired steps in alternating order, medians and the spread of the pair ratios), its head
layout and its table; bench rem's fields."""

import statistics

import pytest
import torch
from bench_tables import body, header, legend, rendered
from typer.testing import CliRunner

from recurbench.bench import rem as bench
from recurbench.cli import app
from recurbench.cli.bench import rsa_table
from recurbench.errors import ConfigError


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


def test_bench_rsa_checks_the_head_count_before_the_default_dilations():
    # Six heads for a layer of eight: that is the mistake, not the default dilations the user never gave.
    with pytest.raises(ConfigError) as info:
        bench.rsa_head_config("2,2,2,0,0,0", None, 8)
    assert str(info.value) == "--k 2,2,2,0,0,0 fills 6 heads, but --heads is 8: give --k for 8 heads, or --heads 6"
    with pytest.raises(ConfigError) as info:
        bench.rsa_head_config("2,2,2,0,0,0", "[24,24,24,24]", 8)
    assert str(info.value) == ("--k 2,2,2,0,0,0 fills 6 heads, but --heads is 8: give --k and --dilations for 8 "
                               "heads, or --heads 6")
    result = CliRunner().invoke(app, ["bench", "rsa", "--k", "2,2,2,0,0,0"])
    assert result.exit_code == 1
    assert str(result.exception) == "--k 2,2,2,0,0,0 fills 6 heads, but --heads is 8: give --k for 8 heads, or --heads 6"


def test_bench_rsa_default_dilations_follow_the_head_counts():
    # Table 5's ETTh1 layout: 24 for each of its four dilated heads; another layout gets one 24 per dilated head.
    assert bench.rsa_head_config("(0,2,2,0,2,2)", None, 8).dilations == (24, 24, 24, 24)
    assert bench.rsa_head_config("(2,0,0,2,2,2)", None, 8).dilations == (24,) * 6
    assert bench.rsa_head_config("(2,2,2,2,0,0)", None, 8).head_dilations() == (1, 1, 1, 1, 1, 1, 24, 24)
    assert bench.rsa_head_config("(2,2,2,2,0,0)", "[48,12]", 8).dilations == (48, 12)
    with pytest.raises(ConfigError, match=r"^need one dilation per dilated head \(k4\+k5\+k6 = 2\), got 0: \[\]$"):
        bench.rsa_head_config("(2,2,2,2,0,0)", "-", 8)  # the user's own dilations: they are what is wrong


RSA_RESULT = {
    "seq_len": 32, "heads": 8, "head_dim": 64, "d_model": 512, "batch": 2, "k1_k6": (0, 2, 2, 0, 2, 2),
    "dilations": (24, 24, 24, 24), "causal": False, "attention": "full", "impl": "default", "device": "cpu",
    "threads": 1, "pairs": 3, "time_baseline_step_s": 0.0065923250003834255, "time_rsa_step_s": 0.00711,
    "overhead_ratio": 1.078990492804271, "overhead_pct": 7.899049280427, "overhead_pct_paired_quartiles": [5.0, 7.9, 10.0],
    "cpu_time_baseline_step_s": 0.0064, "cpu_time_rsa_step_s": 0.0072, "overhead_pct_cpu_time": 12.5,
    "minor_page_faults_per_step": {"baseline": 1, "rsa": 1204}, "time_sdpa_alone_s": 0.0004,
    "time_rsa_attention_s": 0.0016, "rsa_attention_vs_sdpa": 4.0,
}


def test_bench_rsa_table_gives_times_in_ms_and_ratios_as_times_within_80_columns():
    text = rendered(rsa_table(RSA_RESULT))
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in text
    assert lines[0].strip() == "RSA layer training step, B=2 T=32 H=8 D=64 (cpu, 1 thread)"
    rows = {cells[0]: cells[1:] for cells in body(text, 4)}
    assert header(text, 4) == ["", "baseline", "RSA", "RSA / baseline"]
    assert rows == {
        "training step": ["6.59 ms", "7.11 ms", "1.08×"],
        "per-pair quartiles": ["", "", "1.05× / 1.08× / 1.1×"],
        "CPU time": ["6.4 ms", "7.2 ms", "1.12×"],
        "page faults/step": ["1", "1,204", "-"],
        "attention core": ["0.4 ms", "1.6 ms", "4×"],
    }
    assert "RSA: the same layer with REM heads k = (0,2,2,0,2,2), dilations [24,24,24,24]" in legend(text)
    assert "time_baseline_step_s" not in text and "overhead_ratio" not in text  # raw fields only under --json


def test_bench_rsa_prints_that_table():
    args = ["bench", "rsa", "--seq-len", "16", "--heads", "2", "--head-dim", "4", "--batch", "2", "--k", "(0,1,1,0,0,0)",
            "--repeats", "1", "--threads", "1"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(map(len, result.output.splitlines())) <= 80
    assert "B=2 T=16 H=2 D=4" in result.output and "no dilated heads" in " ".join(result.output.split())
    assert "time_baseline_step_s" not in result.output
