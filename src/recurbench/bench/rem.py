"""Benchmarks of the REM operator and of an RSA attention layer; each returns a plain dict.

* :func:`bench_rem` -- dense reference ("paper", App. D.1) vs the default path (chunked on CPU,
  Triton on CUDA where triton is installed): forward error, forward+backward time (and the default
  path's minor page faults per call: memory the allocator handed back and took again), peak memory.
* :func:`bench_rem_sweep` -- the default path over T = 512 ... 8192 (dense where it fits), with the
  time per token to show linear scaling.
* :func:`bench_rsa` -- training-step time of an RSA attention layer over the same layer without REMs
  (wall time and this process's CPU time), and the RSA attention core (baseline attention + REM mix,
  no projections) against SDPA alone. The two layers' steps alternate (ABBA order), so load
  from other processes hits both alike; the spread of the per-pair ratios and the minor page faults
  per step are reported with the medians, because on a shared machine a single figure can mislead
  (a process whose allocator keeps handing back fresh pages pays thousands of page faults a step).

Peak memory on CPU: PyTorch has no CPU allocator statistics, so each measurement runs in a fresh
Python subprocess that builds its inputs, runs a tiny warm-up, resets the kernel's resident-set high-water mark
(``echo 5 > /proc/self/clear_refs``), runs one forward+backward and reads ``VmHWM`` from
``/proc/self/status``; the peak is ``VmHWM`` minus the resident size just before the run, i.e. the
physical memory the operation touched on top of its inputs. On CUDA: ``torch.cuda.max_memory_allocated``.

Bandwidth: the operator must read V and write P V at least once, so its forward moves at least
``2 B T H D`` elements; ``effective_bandwidth_fwd_gbps`` is that over the forward time (a lower bound
on the traffic: an unmasked REM makes a causal and an anti-causal pass). It is set against what the same
device reaches copying a large tensor (``copy_bandwidth_gbps``, read + write) and, on CUDA where NVML
reports the memory clock and bus width, the HBM's nominal peak (``hbm_peak_gbps``).
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from recurbench.devices import describe_device, resolve_device, synchronize
from recurbench.errors import ConfigError
from recurbench.forecasters.layers.attention import AttentionLayer, ProbSparseAttention
from recurbench.forecasters.layers.rsa import REMHeadConfig, RSAFullAttention, RSAMixer, parse_ints
from recurbench.kernels.rem import IMPLS, rem_apply, resolve_impl

QUICK_SEQ_LEN = 1024
"""``bench rem``'s default T: seconds on a 2-core CPU, the dense path's peak under 1 GB."""
FULL_SEQ_LEN = 4096
"""``bench rem --full-size``: the shape of docs/performance.md's figures (minutes, a dense peak near 9 GB)."""

SIX_TYPES = (("regular", 1), ("cos", 1), ("sin", 1), ("regular", 24), ("cos", 24), ("sin", 24))


def default_heads(n_heads: int, dilation: int = 24) -> tuple[list[str], list[int]]:
    """Heads cycling through the paper's six REM types (dilated ones with ``dilation``)."""
    kinds = [SIX_TYPES[h % 6][0] for h in range(n_heads)]
    dils = [1 if SIX_TYPES[h % 6][1] == 1 else dilation for h in range(n_heads)]
    return kinds, dils


