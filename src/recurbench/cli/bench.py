"""``recurbench bench``: the benchmarks of :mod:`recurbench.bench`."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

import typer

from recurbench.cli.common import (
    BenchDeviceOpt,
    DataDirOpt,
    JsonOpt,
    at_least,
    console,
    print_json,
    split_csv,
    table,
)
from recurbench.config import check_names
from recurbench.errors import RecurbenchError
from recurbench.units import duration, megabytes, times


def bench_rem_cmd(
    seq_len: Annotated[int | None, typer.Option(
        "--seq-len", help="Sequence length T (default: 1024, or 4096 with --full-size).")] = None,
    heads: Annotated[int, typer.Option("--heads", help="Heads H (cycling through the six REM types).")] = 8,
    head_dim: Annotated[int, typer.Option("--head-dim", help="Head dimension D.")] = 64,
    batch: Annotated[int, typer.Option("--batch", help="Batch size B.")] = 4,
    full_size: Annotated[bool, typer.Option(
        "--full-size", help="T = 4096, the shape of docs/performance.md's figures: minutes on a CPU and a dense "
        "peak near 9 GB (the default T = 1024 ends in seconds under 1 GB).")] = False,
    masked: Annotated[bool, typer.Option("--masked/--unmasked", help="Masked (causal) or bidirectional REMs.")] = False,
    sweep: Annotated[bool, typer.Option(
        "--sweep", help="Also run T = 512, 1024, 2048, 4096, 8192 (minutes; dense up to 4096, near 9 GB).")] = False,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed repetitions (median).")] = 3,
    threads: Annotated[int, typer.Option("--threads", help="torch CPU threads.")] = 2,
    device: BenchDeviceOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """REM operator: dense (paper, App. D.1) vs the default path (chunked on CPU, Triton on CUDA)."""
    from recurbench.bench.rem import FULL_SEQ_LEN, QUICK_SEQ_LEN, bench_rem, bench_rem_sweep  # noqa: PLC0415 - torch

    if seq_len is None:
        seq_len = FULL_SEQ_LEN if full_size else QUICK_SEQ_LEN
    elif full_size:
        raise RecurbenchError("--full-size sets --seq-len to 4096: give one or the other")
    at_least(1, seq_len=seq_len, heads=heads, head_dim=head_dim, batch=batch, repeats=repeats, threads=threads)
    kw = dict(heads=heads, head_dim=head_dim, batch=batch, masked=masked, repeats=repeats, threads=threads,
              device=device)
    with console.status(f"timing the REM operator at T = {seq_len}"):
        result: dict[str, Any] = bench_rem(seq_len, **kw)
        if sweep:
            result = {"main": result, "sweep": bench_rem_sweep(**kw)}
    if as_json:
        return print_json(result)
    rows = [result] if not sweep else result["sweep"]["rows"]
    if sweep and result["main"]["seq_len"] not in [r["seq_len"] for r in rows]:
        rows = sorted([result["main"], *rows], key=lambda r: r["seq_len"])
    console.print(rem_table(rows, heads=heads, head_dim=head_dim, batch=batch))


_REM_ROWS: list[tuple[str, str, Any]] = [
    # (label, field, format): one row per quantity, one column per T (fits 80 columns with a sweep's six).
    ("max abs error", "max_abs_err", lambda x: "-" if x is None else f"{x:.1e}"),
    ("dense fwd+bwd", "time_dense_fwd_bwd_s", duration),
    ("{impl} fwd+bwd", "time_default_fwd_bwd_s", duration),
    ("speed-up", "speedup_fwd_bwd", times),
    ("dense peak", "peak_mem_dense_bytes", megabytes),
    ("{impl} peak", "peak_mem_default_bytes", megabytes),
    ("memory saved", "peak_mem_ratio", times),
    ("page faults/call", "minor_page_faults_fwd_bwd", lambda x: "-" if x is None else f"{x:,.0f}"),
    ("fwd bandwidth", "effective_bandwidth_fwd_gbps", lambda x: "-" if x is None else f"{x:.3g} GB/s"),
    ("  of a copy's", "bandwidth_vs_copy", lambda x: "-" if x is None else f"{100 * x:.2g} %"),
    ("  of HBM peak", "bandwidth_vs_hbm_peak", lambda x: "-" if x is None else f"{100 * x:.2g} %"),
]


def rem_table(rows: list[dict[str, Any]], *, heads: int, head_dim: int, batch: int) -> Any:
    """``bench rem``'s results transposed: a row per quantity in units a person reads (ms, MB, ×), a
    column per sequence length, and a legend for the terms."""
    impl = rows[0]["default_impl"]
    body = [[label.format(impl=impl), *(fmt(r.get(key)) for r in rows)] for label, key, fmt in _REM_ROWS]
    legend = (f"dense: the paper's T x T matrices (App. D.1); {impl}: the default path. max abs error: {impl} "
              "against dense, forward. speed-up and memory saved: dense over the default path. peak: memory one "
              "forward+backward adds to its inputs. fwd bandwidth: V read and P V written once over the forward "
              "time. - : not measured (dense skipped above 8 GB, no HBM figure off CUDA).")
    return table(f"REM operator, H={heads} D={head_dim} B={batch} ({rows[0]['device']})",
                 ["", *(f"T = {r['seq_len']}" for r in rows)], body, caption=legend)


def bench_rsa_cmd(
    seq_len: Annotated[int, typer.Option("--seq-len", help="Sequence length (Informer encoder: 96).")] = 96,
    heads: Annotated[int, typer.Option("--heads", help="Heads.")] = 8,
    head_dim: Annotated[int, typer.Option("--head-dim", help="Head dimension (d_model = heads x head_dim).")] = 64,
    batch: Annotated[int, typer.Option("--batch", help="Batch size.")] = 32,
    k1_k6: Annotated[str, typer.Option("--k", help="REM head counts k1..k6 (Table 5 notation).")] = "(0,2,2,0,2,2)",
    dilations: Annotated[str | None, typer.Option(
        "--dilations", help="Dilations of the dilated heads (k4+k5+k6 of them), e.g. [48,24,48,24], or '-' for none "
        "(default: 24 each, as Table 5's ETTh1 layout).")] = None,
    causal: Annotated[bool, typer.Option("--causal", help="Masked (decoder) self-attention.")] = False,
    attention: Annotated[
        str, typer.Option("--attention", help="Baseline layer: full (softmax attention) or prob (Informer's ProbSparse).")
    ] = "full",
    impl: Annotated[
        str | None, typer.Option("--impl", help="REM path: naive, chunked or triton (default: the device's default).")
    ] = None,
    repeats: Annotated[
        int, typer.Option("--repeats", help="Timed pairs of training steps (baseline and RSA, alternating order).")
    ] = 30,
    threads: Annotated[int, typer.Option("--threads", help="torch CPU threads.")] = 2,
    device: BenchDeviceOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """Training-step overhead of an RSA attention layer over the same layer without REMs."""
    from recurbench.bench.rem import bench_rsa  # noqa: PLC0415 - torch

    at_least(1, seq_len=seq_len, heads=heads, head_dim=head_dim, batch=batch, repeats=repeats, threads=threads)
    result = bench_rsa(seq_len, heads, head_dim, batch, k1_k6=k1_k6, dilations=dilations, causal=causal,
                       attention=attention, impl=impl, pairs=repeats, threads=threads, device=device)
    if as_json:
        return print_json(result)
    console.print(rsa_table(result))


_BASELINE_NAMES = {"full": "softmax attention", "prob": "Informer's ProbSparse attention"}


def _count(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _rate(x: float | None) -> str:
    """Steps per second, whole."""
    return "-" if x is None else f"{x:.0f}"


def _plural(n: int, one: str, many: str | None = None) -> str:
    """``1 thread``, ``2 threads``."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def rsa_table(result: dict[str, Any]) -> Any:
    """``bench rsa``'s result as a person reads it: a row per measurement with the baseline's and the RSA
    layer's times (ms, s) and their ratio (×), the layer's shape in the title and a legend for the terms."""
    faults = result["minor_page_faults_per_step"] or {}
    quartiles = " / ".join(times(1 + pct / 100) for pct in result["overhead_pct_paired_quartiles"])
    body = [
        ["training step", duration(result["time_baseline_step_s"]), duration(result["time_rsa_step_s"]),
         times(result["overhead_ratio"])],
        ["  per-pair quartiles", "", "", quartiles],
        ["  CPU time", duration(result["cpu_time_baseline_step_s"]), duration(result["cpu_time_rsa_step_s"]),
         times(result["cpu_time_rsa_step_s"] / result["cpu_time_baseline_step_s"])],
        ["  page faults/step", _count(faults.get("baseline")), _count(faults.get("rsa")), "-"],
        ["attention core", duration(result["time_sdpa_alone_s"]), duration(result["time_rsa_attention_s"]),
         times(result["rsa_attention_vs_sdpa"])],
    ]
    impl = "the device's default" if result["impl"] == "default" else result["impl"]
    k = ",".join(map(str, result["k1_k6"]))
    dilations = f"dilations [{','.join(map(str, result['dilations']))}]" if result["dilations"] else "no dilated heads"
    legend = (f"baseline: {_BASELINE_NAMES[result['attention']]} without REMs; RSA: the same layer with REM heads "
              f"k = ({k}), {dilations}, REM path: {impl}. Medians of {result['pairs']} "
              "alternating pairs of training steps (forward, backward, Adam); per-pair quartiles: of RSA / baseline "
              "within each pair. attention core: the attention alone, forward and backward, no projections: SDPA "
              "(baseline column) against the RSA layer's attention with its REM mix.")
    mask = ", causal" if result["causal"] else ""
    title = (f"RSA layer training step, B={result['batch']} T={result['seq_len']} H={result['heads']} "
             f"D={result['head_dim']}{mask} ({result['device']}, {_plural(result['threads'], 'thread')})")
    return table(title, ["", "baseline", "RSA", "RSA / baseline"], body, caption=legend)


