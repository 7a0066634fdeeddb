"""The Triton kernels of :mod:`recurbench.kernels`, compiled ahead of time for CUDA GPUs without one.

Triton compiles for a named target (``GPUTarget("cuda", 80, 32)``) on any machine: PTX, then a cubin
from the ``ptxas`` bundled with its wheel. Reading the cubin with the bundled ``cuobjdump
--dump-resource-usage`` gives what the kernel costs each thread and block on that architecture:
registers, stack frame (spilled registers: ``STACK``/``LOCAL`` > 0) and static shared memory, to
which Triton adds the dynamic shared memory it requests at launch (``metadata.shared``).

What is compiled is what the launch code would launch. Each kernel module builds its launches with
one function that both its op and this module call (``rem.triton.training_launches``,
``memattn.triton.step_launches``), here on ``meta`` tensors of the shapes a workload uses, and the
arguments are specialised exactly as Triton's JIT does on a launch (its own binder: constexprs,
integers equal to 1, 16-divisible integers and 16-byte-aligned pointers). Workloads (:func:`workloads`):

* the REM operator (forward, ``P' dY`` and the parameter gradients) for every REM kind and dilation
  mode, masked and unmasked, non-square, truncated, fp32 (IEEE and TF32 products) and fp64, and an
  explicit ``chunk_size = 64`` (the only configuration that is not the launch code's default);
* the shapes of the shipped LTSF suite (``suites/ltsf.yaml``, profiles ``paper`` and ``quick``):
  every attention of RSA-Informer, RSA-LogSparse and RSA-Transformer-XL at every dataset and horizon;
* a regular-language model (RSA paper Sec. 4.2: 5 heads, embedding 20, masked REMs, strings up to
  200 symbols, Table 2's head settings I-IV);
* the memory-attention step at the minigrid suite's sizes (RelLSTM: 5 + 5 slots; MemLSTM: windows
  up to 2000 slots; hidden sizes 64 and 128).

Distinct specialisations are compiled once per architecture (and cached for the process, on top of
Triton's own disk cache); :func:`kernel_resources` returns one :class:`KernelResources` row per
specialisation and architecture, with the workloads that use it. Occupancy is estimated from the
architecture's limits (:data:`ARCHS`) the way CUDA's occupancy calculator does.

Nothing here imports triton or torch at module import time; triton must be importable (and not in
interpreter mode) for :func:`kernel_resources`.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from recurbench.errors import RecurbenchError


@dataclass(frozen=True)
class KernelLaunch:
    """One launch as the launch code makes it: ``kernel[grid](*args, **meta)``."""

    kernel: Any
    """The ``@triton.jit`` function."""
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    """Runtime arguments in the kernel's order (tensors and integers)."""
    meta: dict[str, Any]
    """Compile-time parameters (``tl.constexpr``) and launch options (``num_warps``)."""


class KernelCompileUnavailable(RecurbenchError):
    """Ahead-of-time compilation cannot run here (no triton, interpreter mode, no cuobjdump)."""


