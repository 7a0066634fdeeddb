"""Triton kernels for the REM operator (CUDA; testable on CPU with ``TRITON_INTERPRET=1``).

Same algorithm as :mod:`recurbench.kernels.rem.chunked`, fused: one program owns one (batch, lane,
feature block), where a *lane* is one residue class r of one head h with dilation d (positions
r, r + d, r + 2d, ...), so dilation costs no copies, only a stride. The program walks its lane in
chunks of C steps; per chunk it does one ``tl.dot`` with the C x C Toeplitz block of f and either

* adds Re(c z**i S) from the carried complex state S and updates S <- z**C S + sum_j z**(C - j) x_j
  (exact REM), or
* with truncation at K, adds ``tl.dot`` products with the blocks of the ceil(K / C) previous chunks
  (no state; exact truncated REM).

``REVERSE`` runs the lane backwards (the anti-causal half of an unmasked REM, and the transpose needed
for dV). Backward: dV = P' dY with the same kernel; for the parameters a second kernel accumulates
B = sum_{t > s} (t - s) z**(t - s - 1) <dY_t, v_s> using the derivative table k z**(k - 1) and a second
("Jordan") state, from which d/dbase = Re(c e^{i angle} B) and d/dangle = base Re(i c e^{i angle} B).

All powers are precomputed in PyTorch as short tables (non-negative exponents only, see ``heads.py``).
``tl.dot`` shapes are C x C by C x BD with C, BD >= 16 (powers of two). fp32 inputs use TF32 in the
block products only when ``torch.backends.cuda.matmul.allow_tf32`` is set; fp64 uses IEEE.

Every launch is described by :func:`_geometry` (block sizes, precision, warps) and built by
:func:`_scan_launches` / :func:`_dparam_launches`, which the op runs and which
:mod:`recurbench.kernels.compile` (driven by :mod:`recurbench.bench.kernels`) compiles ahead of time for sm_80 and sm_90 (registers, spills,
shared memory: ``recurbench bench kernels``). The tile limits in :func:`_geometry` come from there:
with IEEE products, C = 64 spilled registers on both architectures, and so did C x BD = 32 x 32 in fp64.

The operator is registered with ``torch.library.triton_op`` (``torch.ops.recurbench.rem_scan``) with
its backward, so ``torch.compile`` sees through it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from recurbench.kernels.launch import KernelLaunch
from recurbench.kernels.rem.heads import HeadLayout, kernel_values, powers


@triton.jit
def _lane_rows(c, n_steps, r, d, offs_i, C: tl.constexpr, REVERSE: tl.constexpr):
    """Time index and validity of the C rows of chunk c of a lane (reversed lanes count from the end)."""
    j = c * C + offs_i
    valid = (j >= 0) & (j < n_steps)
    if REVERSE:
        step = n_steps - 1 - j
    else:
        step = j
    return r + step * d, valid


@triton.jit
def _lane(pid, LANES, n_lanes, T, C: tl.constexpr):
    """Program id -> batch b, head h, residue r, dilation d, lane length and chunk count."""
    b = pid // n_lanes
    lane = pid % n_lanes
    h = tl.load(LANES + 3 * lane)
    r = tl.load(LANES + 3 * lane + 1)
    d = tl.load(LANES + 3 * lane + 2)
    n_steps = (T - r + d - 1) // d
    return b, h, r, d, n_steps, (n_steps + C - 1) // C


# Triton specialises integer arguments on being 1 or a multiple of 16 (one compiled kernel per
# combination). That pays for the strides (aligned, vectorised row loads) but not for the sequence
# length, the lane count or the table sizes, which only bound loops and index the small tables: without
# this, every model shape would compile its own copy (``recurbench bench kernels`` lists the copies).
_PLAIN_INTS = ["T", "n_lanes", "n_lookback", "kt"]


@triton.jit(do_not_specialize=_PLAIN_INTS)
def _rem_fwd_kernel(
    X, Y, FTAB, ZRE, ZIM, COEF, LANES,
    T, D, n_lanes, n_lookback, kt,
    stride_b, stride_t, stride_h,
    C: tl.constexpr, BD: tl.constexpr,
    REVERSE: tl.constexpr, TRUNCATED: tl.constexpr, ACCUMULATE: tl.constexpr, PREC: tl.constexpr,
):
    pid = tl.program_id(0)
    b, h, r, d, n_steps, n_chunks = _lane(pid, LANES, n_lanes, T, C)

    offs_i = tl.arange(0, C)
    offs_d = tl.program_id(1) * BD + tl.arange(0, BD)
    dmask = offs_d < D
    x_base = X + b * stride_b + h * stride_h
    y_base = Y + b * stride_b + h * stride_h
    lag = offs_i[:, None] - offs_i[None, :]
    F0 = tl.load(FTAB + h * kt + tl.maximum(lag, 0), mask=lag > 0, other=0.0)

    # Carried state S = sum_{s before chunk} z^(distance to chunk start) x_s, and its weights.
    cr = tl.load(COEF + 2 * h)
    ci = tl.load(COEF + 2 * h + 1)
    zr_i = tl.load(ZRE + h * (C + 1) + offs_i)
    zi_i = tl.load(ZIM + h * (C + 1) + offs_i)
    g_re = cr * zr_i - ci * zi_i  # c z^i
    g_im = cr * zi_i + ci * zr_i
    w_re = tl.load(ZRE + h * (C + 1) + C - offs_i)  # z^(C - j)
    w_im = tl.load(ZIM + h * (C + 1) + C - offs_i)
    a_re = tl.load(ZRE + h * (C + 1) + C)  # z^C
    a_im = tl.load(ZIM + h * (C + 1) + C)
    s_re = tl.zeros([BD], dtype=X.dtype.element_ty)
    s_im = tl.zeros([BD], dtype=X.dtype.element_ty)

    for c in range(0, n_chunks):
        t, valid = _lane_rows(c, n_steps, r, d, offs_i, C, REVERSE)
        mask = valid[:, None] & dmask[None, :]
        x = tl.load(x_base + t[:, None] * stride_t + offs_d[None, :], mask=mask, other=0.0)
        y = tl.dot(F0, x, input_precision=PREC)
        if TRUNCATED:
            for m in range(1, n_lookback + 1):
                tp, vp = _lane_rows(c - m, n_steps, r, d, offs_i, C, REVERSE)
                xp = tl.load(x_base + tp[:, None] * stride_t + offs_d[None, :],
                             mask=vp[:, None] & dmask[None, :], other=0.0)
                Fm = tl.load(FTAB + h * kt + m * C + lag)
                y += tl.dot(Fm, xp, input_precision=PREC)
        else:
            y += g_re[:, None] * s_re[None, :] - g_im[:, None] * s_im[None, :]
            u_re = tl.sum(w_re[:, None] * x, axis=0)
            u_im = tl.sum(w_im[:, None] * x, axis=0)
            s_re, s_im = a_re * s_re - a_im * s_im + u_re, a_re * s_im + a_im * s_re + u_im
        y_ptrs = y_base + t[:, None] * stride_t + offs_d[None, :]
        if ACCUMULATE:
            y += tl.load(y_ptrs, mask=mask, other=0.0)
        tl.store(y_ptrs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=_PLAIN_INTS)
def _rem_dparam_kernel(
    X, DY, DZRE, DZIM, ZRE, ZIM, LANES, PARTIAL,
    T, D, n_lanes, n_lookback, kt,
    stride_b, stride_t, stride_h,
    C: tl.constexpr, BD: tl.constexpr,
    REVERSE: tl.constexpr, TRUNCATED: tl.constexpr, PREC: tl.constexpr,
):
    """PARTIAL[pid, blk] += sum_t <dY_t, W_t>, W_t = sum_{s before t} (lag) z^(lag - 1) x_s (complex)."""
    pid = tl.program_id(0)
    b, h, r, d, n_steps, n_chunks = _lane(pid, LANES, n_lanes, T, C)

    offs_i = tl.arange(0, C)
    offs_d = tl.program_id(1) * BD + tl.arange(0, BD)
    dmask = offs_d < D
    x_base = X + b * stride_b + h * stride_h
    dy_base = DY + b * stride_b + h * stride_h
    lag = offs_i[:, None] - offs_i[None, :]
    Dre = tl.load(DZRE + h * kt + tl.maximum(lag, 0), mask=lag > 0, other=0.0)
    Dim = tl.load(DZIM + h * kt + tl.maximum(lag, 0), mask=lag > 0, other=0.0)

    zr_i = tl.load(ZRE + h * (C + 1) + offs_i)  # z^i
    zi_i = tl.load(ZIM + h * (C + 1) + offs_i)
    dr_i = tl.load(DZRE + h * kt + offs_i)  # i z^(i - 1)
    di_i = tl.load(DZIM + h * kt + offs_i)
    w_re = tl.load(ZRE + h * (C + 1) + C - offs_i)  # z^(C - j)
    w_im = tl.load(ZIM + h * (C + 1) + C - offs_i)
    v_re = tl.load(DZRE + h * kt + C - offs_i)  # (C - j) z^(C - j - 1)
    v_im = tl.load(DZIM + h * kt + C - offs_i)
    a_re = tl.load(ZRE + h * (C + 1) + C)  # z^C
    a_im = tl.load(ZIM + h * (C + 1) + C)
    e_re = tl.load(DZRE + h * kt + C)  # C z^(C - 1)
    e_im = tl.load(DZIM + h * kt + C)
    # S = sum z^m x_s and its "Jordan" partner P = sum m z^(m - 1) x_s (m: distance to chunk start).
    s_re = tl.zeros([BD], dtype=X.dtype.element_ty)
    s_im = tl.zeros([BD], dtype=X.dtype.element_ty)
    p_re = tl.zeros([BD], dtype=X.dtype.element_ty)
    p_im = tl.zeros([BD], dtype=X.dtype.element_ty)
    acc_re = tl.zeros([BD], dtype=X.dtype.element_ty)
    acc_im = tl.zeros([BD], dtype=X.dtype.element_ty)

    for c in range(0, n_chunks):
        t, valid = _lane_rows(c, n_steps, r, d, offs_i, C, REVERSE)
        mask = valid[:, None] & dmask[None, :]
        x = tl.load(x_base + t[:, None] * stride_t + offs_d[None, :], mask=mask, other=0.0)
        dy = tl.load(dy_base + t[:, None] * stride_t + offs_d[None, :], mask=mask, other=0.0)
        W_re = tl.dot(Dre, x, input_precision=PREC)
        W_im = tl.dot(Dim, x, input_precision=PREC)
        if TRUNCATED:
            # Not software-pipelined: with triton 3.6's pipelining, ptxas kept two values on the stack
            # around the loop (8 bytes per thread on sm_80; ``recurbench bench kernels``).
            for m in tl.range(1, n_lookback + 1, num_stages=1):
                tp, vp = _lane_rows(c - m, n_steps, r, d, offs_i, C, REVERSE)
                xp = tl.load(x_base + tp[:, None] * stride_t + offs_d[None, :],
                             mask=vp[:, None] & dmask[None, :], other=0.0)
                W_re += tl.dot(tl.load(DZRE + h * kt + m * C + lag), xp, input_precision=PREC)
                W_im += tl.dot(tl.load(DZIM + h * kt + m * C + lag), xp, input_precision=PREC)
        else:
            # (i + m) z^(i + m - 1) = [i z^(i - 1)] z^m + z^i [m z^(m - 1)]
            W_re += dr_i[:, None] * s_re[None, :] - di_i[:, None] * s_im[None, :]
            W_re += zr_i[:, None] * p_re[None, :] - zi_i[:, None] * p_im[None, :]
            W_im += dr_i[:, None] * s_im[None, :] + di_i[:, None] * s_re[None, :]
            W_im += zr_i[:, None] * p_im[None, :] + zi_i[:, None] * p_re[None, :]
            u_re = tl.sum(w_re[:, None] * x, axis=0)
            u_im = tl.sum(w_im[:, None] * x, axis=0)
            q_re = tl.sum(v_re[:, None] * x, axis=0)
            q_im = tl.sum(v_im[:, None] * x, axis=0)
            p_re, p_im = (a_re * p_re - a_im * p_im + e_re * s_re - e_im * s_im + q_re,
                          a_re * p_im + a_im * p_re + e_re * s_im + e_im * s_re + q_im)
            s_re, s_im = a_re * s_re - a_im * s_im + u_re, a_re * s_im + a_im * s_re + u_im
        acc_re += tl.sum(dy * W_re, axis=0)
        acc_im += tl.sum(dy * W_im, axis=0)

    out = PARTIAL + (pid * tl.num_programs(1) + tl.program_id(1)) * 2
    tl.store(out, tl.sum(acc_re, axis=0))
    tl.store(out + 1, tl.sum(acc_im, axis=0))


# ----------------------------------------------------------------------------------------- wrappers


TRITON_DEFAULT_CHUNK = 32
"""Chunk length C unless ``chunk_size`` asks for another (a power of two >= 16, at most the longest lane)."""

TILE_ELEMENTS = {4: 2048, 8: 512}
"""Most C x BD elements one program holds, by element size (fp32, fp64). Larger tiles spill registers
in the parameter-gradient kernel on sm_80 and sm_90 (``recurbench bench kernels``)."""


class ScanGeometry(NamedTuple):
    """The compile-time shape of one call's launches (shared by the forward and backward kernels)."""

    C: int
    """Chunk length: rows of the C x C Toeplitz block."""
    BD: int
    """Feature columns per program."""
    truncate: int | None
    """The truncation, or None where it cannot bite (K >= T - 1)."""
    n_lookback: int
    """Previous chunks a truncated walk reads."""
    kt: int
    """Length of each head's kernel table."""
    prec: str
    """``tl.dot`` input precision."""
    num_warps: int