def bench_forecast_cmd(
    model: Annotated[str, typer.Option("--model", help="Forecaster (see `recurbench list models`).")] = "informer",
    dataset: Annotated[str, typer.Option("--dataset", help="Dataset with paper settings in the ltsf suite.")] = "ETTh1",
    horizon: Annotated[int, typer.Option("--horizon", help="Forecast horizon (paper settings of the ltsf suite).")] = 24,
    max_batches: Annotated[
        int | None,
        typer.Option("--max-batches", help="Time only this many batches and extrapolate linearly to a full epoch."),
    ] = None,
    threads: Annotated[int, typer.Option("--threads", help="torch intra-op threads (1 is fastest on a shared CPU).")] = 1,
    json_out: JsonOpt = False,
    data_dir: DataDirOpt = None,
    device: BenchDeviceOpt = "auto",
) -> None:
    """Seconds per training epoch of Informer on ETTh1 (paper settings: batch 32, d_model 512)."""
    from recurbench.bench.forecast import bench_forecast  # noqa: PLC0415 - torch

    at_least(1, max_batches=max_batches, threads=threads)
    result = bench_forecast(
        model=model, dataset=dataset, horizon=horizon, max_batches=max_batches, threads=threads, data_dir=data_dir,
        device=device,
    )
    if json_out:
        print_json(result)
        return
    console.print(forecast_table(result))