def _inputs(cfg: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
    gen = torch.Generator().manual_seed(0)
    dtype = getattr(torch, cfg["dtype"])
    device = torch.device(cfg["device"])
    B, T, H, D = cfg["batch"], cfg["seq_len"], cfg["heads"], cfg["head_dim"]
    v = torch.randn(B, T, H, D, generator=gen, dtype=dtype).to(device).requires_grad_()
    kinds, dils = default_heads(H, cfg["dilation"])
    # Sec. 3 initialisation: eta over [-2, -1] U [1, 2], nu over [1, 2], theta = pi / 4.
    eta = torch.tensor([(1 + (h % 2)) * (-1) ** h for h in range(H)], dtype=dtype, device=device)
    nu = torch.linspace(1, 2, H, dtype=dtype, device=device)
    params = {
        "kind": kinds, "dilation": dils, "masked": cfg["masked"], "truncate": cfg["truncate"],
        "eta": eta.requires_grad_(), "nu": nu.requires_grad_(),
        "theta": torch.full((H,), math.pi / 4, dtype=dtype, device=device, requires_grad=True),
    }
    return v, params


def _fwd_bwd(v: torch.Tensor, params: dict[str, Any], impl: str | None) -> None:
    y = rem_apply(v, impl=impl, **params)
    y.backward(torch.ones_like(y))


def _time_calls(
    fn: Callable[[], None], repeats: int, device: torch.device, *, warmup: bool = True
) -> tuple[float, float]:
    """Median wall time and median CPU time of this process over ``repeats`` calls (after one warm-up
    call unless ``warmup`` is False)."""
    if warmup:
        fn()
    wall, cpu = [], []
    for _ in range(repeats):
        synchronize(device)
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        synchronize(device)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def _timeit(fn: Callable[[], None], repeats: int, device: torch.device) -> float:
    """Median wall time of ``repeats`` calls after one warm-up."""
    return _time_calls(fn, repeats, device)[0]


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _peak_worker(cfg: dict[str, Any], impl: str | None) -> int:
    """Runs in a fresh process: bytes of resident memory one forward+backward adds to its inputs."""
    torch.set_num_threads(cfg["threads"])
    # One tiny run first, so that one-time initialisation (libraries, thread pools) is not counted.
    _fwd_bwd(*_inputs({**cfg, "seq_len": 64, "batch": 1}), impl)
    v, params = _inputs(cfg)
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset VmHWM to the current RSS
    except OSError:
        pass
    before = _status_kib("VmRSS")
    _fwd_bwd(v, params, impl)
    return (_status_kib("VmHWM") - before) * 1024


def peak_memory(cfg: dict[str, Any], impl: str | None) -> int:
    """Peak extra memory (bytes) of one forward+backward (see the module docstring for the method)."""
    dev = torch.device(cfg["device"])
    if dev.type == "cuda":
        v, params = _inputs(cfg)
        synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        _fwd_bwd(v, params, impl)
        synchronize(dev)
        return torch.cuda.max_memory_allocated(dev) - base
    if dev.type != "cpu":
        raise ValueError(f"peak memory is measured on the CPU and on CUDA only, not on {dev}")
    code = (
        "import json, sys; from recurbench.bench.rem import _peak_worker; "
        "print(_peak_worker(json.loads(sys.argv[1]), json.loads(sys.argv[2])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(cfg), json.dumps(impl)], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip().splitlines()[-1])


@functools.cache
def copy_bandwidth(device: torch.device, nbytes: int = 1 << 28, repeats: int = 5) -> float:
    """Bytes per second a device-to-device copy of ``nbytes`` reaches (read + write counted), median;
    measured once per device and process (a sweep's rows share it)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = _timeit(lambda: dst.copy_(src), repeats, device)
    return 2 * nbytes / seconds


def hbm_peak_bandwidth(device: torch.device) -> float | None:
    """Nominal memory bandwidth of a CUDA device in bytes/s (2 x max memory clock x bus width, from
    NVML), or None where NVML is missing or the device is not CUDA."""
    if device.type != "cuda":
        return None
    try:
        import pynvml  # noqa: PLC0415 - pynvml is optional (the gpu extra)
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        clock_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        bus_bits = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
    except Exception:  # an NVML without the query, or no permission
        return None
    return 2 * clock_mhz * 1e6 * bus_bits / 8


def _bandwidth_fields(v: torch.Tensor, params: dict[str, Any], impl: str, repeats: int) -> dict[str, Any]:
    """Forward time of ``impl`` and its effective bandwidth beside the device's (module docstring)."""
    dev = v.device

    def forward() -> None:
        with torch.no_grad():
            rem_apply(v, impl=impl, **params)

    seconds = _timeit(forward, repeats, dev)
    moved = 2 * v.numel() * v.element_size()
    copy = copy_bandwidth(dev)
    peak = hbm_peak_bandwidth(dev)
    achieved = moved / seconds
    return {
        "time_default_fwd_s": seconds,
        "effective_bandwidth_fwd_gbps": achieved / 1e9,
        "copy_bandwidth_gbps": copy / 1e9,
        "bandwidth_vs_copy": achieved / copy,
        "hbm_peak_gbps": None if peak is None else peak / 1e9,
        "bandwidth_vs_hbm_peak": None if peak is None else achieved / peak,
    }


def dense_bytes_estimate(seq_len: int, heads: int, batch: int, itemsize: int = 4) -> int:
    """Rough peak of the dense path: P and its exponent/mask temporaries per head, plus dP per batch."""
    return (batch + 6) * heads * seq_len * seq_len * itemsize


def bench_rem(
    seq_len: int = QUICK_SEQ_LEN,
    heads: int = 8,
    head_dim: int = 64,
    batch: int = 4,
    *,
    masked: bool = False,
    dilation: int = 24,
    truncate: int | None = None,
    dtype: str = "float32",
    device: str = "auto",
    repeats: int = 3,
    threads: int = 2,
    dense: bool = True,
    dense_max_bytes: float = 8e9,
    memory: bool = True,
) -> dict[str, Any]:
    """Dense (paper) vs default path for one shape: error, fwd+bwd time, peak memory; the default
    path's forward time and effective bandwidth.

    Heads cycle through the six REM types (dilated ones with ``dilation``). The dense path is skipped
    (its fields ``None``) when ``dense_bytes_estimate`` exceeds ``dense_max_bytes``."""
    torch.set_num_threads(threads)
    dev = resolve_device(device, what="--device")
    cfg = {
        "seq_len": seq_len, "heads": heads, "head_dim": head_dim, "batch": batch, "masked": masked,
        "dilation": dilation, "truncate": truncate, "dtype": dtype, "device": str(dev), "threads": threads,
    }
    v, params = _inputs(cfg)
    default_impl = resolve_impl(None, v)  # what rem_apply runs by default: Triton on CUDA where installed
    for _ in range(2):  # warm-up: the first calls of a fresh process also grow its heap
        _fwd_bwd(v, params, default_impl)
    faults_before = _minor_faults()
    time_default = _time_calls(lambda: _fwd_bwd(v, params, default_impl), repeats, dev, warmup=False)[0]
    faults_after = _minor_faults()
    result: dict[str, Any] = {
        **{k: cfg[k] for k in ("seq_len", "heads", "head_dim", "batch", "masked", "dilation", "truncate", "dtype")},
        "device": describe_device(dev), "threads": torch.get_num_threads(), "default_impl": default_impl,
        "time_default_fwd_bwd_s": time_default,
        # Per timed call: a CPU allocator handing back fresh pages shows here (recurbench.runtime).
        "minor_page_faults_fwd_bwd": (
            None if faults_before is None or faults_after is None else (faults_after - faults_before) / repeats
        ),
        **_bandwidth_fields(v, params, default_impl, repeats),
    }
    run_dense = dense and dense_bytes_estimate(seq_len, heads, batch) <= dense_max_bytes
    result["dense_skipped"] = None if run_dense else "dense_bytes_estimate above dense_max_bytes"
    if run_dense:
        with torch.no_grad():
            ref = rem_apply(v.double(), impl="naive", **{**params, **_double(params)})
            y_default = rem_apply(v, impl=default_impl, **params)
            y_dense = rem_apply(v, impl="naive", **params)
            result["max_abs_err"] = (y_default - y_dense).abs().max().item()
            result["max_abs_err_vs_fp64"] = {
                "default": (y_default.double() - ref).abs().max().item(),
                "dense": (y_dense.double() - ref).abs().max().item(),
                "output_max_abs": ref.abs().max().item(),
            }
            del ref, y_default, y_dense
        result["time_dense_fwd_bwd_s"] = _timeit(lambda: _fwd_bwd(v, params, "naive"), max(1, repeats - 1), dev)
        result["speedup_fwd_bwd"] = result["time_dense_fwd_bwd_s"] / result["time_default_fwd_bwd_s"]
    else:
        result.update(max_abs_err=None, max_abs_err_vs_fp64=None, time_dense_fwd_bwd_s=None, speedup_fwd_bwd=None)
    if memory and dev.type not in ("cpu", "cuda"):
        result.update(peak_mem_default_bytes=None, peak_mem_dense_bytes=None, peak_mem_ratio=None,
                      peak_mem_method=f"not measured on {dev.type} (CPU and CUDA only)")
    elif memory:
        del v, params
        result["peak_mem_default_bytes"] = peak_memory(cfg, default_impl)
        result["peak_mem_dense_bytes"] = peak_memory(cfg, "naive") if run_dense else None
        # 0 bytes: the default path's peak fit in memory the process already held (tiny shapes), so
        # no ratio can be formed.
        result["peak_mem_ratio"] = (
            result["peak_mem_dense_bytes"] / result["peak_mem_default_bytes"]
            if run_dense and result["peak_mem_default_bytes"] > 0 else None
        )
        result["peak_mem_method"] = (
            "torch.cuda.max_memory_allocated" if dev.type == "cuda"
            else "fresh process: VmHWM - VmRSS around one fwd+bwd (after clear_refs)"
        )
    return result


def _double(params: dict[str, Any]) -> dict[str, Any]:
    return {k: params[k].detach().double() for k in ("eta", "nu", "theta")}


def bench_rem_sweep(
    seq_lens: tuple[int, ...] = (512, 1024, 2048, 4096, 8192), **kwargs: Any
) -> dict[str, Any]:
    """:func:`bench_rem` over several T, plus the default path's time per 1k tokens (flat = linear)."""
    rows = [bench_rem(t, **kwargs) for t in seq_lens]
    per_k = [r["time_default_fwd_bwd_s"] / r["seq_len"] * 1000 for r in rows]
    return {"rows": rows, "default_ms_per_1k_tokens": [1000 * p for p in per_k],
            "linearity_max_over_min": max(per_k) / min(per_k)}


BASELINE_ATTENTIONS = ("full", "prob")
"""``bench rsa``'s baseline layers: softmax attention or Informer's ProbSparse."""

TABLE5_DILATION = 24
"""The dilation of every dilated head in Table 5's ETTh1 layout: ``bench rsa``'s default per dilated head."""


def rsa_head_config(k1_k6: str, dilations: str | None, heads: int) -> REMHeadConfig:
    """``--k`` and ``--dilations`` as the head layout of a layer of ``heads`` heads.

    The head count is checked first: the dilations follow from the counts (one per dilated head,
    k4 + k5 + k6), so a layout for the wrong number of heads is the mistake to report, not the
    dilations that then no longer fit. ``dilations`` None: :data:`TABLE5_DILATION` for each dilated head."""
    counts = parse_ints(k1_k6, "--k")
    filled = sum(counts)
    if len(counts) == 6 and filled not in (0, heads):  # a wrong length or all zeros: REMHeadConfig says so
        flags = "--k" if dilations is None else "--k and --dilations"
        raise ConfigError(f"--k {k1_k6} fills {filled} heads, but --heads is {heads}: give {flags} for {heads} "
                          f"heads, or --heads {filled}")
    if dilations is None:
        return REMHeadConfig(k=counts, dilations=(TABLE5_DILATION,) * sum(counts[3:]))  # type: ignore[arg-type]
    return REMHeadConfig.from_table5(k1_k6, dilations)


def bench_rsa(
    seq_len: int = 96,
    heads: int = 8,
    head_dim: int = 64,
    batch: int = 32,
    *,
    k1_k6: str = "(0,2,2,0,2,2)",
    dilations: str | None = None,
    causal: bool = False,
    attention: str = "full",
    impl: str | None = None,
    pairs: int = 30,
    threads: int = 2,
    device: str = "auto",
) -> dict[str, Any]:
    """Training step (forward, backward, Adam step) of an attention layer with and without REMs:
    ``attention="full"`` is :class:`RSAFullAttention` (softmax attention: on a CPU with at most
    :data:`~recurbench.forecasters.layers.attention.MATH_MAX_KEYS` keys two matrix products, the REMs
    mixed into the weights; else SDPA, the REM term mixed into its output), ``"prob"`` Informer's own
    layer (ProbSparse, factor 5), which is what RSA-Informer's self-attention wraps.

    Defaults: Informer's size (d_model = 512, 8 heads, encoder input 96, batch 32) and its Table 5 head
    configuration for ETTh1 (k = (0,2,2,0,2,2), d = [24,24,24,24]); ``dilations`` None gives every
    dilated head Table 5's 24 (:func:`rsa_head_config`). ``impl`` forces a REM path (the
    output mix through :func:`recurbench.kernels.rem.rem_apply`); ``None`` is the default. ``pairs``
    timed steps of each layer, alternating (see :func:`_paired_steps`); besides wall time, the CPU time
    of this process is reported (robust to other processes on shared cores).

    Then the attention core alone, forward and backward without projections or optimizer, in
    ``pairs`` alternating pairs: ``time_sdpa_alone_s`` (softmax attention through
    ``scaled_dot_product_attention`` itself) against ``time_rsa_attention_s`` (the RSA layer's
    attention with its REM mix, :meth:`AttentionLayer.attend`); ``rsa_attention_vs_sdpa`` is their ratio."""
    if impl is not None and impl not in IMPLS:
        raise ConfigError(f"--impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    if attention not in BASELINE_ATTENTIONS:
        raise ConfigError(f"--attention must be one of {', '.join(BASELINE_ATTENTIONS)}, got {attention!r}")
    heads_cfg = rsa_head_config(k1_k6, dilations, heads)
    torch.set_num_threads(threads)
    dev = resolve_device(device, what="--device")
    d_model = heads * head_dim
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, seq_len, d_model, generator=gen).to(dev)
    target = torch.randn(batch, seq_len, d_model, generator=gen).to(dev)

    def make_layer(cfg: REMHeadConfig | None) -> AttentionLayer:
        torch.manual_seed(0)
        if attention == "full":
            return RSAFullAttention(d_model, heads, cfg, causal=causal, impl=impl).to(dev)
        mixer = None if cfg is None else RSAMixer(heads, cfg, masked=causal, impl=impl)
        return AttentionLayer(ProbSparseAttention(factor=5, causal=causal), d_model, heads, mixer=mixer).to(dev)

    def make_step(layer: AttentionLayer) -> Callable[[], None]:
        opt = torch.optim.Adam(layer.parameters(), lr=1e-4)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(layer(x, x, x) if attention == "prob" else layer(x), target)
            loss.backward()
            opt.step()

        return step

    rsa_layer = make_layer(heads_cfg)
    timing = _paired_steps(make_step(make_layer(None)), make_step(rsa_layer), pairs, dev)

    # The attention core alone (no projections, no optimizer): SDPA against the RSA layer's own
    # attention with its REM mix (AttentionLayer.attend), forward and backward on the same q, k, v.
    q, k, v = (torch.randn(batch, seq_len, heads, head_dim, generator=gen).to(dev).requires_grad_() for _ in range(3))
    grad = torch.randn(batch, seq_len, heads, head_dim, generator=gen).to(dev)

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal
        ).transpose(1, 2)

    def core_step(fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            q.grad = k.grad = v.grad = None
            fn().backward(grad)

        return step

    core = _paired_steps(
        core_step(lambda: sdpa(q, k, v)),
        core_step(lambda: rsa_layer.attend(q, k, v)),
        pairs, dev,
    )
    return {
        "seq_len": seq_len, "heads": heads, "head_dim": head_dim, "d_model": d_model, "batch": batch,
        "k1_k6": heads_cfg.k, "dilations": heads_cfg.dilations, "causal": causal, "attention": attention,
        "impl": impl or "default",
        "device": describe_device(dev), "threads": torch.get_num_threads(),
        **timing,
        "time_sdpa_alone_s": core["time_baseline_step_s"],
        "time_rsa_attention_s": core["time_rsa_step_s"],
        "rsa_attention_vs_sdpa": core["overhead_ratio"],
    }


def _minor_faults() -> int | None:
    """Minor page faults of this process so far (None where ``resource`` is missing, i.e. Windows)."""
    try:
        import resource  # noqa: PLC0415 - Unix only
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _quartiles(values: list[float]) -> list[float]:
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return [float(v) for v in q]


def _paired_steps(
    base_step: Callable[[], None], rsa_step: Callable[[], None], pairs: int, device: torch.device
) -> dict[str, Any]:
    """Time ``pairs`` baseline/RSA step pairs, alternating which goes first, after two warm-up steps of
    each (Adam's state, the allocator). Medians of wall and CPU time per step; the quartiles of the
    per-pair overhead ``100 (rsa_i / base_i - 1)``; the median minor page faults per step."""
    if pairs < 1:
        raise ValueError(f"pairs must be at least 1, got {pairs}")
    steps = {"base": base_step, "rsa": rsa_step}
    for fn in (base_step, rsa_step, base_step, rsa_step):
        fn()
    wall: dict[str, list[float]] = {"base": [], "rsa": []}
    cpu: dict[str, list[float]] = {"base": [], "rsa": []}
    faults: dict[str, list[int]] = {"base": [], "rsa": []}
    for i in range(pairs):
        for name in ("base", "rsa") if i % 2 == 0 else ("rsa", "base"):
            f0 = _minor_faults()
            w, c = _time_calls(steps[name], 1, device, warmup=False)
            f1 = _minor_faults()
            wall[name].append(w)
            cpu[name].append(c)
            if f0 is not None and f1 is not None:
                faults[name].append(f1 - f0)
    t_base, t_rsa = statistics.median(wall["base"]), statistics.median(wall["rsa"])
    c_base, c_rsa = statistics.median(cpu["base"]), statistics.median(cpu["rsa"])
    paired = [100 * (r / b - 1) for r, b in zip(wall["rsa"], wall["base"], strict=True)]
    return {
        "pairs": pairs,
        "time_baseline_step_s": t_base, "time_rsa_step_s": t_rsa,
        "overhead_ratio": t_rsa / t_base, "overhead_pct": 100 * (t_rsa / t_base - 1),
        "overhead_pct_paired_quartiles": _quartiles(paired),
        "cpu_time_baseline_step_s": c_base, "cpu_time_rsa_step_s": c_rsa,
        "overhead_pct_cpu_time": 100 * (c_rsa / c_base - 1),
        "minor_page_faults_per_step": (
            {"baseline": statistics.median(faults["base"]), "rsa": statistics.median(faults["rsa"])}
            if faults["base"] else None
        ),
    }