def _geometry(
    x: torch.Tensor, min_dilation: int, chunk: int | None, truncate: int | None, *, tf32: bool | None = None
) -> ScanGeometry:
    """Block sizes and launch settings for ``x`` ``[B, T, H, D]``; ``tf32=None`` follows torch's flag."""
    T, D = x.shape[1], x.shape[3]
    longest = -(-T // min_dilation)
    C = 16
    while C < min(chunk or TRITON_DEFAULT_CHUNK, longest):
        C *= 2
    tile = TILE_ELEMENTS.get(x.element_size(), TILE_ELEMENTS[4])
    BD = min(64, max(16, triton.next_power_of_2(D)), max(16, tile // C))
    if truncate is not None and truncate >= T - 1:
        truncate = None
    n_chunks = -(-longest // C)
    n_lookback = 0
    if truncate is not None and truncate > 0:
        n_lookback = min(n_chunks - 1, (truncate - 1) // C + 1)
    kt = (n_lookback + 1) * C + 1
    # The largest tile (fp32, 32 x 64) needs 8 warps: with 4 the parameter-gradient kernel spilled
    # (255 registers and 32-40 bytes of stack per thread on sm_80 and sm_90; 8 warps: about 180, none).
    num_warps = 8 if C * BD >= 2048 else 4
    return ScanGeometry(C, BD, truncate, n_lookback, kt, _precision(x.dtype, tf32), num_warps)


def _precision(dtype: torch.dtype, tf32: bool | None = None) -> str:
    if tf32 is None:
        tf32 = torch.backends.cuda.matmul.allow_tf32
    return "tf32" if dtype == torch.float32 and tf32 else "ieee"


def _tables(base, angle, coef, C, kt, truncate):
    ftab = kernel_values(base, angle, coef, kt, truncate).contiguous()
    zre, zim = powers(base, angle, torch.arange(C + 1, device=base.device))
    return ftab, zre.contiguous(), zim.contiguous()


def _derivative_tables(base, angle, kt, truncate):
    """k z^(k - 1) for k = 0..kt-1 (0 at k = 0 and beyond the truncation)."""
    k = torch.arange(kt, device=base.device)
    re, im = powers(base, angle, (k - 1).clamp(min=0))
    keep = (k > 0) if truncate is None else (k > 0) & (k <= truncate)
    scale = (k * keep).to(base.dtype)
    return (re * scale).contiguous(), (im * scale).contiguous()


def _grid(x: torch.Tensor, lanes: torch.Tensor, geo: ScanGeometry) -> tuple[int, int]:
    """One program per (batch, lane, feature block)."""
    return x.shape[0] * lanes.shape[0], triton.cdiv(x.shape[3], geo.BD)


def _scan_launches(x, y, base, angle, coef, lanes, masked: bool, geo: ScanGeometry, *, transpose: bool):
    """The lane walks of y = P x (P' x when ``transpose``), in order: the causal walk (reversed for a
    masked transpose), then, unmasked, the reversed walk adding the anti-causal half into y."""
    T, D = x.shape[1], x.shape[3]
    ftab, zre, zim = _tables(base, angle, coef, geo.C, geo.kt, geo.truncate)
    walks = [(transpose and masked, False)] + ([] if masked else [(True, True)])
    return [
        KernelLaunch(
            _rem_fwd_kernel, _grid(x, lanes, geo),
            (x, y, ftab, zre, zim, coef, lanes, T, D, lanes.shape[0], geo.n_lookback, geo.kt,
             x.stride(0), x.stride(1), x.stride(2)),
            dict(C=geo.C, BD=geo.BD, REVERSE=reverse, TRUNCATED=geo.truncate is not None, ACCUMULATE=accumulate,
                 PREC=geo.prec, num_warps=geo.num_warps),
        )
        for reverse, accumulate in walks
    ]


def _dparam_partials(x, lanes, masked: bool, geo: ScanGeometry) -> torch.Tensor:
    """Per-program partial sums of the parameter-gradient kernel: ``[walks, programs, blocks, 2]``."""
    return torch.zeros(1 if masked else 2, *_grid(x, lanes, geo), 2, dtype=x.dtype, device=x.device)


def _dparam_launches(x, dy, base, angle, lanes, partial, masked: bool, geo: ScanGeometry):
    """The parameter-gradient walks: causal, plus the reversed one when unmasked (``partial[k]`` each)."""
    T, D = x.shape[1], x.shape[3]
    zre, zim = powers(base, angle, torch.arange(geo.C + 1, device=x.device))
    dzre, dzim = _derivative_tables(base, angle, geo.kt, geo.truncate)
    return [
        KernelLaunch(
            _rem_dparam_kernel, _grid(x, lanes, geo),
            (x, dy, dzre, dzim, zre.contiguous(), zim.contiguous(), lanes, partial[k],
             T, D, lanes.shape[0], geo.n_lookback, geo.kt, x.stride(0), x.stride(1), x.stride(2)),
            dict(C=geo.C, BD=geo.BD, REVERSE=reverse, TRUNCATED=geo.truncate is not None, PREC=geo.prec,
                 num_warps=geo.num_warps),
        )
        for k, reverse in enumerate([False] if masked else [False, True])
    ]


def _run(launches: list[KernelLaunch]) -> None:
    for launch in launches:
        wrap_triton(launch.kernel)[launch.grid](*launch.args, **launch.meta)


def _apply(x, base, angle, coef, lanes, masked, geo, *, transpose=False):
    """y = P x (or P' x): causal lane walk, plus the reversed walk when unmasked."""
    y = torch.empty_like(x)
    _run(_scan_launches(x, y, base, angle, coef, lanes, masked, geo, transpose=transpose))
    return y


def training_launches(
    x: torch.Tensor, layout: HeadLayout, *, masked: bool, truncate: int | None, chunk: int | None,
    tf32: bool | None = None,
) -> list[KernelLaunch]:
    """Every launch of one forward and backward pass of the op on ``x`` ``[B, T, H, D]`` (the square
    span), built by the functions the op runs; on any device (``meta`` for compiling ahead of time)."""
    device = x.device
    base = torch.empty(layout.n_heads, dtype=x.dtype, device=device)
    angle = torch.empty_like(base)
    coef = layout.coef(x.dtype, device)
    lanes = _lane_table(layout, device)
    geo = _geometry(x, min(layout.dilations), chunk, truncate, tf32=tf32)
    partial = _dparam_partials(x, lanes, masked, geo)
    return [
        *_scan_launches(x, torch.empty_like(x), base, angle, coef, lanes, masked, geo, transpose=False),
        *_scan_launches(x, torch.empty_like(x), base, angle, coef, lanes, masked, geo, transpose=True),
        *_dparam_launches(x, x, base, angle, lanes, partial, masked, geo),
    ]


@triton_op("recurbench::rem_scan", mutates_args=())
def rem_scan(
    x: torch.Tensor, base: torch.Tensor, angle: torch.Tensor, coef: torch.Tensor, lanes: torch.Tensor,
    masked: bool, truncate: int | None, chunk: int | None, min_dilation: int,
) -> torch.Tensor:
    """P x for ``x`` ``[B, T, H, D]`` (contiguous); ``lanes`` ``[n, 3]`` int32 rows (head, residue, d)."""
    return _apply(x, base, angle, coef, lanes, masked, _geometry(x, min_dilation, chunk, truncate))


@triton_op("recurbench::rem_scan_backward", mutates_args=())
def rem_scan_backward(
    dy: torch.Tensor, x: torch.Tensor, base: torch.Tensor, angle: torch.Tensor, coef: torch.Tensor,
    lanes: torch.Tensor, masked: bool, truncate: int | None, chunk: int | None, min_dilation: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dbase, dangle) for ``y = rem_scan(x, ...)``."""
    dy = dy.contiguous()
    geo = _geometry(x, min_dilation, chunk, truncate)
    dx = _apply(dy, base, angle, coef, lanes, masked, geo, transpose=True)
    B, T, H, D = x.shape
    partial = _dparam_partials(x, lanes, masked, geo)
    _run(_dparam_launches(x, dy, base, angle, lanes, partial, masked, geo))
    per_lane = partial.sum(dim=(0, 2)).view(B, lanes.shape[0], 2).sum(0)  # [n_lanes, 2]
    Bz = torch.zeros(H, 2, dtype=x.dtype, device=x.device).index_add_(0, lanes[:, 0].long(), per_lane)
    # u = e^{i angle} B;  d/dbase = Re(c u),  d/dangle = base * Re(i c u) = -base * Im(c u)
    cos, sin = torch.cos(angle), torch.sin(angle)
    u_re = cos * Bz[:, 0] - sin * Bz[:, 1]
    u_im = cos * Bz[:, 1] + sin * Bz[:, 0]
    cr, ci = coef[:, 0], coef[:, 1]
    dbase = cr * u_re - ci * u_im
    dangle = -base * (cr * u_im + ci * u_re)
    return dx, dbase, dangle


def _setup_context(ctx, inputs, output):
    x, base, angle, coef, lanes, masked, truncate, chunk, min_dilation = inputs
    ctx.save_for_backward(x, base, angle, coef, lanes)
    ctx.args = (masked, truncate, chunk, min_dilation)


def _backward(ctx, dy):
    x, base, angle, coef, lanes = ctx.saved_tensors
    dx, dbase, dangle = rem_scan_backward(dy, x, base, angle, coef, lanes, *ctx.args)
    return dx, dbase, dangle, None, None, None, None, None, None


rem_scan.register_autograd(_backward, setup_context=_setup_context)


def rem_triton_square(
    x: torch.Tensor,
    layout: HeadLayout,
    base: torch.Tensor,
    angle: torch.Tensor,
    *,
    masked: bool,
    truncate: int | None = None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Square REM product through the Triton op; ``x`` ``[B, T, H, D]``."""
    coef = layout.coef(x.dtype, x.device)
    return rem_scan(x.contiguous(), base, angle, coef, _lane_table(layout, x.device), masked, truncate, chunk_size,
                    min(layout.dilations))


def _lane_table(layout: HeadLayout, device: torch.device) -> torch.Tensor:
    """``[n_lanes, 3]`` int32 rows (head, residue, dilation): one per residue class of each head."""
    return torch.tensor(
        [(h, r, d) for h, d in enumerate(layout.dilations) for r in range(d)], dtype=torch.int32, device=device
    )