def forecast_table(result: dict[str, Any]) -> Any:
    """``bench forecast``'s result as a person reads it: a row per timing (ms, s), what was trained in the
    title, the network's settings and how the epoch was timed in the legend."""
    timed, total = result["timed_batches"], result["total_batches"]
    body = [["training step (one batch)", duration(result["seconds_per_batch"])],
            [f"training epoch ({total:,} batches)", duration(result["seconds_per_epoch"])]]
    epoch = (f"the step's time x {total:,}, extrapolated (--max-batches)" if result["extrapolated"]
             else "every batch timed")
    legend = (f"The ltsf suite's paper settings: input window {result['seq_len']}, decoder start "
              f"{result['label_len']}, {result['e_layers']} encoder + {result['d_layers']} decoder layers, d_model "
              f"{result['d_model']}, batch {result['batch_size']}; {result['n_params']:,} parameters. training step: "
              f"forward, MSE, backward and Adam on one batch, the mean of {_plural(timed, 'timed batch', 'timed batches')}"
              f" after an untimed warm-up batch. training epoch: {epoch}.")
    title = (f"{result['model']} training time on {result['dataset']}, horizon {result['horizon']} "
             f"({result['device']}, {_plural(result['threads'], 'thread')})")
    return table(title, ["", "time"], body, caption=legend)


