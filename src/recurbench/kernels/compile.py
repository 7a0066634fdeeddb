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
integers equal to 1, 16-divisible integers and 16-byte-aligned pointers). The workloads
(:func:`recurbench.bench.kernels.workloads`, the callers choose them):

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

import torch

from recurbench.errors import RecurbenchError
from recurbench.kernels.launch import KernelLaunch
from recurbench.kernels.rem import range_span
from recurbench.kernels.rem.heads import make_layout


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
        from recurbench.kernels.rem.triton import training_launches  # noqa: PLC0415 - triton is optional (the gpu extra)

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
        from recurbench.kernels.memattn.triton import step_launches  # noqa: PLC0415 - triton is optional (the gpu extra)

        return step_launches(self.batch, self.slots, self.attention_size, self.hidden_size, self.nu)


Workload = RemWorkload | MemattnWorkload

def rem_span(n_keys: int, query_positions: range | None = None) -> int:
    """T of the square computation :func:`recurbench.kernels.rem.rem_apply` pads non-square queries to."""
    if query_positions is None:
        return n_keys
    lo, hi = range_span(query_positions, n_keys)
    return hi - lo


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
    import triton  # noqa: PLC0415 - triton is optional (the gpu extra)

    try:
        from triton import knobs  # noqa: PLC0415 - triton is optional (the gpu extra)

        return knobs.nvidia.cuobjdump.path
    except (ImportError, AttributeError):  # triton before knobs
        return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def check_available() -> None:
    """Raise :class:`KernelCompileUnavailable` with the reason if kernels cannot be compiled here."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise KernelCompileUnavailable("TRITON_INTERPRET=1: the kernels are interpreter objects, not compilable")
    try:
        import triton  # noqa: PLC0415 - triton is optional (the gpu extra)
        from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: F401, PLC0415 - triton is optional (the gpu extra)
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
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415 - triton is optional (the gpu extra)
    from triton.compiler import ASTSource, make_backend  # noqa: PLC0415 - triton is optional (the gpu extra)
    from triton.runtime.jit import create_function_from_signature  # noqa: PLC0415 - triton is optional (the gpu extra)

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
    import triton  # noqa: PLC0415 - triton is optional (the gpu extra)

    try:
        compiled = triton.compile(src, target=target, options=options.__dict__)
    except Exception as exc:  # noqa: BLE001 -- reported per configuration, the others still compile
        return _Compiled(None, None, None, None, options.num_warps, f"{type(exc).__name__}: {exc}".strip()[:2000])
    reg, stack, shared = _resource_usage(compiled.asm["cubin"])
    return _Compiled(reg, stack, shared, compiled.metadata.shared, compiled.metadata.num_warps, None)


def kernel_resources(
    archs: Sequence[int] = (80, 90),
    chosen: Sequence[Workload] = (),
    progress: Callable[[int, int], None] | None = None,
) -> list[KernelResources]:
    """Compile every specialisation the ``chosen`` workloads launch (the suites' own:
    :func:`recurbench.bench.kernels.workloads`) for each
    architecture and read its resources; one row per (kernel, specialisation, architecture), kernels
    and architectures in order. ``progress(done, total)`` is called after each compile."""
    check_available()
    unknown = [a for a in archs if a not in ARCHS]
    if unknown:
        raise RecurbenchError(f"unknown architecture {unknown[0]}; known: {', '.join(map(str, ARCHS))}")
    groups: dict[tuple[int, str], dict[str, Any]] = {}
    for workload in chosen:
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