# ------------------------------------------------------------------------------------ architectures


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM and per-block limits of one CUDA architecture (CUDA C++ Programming Guide, "Technical
    Specifications per Compute Capability"; the occupancy calculator's allocation units)."""

    name: str
    shared_per_sm: int
    """Shared memory per SM, bytes."""
    shared_per_block: int
    """Most shared memory one block may use (static + dynamic, with the opt-in), bytes."""
    registers_per_sm: int = 65536
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    register_unit: int = 256
    """Registers are allocated per warp in units of this many."""
    shared_unit: int = 128
    """Shared memory is allocated per block in units of this many bytes."""
    reserved_shared_per_block: int = 1024
    """Shared memory the system reserves per resident block (compute capability 8.0 and later)."""


ARCHS: dict[int, ArchLimits] = {
    80: ArchLimits("sm_80", shared_per_sm=164 * 1024, shared_per_block=163 * 1024),
    90: ArchLimits("sm_90", shared_per_sm=228 * 1024, shared_per_block=227 * 1024),
}


def occupancy(arch: ArchLimits, registers: int, shared_bytes: int, num_warps: int) -> float:
    """Resident warps per SM over the most an SM holds, for blocks of ``num_warps`` warps that use
    ``registers`` per thread and ``shared_bytes`` per block: the fewest blocks that registers, shared
    memory, warp slots and block slots each allow."""
    per_warp = math.ceil(max(registers, 1) * 32 / arch.register_unit) * arch.register_unit
    by_registers = (arch.registers_per_sm // per_warp) // num_warps
    per_block = math.ceil((shared_bytes + arch.reserved_shared_per_block) / arch.shared_unit) * arch.shared_unit
    by_shared = arch.shared_per_sm // per_block
    blocks = min(arch.max_blocks_per_sm, arch.max_warps_per_sm // num_warps, by_registers, by_shared)
    return blocks * num_warps / arch.max_warps_per_sm


# ---------------------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class RemWorkload:
    """One use of the REM operator in training (forward and backward): the square span it computes over."""

    name: str
    seq_len: int
    """T of the square computation: the keys, or the span of non-square query positions (see
    :func:`rem_span`)."""
    kinds: tuple[str, ...]
    dilations: tuple[int, ...]
    head_dim: int
    masked: bool
    batch: int = 32
    truncate: int | None = None
    chunk: int | None = None
    """``chunk_size`` passed to the op; None is the launch code's default."""
    dtype: str = "float32"
    tf32: bool = False
    """Whether ``torch.backends.cuda.matmul.allow_tf32`` is set (fp32 block products in TF32)."""

    @property
    def default(self) -> bool:
        return self.chunk is None

    def launches(self) -> list[KernelLaunch]:
        import torch

        from recurbench.kernels.rem.heads import make_layout
        from recurbench.kernels.rem.triton import training_launches

        layout = make_layout(list(self.kinds), list(self.dilations), len(self.kinds))
        x = torch.empty(self.batch, self.seq_len, len(self.kinds), self.head_dim, dtype=getattr(torch, self.dtype),
                        device="meta")
        return training_launches(x, layout, masked=self.masked, truncate=self.truncate, chunk=self.chunk,
                                 tf32=self.tf32)


@dataclass(frozen=True)
class MemattnWorkload:
    """One memory-attention step for ``batch`` environments."""

    name: str
    slots: int
    nu: int
    attention_size: int
    hidden_size: int
    batch: int = 16

    default = True

    def launches(self) -> list[KernelLaunch]:
        from recurbench.kernels.memattn.triton import step_launches

        return step_launches(self.batch, self.slots, self.attention_size, self.hidden_size, self.nu)


Workload = RemWorkload | MemattnWorkload

def rem_span(n_keys: int, query_positions: range | None = None) -> int:
    """T of the square computation :func:`recurbench.kernels.rem.rem_apply` pads non-square queries to."""
    from recurbench.kernels.rem import _range_span

    if query_positions is None:
        return n_keys
    lo, hi = _range_span(query_positions, n_keys)
    return hi - lo


def head_layout(k: Sequence[int], dilations: Sequence[int]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(kinds, dilations) per head from Table 5's counts k1..k6 and the dilated heads' factors."""
    from recurbench.forecasters.layers.rsa import REMHeadConfig

    cfg = REMHeadConfig(k=tuple(k), dilations=tuple(dilations), allow_unpaired=True)
    return cfg.head_kinds(), cfg.head_dilations()


def kernel_workloads() -> list[RemWorkload]:
    """The operator's own cases: kinds, dilation modes, masks, non-square, truncation, dtypes, chunk."""
    T, D = 1000, 64
    modes = {"undilated": (1, 1, 1, 1), "dilated 1-24": (1, 2, 3, 24), "dilated 2-24": (2, 3, 24, 5)}
    out = [
        RemWorkload(f"rem {kind} {mode} {'masked' if masked else 'unmasked'}", T, (kind,) * 4, dils, D, masked)
        for kind in ("regular", "cos", "sin") for mode, dils in modes.items() for masked in (True, False)
    ]
    mixed = (("regular", "cos", "sin", "sin"), (1, 2, 3, 24))
    out += [
        RemWorkload("rem non-square, queries 50..259 over 200 keys", rem_span(200, range(50, 260)), *mixed, D, True),
        RemWorkload("rem truncated K=200 masked", T, *mixed, D, True, truncate=200),
        RemWorkload("rem truncated K=200 unmasked", T, *mixed, D, False, truncate=200),
        # fp64, TF32 and the explicit chunk with one mask each, to keep the compile count down.
        RemWorkload("rem fp64 unmasked", T, *mixed, D, False, dtype="float64"),
        RemWorkload("rem fp32 tf32 masked", T, *mixed, D, True, tf32=True),
        RemWorkload("rem chunk_size=64 masked", T, *mixed, D, True, chunk=64),
        RemWorkload("rem short T=12", 12, *mixed, D, True),
    ]
    return out


def ltsf_workloads(profiles: Sequence[str] = ("paper", "quick")) -> list[RemWorkload]:
    """Every REM attention of the RSA forecasters at every cell of the shipped LTSF profiles
    (``suites/ltsf.yaml``: windows, Table 5's head layouts, d_model and heads, batch size)."""
    from importlib import resources

    from recurbench.config import read_yaml

    # The suite's own file, read as data (importing recurbench.suites would load the whole runner).
    raw = read_yaml(str(resources.files("recurbench").joinpath("suites", "ltsf.yaml")))["profiles"]
    out: list[RemWorkload] = []
    for profile in profiles:
        p = raw[profile]
        D, batch = p["model"]["d_model"] // p["model"]["n_heads"], p["training"]["batch_size"]
        for dataset in p["datasets"]:
            for horizon in p["horizons"][dataset]:
                w = p["windows"][dataset][horizon]
                for model, heads in p["rem_heads"][dataset][horizon].items():
                    if model in p["models"]:
                        layout = head_layout(heads["k"], heads.get("dilations", []))
                        out += [
                            RemWorkload(f"ltsf {profile} {dataset}-{horizon} {model} {where}", T, *layout, D, masked,
                                        batch=batch)
                            for where, T, masked in _ltsf_attentions(model, w["seq_len"], w["label_len"], horizon)
                        ]
    return out


def _ltsf_attentions(model: str, seq_len: int, label_len: int, pred_len: int) -> list[tuple[str, int, bool]]:
    """(where, square span T, masked) of each distinct REM call of one forecaster (``forecasters/models``).

    RSA-Informer: encoder self-attention (unmasked, ``seq_len`` keys; the ProbSparse rows lie among
    them), decoder self-attention (masked, ``label_len + pred_len``), cross-attention (unmasked, the
    decoder's positions ``seq_len - label_len ...`` over the encoder's keys). RSA-LogSparse: its causal
    stack over the input and the horizon. RSA-Transformer-XL: each segment of ``pred_len`` over the
    previous segment as memory (masked); XL mixes REMs into its attention weights unless its mixer is
    given ``impl="triton"``, so only then do these launch the kernels."""
    if model == "rsa_informer":
        cross = rem_span(seq_len, range(seq_len - label_len, seq_len + pred_len))
        return [("encoder", seq_len, False), ("decoder", label_len + pred_len, True), ("cross", cross, False)]
    if model == "rsa_logsparse":
        return [("stack", seq_len + pred_len, True)]
    if model == "rsa_xl":
        from recurbench.forecasters.models.transformer_xl import segment_bounds

        spans, memory = [], 0
        for start, end in segment_bounds(seq_len + pred_len, pred_len):
            spans.append(rem_span(memory + end - start, range(memory, memory + end - start)))
            memory = end - start
        return [(f"segment over memory, T={T} (impl=triton)", T, True) for T in dict.fromkeys(spans)]
    raise ValueError(f"no REM attentions known for model {model!r}")


def language_workloads() -> list[RemWorkload]:
    """A regular-language model (RSA paper Sec. 4.2): 5 heads of 4 (embedding 20), masked REMs, strings
    of 2-200 symbols; head settings I-IV of Table 2 (dilation 2 where dilated)."""
    settings = {"I": ([5, 0, 0, 0, 0, 0], []), "II": ([3, 0, 0, 2, 0, 0], [2, 2]),
                "III": ([3, 1, 1, 0, 0, 0], []), "IV": ([3, 0, 0, 0, 1, 1], [2, 2])}
    return [
        RemWorkload(f"languages RSA-{name} T={T}", T, *head_layout(k, dil), 4, True)
        for name, (k, dil) in settings.items() for T in (16, 50, 200)
    ]


def memattn_workloads() -> list[MemattnWorkload]:
    """The memory-attention step at the minigrid suite's sizes (16 environments, attention width 32):
    RelLSTM's 5 + 5 slots and MemLSTM windows of 100 to 2000 steps, hidden sizes 64 and 128."""
    out = []
    for H in (64, 128):
        out.append(MemattnWorkload(f"memattn RelLSTM nu=5 rho=5 H={H}", 10, 5, 32, H))
        out += [MemattnWorkload(f"memattn MemLSTM window={S} H={H}", S, S, 32, H) for S in (100, 500, 1000, 2000)]
    return out


def workloads() -> list[Workload]:
    """Everything :func:`kernel_resources` compiles."""
    return [*kernel_workloads(), *ltsf_workloads(), *language_workloads(), *memattn_workloads()]


# ------------------------------------------------------------------------------------------ compile


@dataclass(frozen=True)
class KernelResources:
    """One specialisation of one kernel on one architecture."""

    kernel: str
    configuration: str
    """Its compile-time parameters (a flag's name when it is set, nothing when not), element type,
    warps (``w8``) and integer specialisations (``%16:`` lists the integer arguments specialised as
    multiples of 16, ``name=1`` those equal to 1)."""
    arch: int
    registers: int | None
    """Per thread."""
    spill_bytes: int | None
    """Stack frame plus local memory per thread (cuobjdump's STACK + LOCAL): registers spilled."""
    shared_bytes: int | None
    """Per block: static (cuobjdump) plus the dynamic shared memory Triton requests at launch."""
    occupancy: float | None
    """Estimated resident warps per SM / the SM's maximum (:func:`occupancy`)."""
    num_warps: int
    default: bool
    """Launched by default (not only with a non-default setting such as ``chunk_size``)."""
    workloads: tuple[str, ...] = field(default=())
    error: str | None = None
    """The compile error, if it failed."""

    @property
    def shared_fits(self) -> bool:
        return self.shared_bytes is not None and self.shared_bytes <= ARCHS[self.arch].shared_per_block


@dataclass(frozen=True)
class _Compiled:
    registers: int | None
    stack: int | None
    static_shared: int | None
    dynamic_shared: int | None
    num_warps: int
    error: str | None


_CACHE: dict[tuple[int, str], _Compiled] = {}
_BINDERS: dict[tuple[Any, int], tuple[Any, Any, Callable[..., Any]]] = {}


def cuobjdump_path() -> str:
    """The cuobjdump Triton bundles (or ``$TRITON_CUOBJDUMP_PATH``)."""
    import triton

    try:
        from triton import knobs

        return knobs.nvidia.cuobjdump.path
    except (ImportError, AttributeError):  # triton before knobs
        return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def check_available() -> None:
    """Raise :class:`KernelCompileUnavailable` with the reason if kernels cannot be compiled here."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise KernelCompileUnavailable("TRITON_INTERPRET=1: the kernels are interpreter objects, not compilable")
    try:
        import triton
        from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: F401
    except ImportError as exc:
        raise KernelCompileUnavailable(f"triton is needed to compile the kernels ({exc})") from None
    if not hasattr(JITFunction, "_pack_args"):
        raise KernelCompileUnavailable(f"triton {triton.__version__}'s JIT has no _pack_args to specialise launches "
                                       "with (written against triton 3.9)")
    if not os.access(cuobjdump_path(), os.X_OK):
        raise KernelCompileUnavailable(f"no cuobjdump at {cuobjdump_path()} (triton's NVIDIA backend bundles it)")


def _specialise(launch: KernelLaunch, arch: int) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(target, source, options, names) for ``launch`` as Triton's JIT specialises it on a launch
    (``JITFunction.run``: its binder, then ``_pack_args``)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    kernel = launch.kernel
    if (kernel, arch) not in _BINDERS:
        target = GPUTarget("cuda", arch, 32)
        backend = make_backend(target)
        _BINDERS[kernel, arch] = target, backend, create_function_from_signature(kernel.signature, kernel.params,
                                                                                 backend)
    target, backend, binder = _BINDERS[kernel, arch]
    bound, specialization, options = binder(*launch.args, **launch.meta)
    options, signature, constexprs, attrs = kernel._pack_args(backend, dict(launch.meta), bound, specialization,
                                                              options)
    return target, ASTSource(kernel, signature, constexprs, attrs), options, dict(
        signature=signature, constexprs=constexprs, attrs=attrs
    )


def _label(launch: KernelLaunch, spec: dict[str, Any]) -> str:
    names = launch.kernel.arg_names
    declared = [k if v is True else f"{k}={v}" for k, v in launch.meta.items() if k != "num_warps" and v is not False]
    dtype = next(t[1:] for t in spec["signature"].values() if isinstance(t, str) and t.startswith("*"))
    ints = [names[i] for (i,), attr in spec["attrs"].items() if attr and not spec["signature"][names[i]].startswith("*")]
    ones = [f"{names[i]}=1" for (i,), v in spec["constexprs"].items() if names[i] not in launch.meta and v == 1]
    parts = [*declared, dtype, f"w{launch.meta.get('num_warps', 4)}"]
    if ints:
        parts.append("%16:" + ",".join(ints))
    return " ".join(parts + ones)


def _resource_usage(cubin: bytes) -> tuple[int, int, int]:
    """(registers, stack + local bytes, static shared bytes) from ``cuobjdump --dump-resource-usage``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        out = subprocess.run([cuobjdump_path(), "--dump-resource-usage", path], capture_output=True, text=True,
                             check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    if m is None:
        raise RuntimeError(f"cuobjdump printed no resource usage:\n{out}")
    reg, stack, shared, local = (int(g) for g in m.groups())
    return reg, stack + local, shared


def _compile(target: Any, src: Any, options: Any) -> _Compiled:
    import triton

    try:
        compiled = triton.compile(src, target=target, options=options.__dict__)
    except Exception as exc:  # noqa: BLE001 -- reported per configuration, the others still compile
        return _Compiled(None, None, None, None, options.num_warps, f"{type(exc).__name__}: {exc}".strip()[:2000])
    reg, stack, shared = _resource_usage(compiled.asm["cubin"])
    return _Compiled(reg, stack, shared, compiled.metadata.shared, compiled.metadata.num_warps, None)


def kernel_resources(
    archs: Sequence[int] = (80, 90),
    chosen: Sequence[Workload] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[KernelResources]:
    """Compile every specialisation the workloads launch (default: :func:`workloads`) for each
    architecture and read its resources; one row per (kernel, specialisation, architecture), kernels
    and architectures in order. ``progress(done, total)`` is called after each compile."""
    check_available()
    unknown = [a for a in archs if a not in ARCHS]
    if unknown:
        raise RecurbenchError(f"unknown architecture {unknown[0]}; known: {', '.join(map(str, ARCHS))}")
    groups: dict[tuple[int, str], dict[str, Any]] = {}
    for workload in workloads() if chosen is None else chosen:
        for launch in workload.launches():
            for arch in archs:
                target, src, options, spec = _specialise(launch, arch)
                key = (arch, f"{src.hash()}-{options.hash()}")
                group = groups.setdefault(key, dict(
                    launch=launch, target=target, src=src, options=options, label=_label(launch, spec),
                    default=False, workloads=[]))
                group["default"] |= workload.default
                if workload.name not in group["workloads"]:
                    group["workloads"].append(workload.name)
    rows = []
    for done, (key, g) in enumerate(groups.items(), start=1):
        if key not in _CACHE:
            _CACHE[key] = _compile(g["target"], g["src"], g["options"])
        c = _CACHE[key]
        if progress is not None:
            progress(done, len(groups))
        arch = key[0]
        shared = None if c.error else c.static_shared + c.dynamic_shared
        rows.append(KernelResources(
            kernel=g["launch"].kernel.__name__, configuration=g["label"], arch=arch, registers=c.registers,
            spill_bytes=c.stack, shared_bytes=shared,
            occupancy=None if c.error else occupancy(ARCHS[arch], c.registers, shared, c.num_warps),
            num_warps=c.num_warps, default=g["default"], workloads=tuple(g["workloads"]), error=c.error,
        ))
    kernel_order = {name: i for i, name in enumerate(dict.fromkeys(r.kernel for r in rows))}
    return sorted(rows, key=lambda r: (kernel_order[r.kernel], r.arch, r.configuration))