def bench_kernels_cmd(
    arch: Annotated[str, typer.Option("--arch", help="CUDA architectures, comma-separated: 80 (A100), 90 (H100/H200).")] = "80,90",
    as_json: JsonOpt = False,
) -> None:
    """Registers, spills, shared memory and occupancy of every Triton kernel configuration, compiled
    ahead of time (no GPU needed)."""
    from recurbench.bench.kernels import kernel_table  # noqa: PLC0415 - torch (triton when run)

    try:
        archs = [int(a.removeprefix("sm_")) for a in split_csv([arch]) or []]
    except ValueError:
        raise RecurbenchError(f"--arch takes numbers such as 80,90, got {arch!r}") from None
    with console.status("compiling") as status:
        rows = kernel_table(archs, progress=lambda done, total: status.update(f"compiling {done}/{total}"))
    if as_json:
        print_json([asdict(r) for r in rows])
    else:
        fmt = lambda x, spec="": "-" if x is None else format(x, spec)  # noqa: E731
        console.print(table("Triton kernels compiled ahead of time (spills: stack + local bytes per thread)",
                             ["kernel", "configuration", "arch", "registers", "spills", "shared", "occupancy",
                              "default", "uses"],
                             [[r.kernel, r.configuration, f"sm_{r.arch}", fmt(r.registers), fmt(r.spill_bytes),
                               fmt(r.shared_bytes), fmt(r.occupancy, ".3f"), "yes" if r.default else "no",
                               len(r.workloads)] for r in rows], keys=3))
    failed = [r for r in rows if r.error]
    if failed:
        raise RecurbenchError(f"{len(failed)} configuration(s) failed to compile, first: {failed[0].kernel} "
                              f"[{failed[0].configuration}] sm_{failed[0].arch}: {failed[0].error}")


def bench_memattn_cmd(
    windows: Annotated[list[str] | None, typer.Option("--windows", help="MemLSTM windows (slots) besides RelLSTM's 5 + 5.")] = None,
    batch: Annotated[int, typer.Option("--batch", help="Environments.")] = 16,
    attention_size: Annotated[int, typer.Option("--attention-size")] = 32,
    hidden_size: Annotated[int, typer.Option("--hidden-size")] = 64,
    steps: Annotated[int, typer.Option("--steps", help="Consecutive steps per timed run.")] = 50,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed runs (median).")] = 5,
    device: BenchDeviceOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """One memory-attention step: the fused Triton kernel (CUDA) against the PyTorch reference."""
    from recurbench.bench.memattn import MEMORIES, bench_memattn  # noqa: PLC0415 - torch

    try:
        memories = MEMORIES if not windows else [(5, 5), *((int(w), 0) for w in split_csv(windows) or [])]
    except ValueError:
        raise RecurbenchError(f"--windows takes numbers such as 100,2000, got {','.join(windows)!r}") from None
    at_least(1, batch=batch, attention_size=attention_size, hidden_size=hidden_size, steps=steps, repeats=repeats,
              windows=min(nu for nu, _ in memories))
    result = bench_memattn(memories=memories, batch=batch, attention_size=attention_size, hidden_size=hidden_size,
                           steps=steps, repeats=repeats, device=device)
    if as_json:
        return print_json(result)
    err = lambda x: "-" if x is None else f"{x:.1e}"  # noqa: E731
    ms = lambda x: "-" if x is None else duration(x / 1000)  # noqa: E731
    header = ["nu", "rho", "reference", "Triton", "speed-up", "max abs error (read)", "max abs error (memory)"]
    rows = [[r["nu"], r["rho"], ms(r["time_reference_ms"]), ms(r["time_triton_ms"]), times(r["speedup"]),
             err(r["max_abs_err_read"]), err(r["max_abs_err_memory"])] for r in result["rows"]]
    console.print(table(f"memory-attention step, {batch} envs, A={attention_size} H={hidden_size} ({result['device']})",
                        header, rows, caption="reference, Triton: time per step; nu, rho: the memory's window and "
                        "relevance slots; errors: Triton against the reference"))


def bench_rl_cmd(
    cores: Annotated[list[str] | None, typer.Option("--cores", help="Memory cores (default: all).")] = None,
    total_steps: Annotated[int, typer.Option("--total-steps", help="Env steps timed per agent (after one warm-up rollout).")] = 16384,
    env_id: Annotated[str, typer.Option("--env", help="MiniGrid env id.")] = "MiniGrid-DoorKey-5x5-v0",
    n_envs: Annotated[int, typer.Option("--n-envs")] = 8,
    n_steps: Annotated[int, typer.Option("--n-steps")] = 128,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 256,
    n_epochs: Annotated[int, typer.Option("--n-epochs")] = 4,
    hidden_size: Annotated[int, typer.Option("--hidden-size", help="LSTM width, ours and sb3-contrib's.")] = 64,
    threads: Annotated[int, typer.Option("--threads", help="torch threads.")] = 1,
    no_peer: Annotated[bool, typer.Option("--no-sb3-contrib", help="Skip sb3-contrib's RecurrentPPO.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """PPO training steps per second per memory core, next to sb3-contrib's RecurrentPPO."""
    from recurbench.agents.cores import CORES  # noqa: PLC0415 - torch
    from recurbench.bench.rl import BenchSettings, bench_rl  # noqa: PLC0415 - torch, SB3

    chosen = split_csv(cores) or list(CORES)
    check_names(chosen, CORES, "memory core", "--cores")
    at_least(1, total_steps=total_steps, n_envs=n_envs, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs,
              hidden_size=hidden_size, threads=threads)
    settings = BenchSettings(env_id=env_id, n_envs=n_envs, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs,
                             total_steps=total_steps, hidden_size=hidden_size, threads=threads)
    with console.status("benchmarking") as status:
        result = bench_rl(chosen, settings, include_sb3_contrib=not no_peer,
                          progress=lambda what: status.update(f"benchmarking {what}"))
    if as_json:
        return print_json(result)
    console.print(rl_table(result))


def rl_table(result: dict[str, Any]) -> Any:
    """``bench rl``'s result: steps per second and per CPU-second for each core and, where it was timed,
    sb3-contrib's RecurrentPPO, each core's rates against the peer's as ratios (×), and a legend."""
    s, peer = result["settings"], result.get("fps_sb3_contrib")
    versus = lambda ratios, core: times(ratios[core]) if peer else "-"  # noqa: E731
    rows = [[core, _rate(fps), versus(result.get("ratio"), core), _rate(result["fps_cpu"][core]),
             versus(result.get("ratio_cpu"), core)] for core, fps in result["fps"].items()]
    if peer:
        rows.append(["sb3-contrib", _rate(peer), times(1), _rate(result["fps_sb3_contrib_cpu"]), times(1)])
    header = ["agent", "steps/s", "vs sb3-contrib", "steps/CPU-s", "vs sb3-contrib (CPU)"]
    legend = (f"steps/s: environment steps per second (wall clock) of PPO's learn, rollouts and updates "
              f"({_plural(s['n_epochs'], 'epoch')} of batch {s['batch_size']}, LSTM width {s['hidden_size']}), "
              f"{s['total_steps']:,} timed per agent after a warm-up rollout; steps/CPU-s: per CPU-second of this "
              f"process ({_plural(s['threads'], 'thread')}). sb3-contrib: its RecurrentPPO, LSTM policy, same "
              "settings; vs sb3-contrib: a core's rate over sb3-contrib's.")
    if not peer:
        legend += " - : sb3-contrib not timed (--no-sb3-contrib)."
    return table(f"PPO training steps/s on {s['env_id']} ({s['n_envs']} envs x {s['n_steps']} steps)", header, rows,
                 caption=legend, keys=1)


def bench_langs_cmd(
    profile: Annotated[str, typer.Option("--profile", "-p", help="The langs profile whose runs are timed.")] = "paper",
    languages: Annotated[list[str] | None, typer.Option("--languages", help="Languages (default: the profile's).")] = None,
    models: Annotated[list[str] | None, typer.Option("--models", help="Models (default: the profile's).")] = None,
    batches: Annotated[int, typer.Option("--batches", help="Training batches timed per model and language.")] = 40,
    attention: Annotated[list[str] | None, typer.Option(
        "--attention", help="auto (the runs' routing), products (weights materialised at every head width), or both.",
    )] = None,
    as_json: JsonOpt = False,
) -> None:
    """Training and scoring speed of the langs suite's recognisers, and the run time it implies."""
    from recurbench.bench.langs import ATTENTION_ROUTES, bench_langs  # noqa: PLC0415 - torch

    routes = split_csv(attention) or list(ATTENTION_ROUTES)
    check_names(routes, dict.fromkeys(ATTENTION_ROUTES), "attention route", "--attention")
    at_least(1, batches=batches)
    with console.status("benchmarking") as status:
        rows = bench_langs(profile, languages=split_csv(languages) or (), models=split_csv(models) or (), batches=batches,
                           attention=routes, progress=lambda what: status.update(f"benchmarking {what}"))
    if as_json:
        return print_json(rows)
    console.print(langs_table(rows, profile))


def langs_table(rows: list[dict[str, Any]], profile: str) -> Any:
    """``bench langs``'s rows: a row per language, model and attention route with the times (ms, s) of a
    training batch, of scoring each test bin and of the run they imply, and a legend."""
    header = ["language", "model", "attention", "batch", "batches", "bin 0", "bin 1", "run"]
    body = [[r["language"], r["model"], r["attention"], duration(r["ms_per_batch"] / 1000), f"{r['batches_per_epoch']:,}",
             duration(r["score_bin0_s"]), duration(r["score_bin1_s"]), duration(r["run_s"])] for r in rows]
    legend = ("batch: one training step (forward, masked MSE, backward, Adam), the mean over the timed batches; "
              "batches: per epoch; bin 0, bin 1: scoring the test strings of the training lengths, of the longer ones; "
              "run: the run these imply, epochs x (batches x batch + scoring). attention: auto is the runs' routing, "
              "products materialises the weights at every head width.")
    return table(f"langs recognisers, profile {profile} (1 thread each)", header, body, caption=legend, keys=3)


def bench_memory_cmd(
    cores: Annotated[list[str] | None, typer.Option(
        "--cores", help="Memory cores (default: Table 5's seven and MemLSTM).")] = None,
    lengths: Annotated[list[str] | None, typer.Option("--lengths", help="Copy delays T (default: 500).")] = None,
    paths: Annotated[list[str] | None, typer.Option(
        "--paths", help="fast (the training path), step (the agents' step loop), compiled (a torch.compile'd "
                        "cell), history (MemLSTM's and MemRNN's append-only history); default: fast and compiled. "
                        "A path a core does not have (SAB's compiled cell, another core's history) is not timed; "
                        "the table says why.")] = None,
    updates: Annotated[int, typer.Option("--updates", help="Timed updates per core, T and path (after one warm-up).")] = 3,
    threads: Annotated[int, typer.Option("--threads", help="torch threads.")] = 1,
    device: Annotated[str, typer.Option(
        "--device", help="Where to train: cpu (the memory suite's default), cuda, cuda:N, mps or auto.")] = "cpu",
    as_json: JsonOpt = False,
) -> None:
    """Memory-task training speed per core (copy, batch 10, width 128): steps per CPU-second and per second."""
    from recurbench.agents.cores import CORES  # noqa: PLC0415 - torch
    from recurbench.bench.memory import bench_memory  # noqa: PLC0415 - torch
    from recurbench.memory.models import PATHS  # noqa: PLC0415 - torch

    chosen = split_csv(cores) or ["lstm", "rnn", "exprnn", "memrnn", "sab", "relrnn", "rellstm", "memlstm"]
    check_names(chosen, CORES, "memory core", "--cores")
    chosen_paths = split_csv(paths) or ["fast", "compiled"]
    check_names(chosen_paths, dict.fromkeys(PATHS), "path", "--paths")
    try:
        delays = [int(v) for v in split_csv(lengths) or ["500"]]
    except ValueError:
        raise RecurbenchError(f"--lengths takes whole numbers such as 100,500, got {','.join(lengths or [])!r}") from None
    at_least(1, updates=updates, threads=threads, lengths=min(delays))
    with console.status("benchmarking") as status:
        rows = bench_memory(chosen, delays, updates=updates, threads=threads, paths=chosen_paths, device=device,
                            progress=lambda what: status.update(f"benchmarking {what}"))
    if as_json:
        return print_json(rows)
    console.print(memory_table(rows, chosen_paths[-1], threads))


def memory_table(rows: list[dict[str, Any]], baseline_path: str, threads: int) -> Any:
    """``bench memory``'s rows: rates per core, T and path, each against the core's ``baseline_path`` at
    that T; a path not timed shows ``-`` and the legend says why."""
    from recurbench.bench.memory import not_timed  # noqa: PLC0415 - torch
    baseline = {(r["core"], r["T"]): r["steps_per_cpu_s"] for r in rows if r["path"] == baseline_path}

    def versus(r: dict[str, Any]) -> str:
        base = baseline.get((r["core"], r["T"]))
        return "-" if r["skipped"] or not base else times(r["steps_per_cpu_s"] / base)

    header = ["core", "T", "path", "steps/CPU-s", "steps/s (wall)", f"vs {baseline_path} (CPU)"]
    body = [[r["core"], str(r["T"]), r["path"], _rate(r["steps_per_cpu_s"]), _rate(r["steps_per_s"]), versus(r)]
            for r in rows]
    skipped = not_timed([(r["core"], r["path"], r["skipped"]) for r in rows])
    legend = f"- : not timed: {'; '.join(skipped)}." if skipped else None
    return table(f"memory-task training, copy, batch 10, width 128 ({_plural(threads, 'thread')}, {rows[0]['device']})",
                 header, body, caption=legend)
