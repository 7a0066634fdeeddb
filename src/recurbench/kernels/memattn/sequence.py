"""The attentive cores over a whole sequence, with a hand-written backward: their training path.

The memory tasks run every sequence from an empty state and keep none after it, so a core's ``L``
steps can be one autograd node instead of ~30 small ones per step. :func:`attentive_sequence` runs the
recurrence of :class:`~recurbench.agents.cores.AttentiveCore` (the reference: its ``step``, through
:func:`.naive.memory_attention_step_reference`) for an LSTM or an RNN cell::

    q_t    = W s_{t-1} + b_W                     (s_{-1} = 0)
    alpha  = softmax_i(v' tanh(q_t + U h_i))     over the memory M_t (empty at t = 0: read 0)
    s_t    = (h_{t-1} + sum_i alpha_i h_i) / 2   (h_{-1} = 0)
    h_t    = cell(xw_t + R s_t)                  LSTM (with c_t) or phi in {tanh, relu, modReLU}

``xw_t`` is the input's projection with the cell's biases (computed outside, by autograd, as one
matrix product over all steps). The memory ``M_t`` holds indices into the history of states:

* ``window`` (MemLSTM / MemRNN over a sequence they keep whole): ``h_0 .. h_{t-1}``, read as slices;
* ``screened`` (RelLSTM / RelRNN, or a window that slides): a short-term buffer of ``nu`` slots and a
  relevant set of ``rho``, updated by the rules of :mod:`.naive` (the relevancy scores are detached
  sums of attention, so the bookkeeping runs in numpy on the ``[B, nu + rho]`` index table).

Forward keeps the histories ``h_t``, ``U h_t``, ``s_t``, ``q_t``, the gates and ``tanh c_t`` (an RNN: its
pre-activations), the attention weights and the index table (the screened memory's keys and values
are gathered from the histories again in the backward); backward runs the steps in reverse with explicit formulas,
adding each read's gradients into the history's gradient buffers (every read of ``h_i`` comes from a
later step, so ``h_i``'s gradient is complete when the reverse loop reaches step ``i``), and forms the
weights' gradients at the end as single matrix products over all steps. ``tanh(q_t + U h_i)`` is
recomputed rather than stored (the window's would be ``O(L^2 A)``).

:func:`recurrent_sequence` is the same for the RNNs without attention (orth-RNN, expRNN), in Python (two
calls a step); :func:`sparse_attentive_sequence` is SAB's, in the C++ loop only (stepping its cell is
its reference and its fallback).

On a CPU the step loops of :func:`attentive_sequence` run in C++ (``sequence_native.cpp``, built on first
use by :mod:`.native`; ``loop="python"`` asks for this module's): the same operations and formulas,
with the per-slot work as plain loops instead of ~45 small PyTorch calls and ~100 us of interpreter a
step (RelLSTM at T = 500, batch 10: about 4.5x the Python loop's steps per CPU-second;
``docs/performance.md``). The Python loop is the fallback where no compiler is found, and the GPU's
path (PyTorch operations; the screening's table stays on the host, which costs a copy of ``alpha`` and
of the table per step there). ``tests/kernels/memattn/test_sequence.py`` checks
outputs and every gradient against the reference step in float64.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from recurbench.kernels.memattn.native import SWITCH, native_module

CELLS = ("lstm", "tanh", "relu", "modrelu")  # in the native loop's order (its Cell codes)
LOOPS = ("auto", "native", "python")


class _Screening:
    """The screened memory of ``B`` rows in lockstep: which state each slot holds, as rows of the
    ``[T * B, .]`` history (``n * B + b`` for state ``n`` of row ``b``; an empty slot holds row 0 and
    is masked), and the slots' relevancy scores."""

    def __init__(self, batch: int, nu: int, rho: int, dtype: torch.dtype) -> None:
        self.nu, self.rho = nu, rho
        self.rows = np.arange(batch)
        self.flat = np.zeros((batch, nu + rho), dtype=np.int64)
        self.occupied = np.zeros(nu + rho, dtype=bool)  # the same for every row (see insert)
        self.scores = np.zeros((batch, nu + rho), dtype=torch.empty(0, dtype=dtype).numpy().dtype)

    def insert(self, n: int) -> None:
        """Store state ``n`` at buffer slot ``n mod nu``; the state it evicts may enter the relevant set
        (an empty slot, else the lowest-scoring one, first on ties, if its score is strictly higher).
        An evicted state always takes an empty slot (its score beats -inf), so every row fills its
        relevant set at the same steps and the occupied slots are the same for all rows."""
        nu, pos, flat, scores = self.nu, n % self.nu, self.flat, self.scores
        if self.rho > 0 and self.occupied[pos]:
            candidate = scores[:, pos]
            members = np.where(self.occupied[nu:], scores[:, nu:], -np.inf)
            j = members.argmin(axis=1)
            enters = self.rows[candidate > members[self.rows, j]]
            if not self.occupied[nu:].all():  # the first empty slot, the same in every row, takes it
                self.occupied[nu + j[0]] = True
            flat[enters, nu + j[enters]] = flat[enters, pos]
            scores[enters, nu + j[enters]] = candidate[enters]
        flat[:, pos] = n * len(self.rows) + self.rows
        scores[:, pos] = 0
        self.occupied[pos] = True

    def attended(self, alpha: np.ndarray) -> None:
        """Buffer slots add the (detached) attention they received to their relevancy score."""
        self.scores[:, : self.nu] += alpha[:, : self.nu]


def _activate(pre: Tensor, cell: str, bias: Tensor, out: Tensor) -> Tensor:
    """``h = phi(pre)`` into ``out`` (an RNN cell)."""
    if cell == "tanh":
        return torch.tanh(pre, out=out)
    if cell == "relu":
        return torch.clamp_min(pre, 0, out=out)
    return torch.mul(torch.sign(pre), torch.relu(pre.abs().add_(bias)), out=out)


def _slope(cell: str, pre: Tensor, h: Tensor, bias: Tensor) -> Tensor:
    """``dh/dz`` of ``h = phi(z)`` for every step at once."""
    if cell == "tanh":
        return 1 - h * h
    if cell == "relu":
        return (pre > 0).to(h.dtype)
    return ((pre.abs() + bias) > 0).to(h.dtype)  # d/dz sign(z)(|z| + b) = 1 where active


class _Histories:
    """What the forward keeps for the backward (``[T, B, .]``): ``O(T (H + A + S))`` per row. The
    screened memory's keys, values and ``tanh(q + key)`` (``O(T S (H + A))``) are gathered again in the
    backward instead: a fresh buffer that size costs more in page faults than the gathers do."""

    def __init__(self, xw: Tensor, H: int, A: int, S: int, lstm: bool, window: bool) -> None:
        T, B, G = xw.shape
        self.h = xw.new_empty(T, B, H)
        self.k = xw.new_empty(T, B, A)  # U h_t
        self.s = xw.new_empty(T, B, H)
        self.q = xw.new_empty(T, B, A)
        self.act = xw.new_empty(T, B, G)  # the LSTM's gates i, f, g, o after their activations; an RNN's z
        self.c = xw.new_empty(T, B, H) if lstm else None
        self.tanh_c = xw.new_empty(T, B, H) if lstm else None
        self.alpha = xw.new_empty(T, B, S)  # step t's weights in [:, :n] (n = t for a window, else S)
        # each step's slots, on xw's device: they index its histories (a CPU index failed on the GPU)
        self.flat = None if window else torch.zeros(T, B * S, dtype=torch.long, device=xw.device)


class _AttentiveSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, xw: Tensor, w_rec: Tensor, wq: Tensor, bq: Tensor, wk: Tensor, v: Tensor, bias: Tensor,
                cell: str, nu: int, rho: int, native: ModuleType | None) -> Tensor:
        ctx.native = native
        if native is not None:  # the same loop in C++ (sequence_native.cpp)
            ctx.cell = cell
            ctx.hist = native.attentive_forward(xw, w_rec, wq, bq, wk, v, bias, CELLS.index(cell), nu, rho)
            ctx.save_for_backward(w_rec, wq, wk, v, bias)
            return ctx.hist[0].clone()
        T, B, _ = xw.shape
        H, A = w_rec.shape[1], wq.shape[0]
        lstm, window = cell == "lstm", rho == 0 and nu >= T
        S = T if window else nu + rho
        hist = _Histories(xw, H, A, S, lstm, window)
        memory = None if window else _Screening(B, nu, rho, xw.dtype)
        h_flat, k_flat = hist.h.view(T * B, H), hist.k.view(T * B, A)
        # Contiguous transposes: a [B, H] x [H, 4H] product reads them twice as fast as transposed views.
        w_rec_t, wq_t, wk_t = (w.t().contiguous() for w in (w_rec, wq, wk))
        # Per-step views, made once (indexing a tensor per step costs as much as a small operation).
        xw_t, h_t, k_t, s_t, q_t, alpha_t = (u.unbind(0) for u in (xw, hist.h, hist.k, hist.s, hist.q, hist.alpha))
        act_t = hist.act.unbind(0)
        c_t = hist.c.unbind(0) if hist.c is not None else None
        tanh_c_t = hist.tanh_c.unbind(0) if hist.tanh_c is not None else None
        flat_t = hist.flat.unbind(0) if hist.flat is not None else None
        h = xw.new_zeros(B, H)
        c = xw.new_zeros(B, H)
        s = xw.new_zeros(B, H)
        for t in range(T):
            q = torch.addmm(bq, s, wq_t, out=q_t[t])
            s = s_t[t]
            if t == 0:
                torch.mul(h, 0.5, out=s)  # nothing stored yet: the read is 0
            else:
                if memory is None:
                    keys, values = hist.k[:t].transpose(0, 1), hist.h[:t].transpose(0, 1)  # [B, t, .]
                    alpha = alpha_t[t][:, :t]
                else:
                    memory.insert(t - 1)
                    flat = flat_t[t]
                    flat.copy_(torch.from_numpy(memory.flat).view(-1))
                    keys = k_flat.index_select(0, flat).view(B, S, A)
                    values = h_flat.index_select(0, flat).view(B, S, H)
                    alpha = alpha_t[t]
                e = keys.add(q[:, None, :]).tanh_() @ v  # [B, n]
                if memory is not None and not memory.occupied.all():
                    e.masked_fill_(torch.from_numpy(~memory.occupied).to(e.device), float("-inf"))
                if memory is None:
                    alpha.copy_(torch.softmax(e, dim=1))  # a slice: no out= (it would not be written in place)
                else:
                    torch.ops.aten._softmax.out(e, 1, False, out=alpha)
                if memory is not None:
                    memory.attended(alpha.cpu().numpy())
                torch.baddbmm(h[:, None, :], alpha[:, None, :], values, beta=0.5, alpha=0.5, out=s[:, None, :])
            pre = torch.addmm(xw_t[t], s, w_rec_t)
            if c_t is not None:  # the LSTM
                gates = torch.sigmoid(pre, out=act_t[t])
                i, f, g, o = gates.chunk(4, dim=1)
                torch.tanh(pre[:, 2 * H : 3 * H], out=g)
                c = torch.mul(f, c, out=c_t[t]).addcmul_(i, g)
                h = torch.mul(o, torch.tanh(c, out=tanh_c_t[t]), out=h_t[t])
            else:
                act_t[t].copy_(pre)
                h = _activate(pre, cell, bias, out=h_t[t])
            torch.mm(h, wk_t, out=k_t[t])
        ctx.cell = cell
        ctx.hist = hist
        ctx.save_for_backward(w_rec, wq, wk, v, bias)
        return hist.h.clone()

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        w_rec, wq, wk, v, bias = ctx.saved_tensors
        if ctx.native is not None:
            grads = ctx.native.attentive_backward(grad_out, w_rec, wq, wk, v, bias, *ctx.hist, CELLS.index(ctx.cell))
            return (*grads, None, None, None, None)
        hist: _Histories = ctx.hist
        cell = ctx.cell
        T, B, H = hist.h.shape
        A = wq.shape[0]
        d_hist = grad_out.clone(memory_format=torch.contiguous_format)  # [T, B, H]: the outputs' gradients, then every read's (values and keys)
        d_keys = torch.zeros_like(hist.k)  # dL/d(U h_i), for U's gradient
        d_xw = torch.empty_like(hist.act)  # xw's shape: [T, B, G]
        d_q = torch.zeros_like(hist.q)
        d_v = torch.zeros_like(v)[None]
        one = v.new_ones(())
        d_cell = _CellBackward(cell, hist, bias)
        d_k_flat, d_h_flat = d_keys.view(T * B, A), d_hist.view(T * B, H)
        h_flat, k_flat = hist.h.view(T * B, H), hist.k.view(T * B, A)
        d_hist_t, d_keys_t, d_xw_t, d_q_t, q_t, alpha_t = (
            u.unbind(0) for u in (d_hist, d_keys, d_xw, d_q, hist.q, hist.alpha))
        flat_t = hist.flat.unbind(0) if hist.flat is not None else None
        d_read = torch.zeros_like(hist.h[0])  # dL/ds_t / 2 through q_{t+1}, then through the cell
        for t in range(T - 1, -1, -1):
            # h_t's gradient: its reads as a value (in d_hist) and as a key (U' dL/dk_t), all from later steps
            dh = torch.addmm(d_hist_t[t], d_keys_t[t], wk)
            da = d_cell.step(t, dh, out=d_xw_t[t])
            # s_t = (h_{t-1} + read_t) / 2: d_read = dL/ds_t / 2, which h_{t-1} gets too
            d_read = torch.addmm(d_read, da, w_rec, beta=1.0, alpha=0.5)
            if t == 0:
                break
            d_hist_t[t - 1].add_(d_read)
            if flat_t is None:
                keys, values = hist.k[:t].transpose(0, 1), hist.h[:t].transpose(0, 1)
                alpha = alpha_t[t][:, :t]
            else:
                flat = flat_t[t]
                keys = k_flat.index_select(0, flat).view(B, -1, A)
                values = h_flat.index_select(0, flat).view(B, -1, H)
                alpha = alpha_t[t]
            z = keys.add(q_t[t][:, None, :]).tanh_()  # [B, n, A], recomputed
            d_alpha = torch.bmm(values, d_read[:, :, None])[:, :, 0]
            de = torch._softmax_backward_data(d_alpha, alpha, 1, alpha.dtype)
            d_v.addmm_(de.reshape(1, -1), z.reshape(-1, A))
            d_pre = torch.addcmul(one, z, z, value=-1).mul_(de[:, :, None] * v)  # dL/d(q_t + U h_i)
            # each stored h_i: alpha_i d_read through the value; d_pre_i through its key (into d_keys,
            # projected by U' once the reverse loop reaches step i: one [B, A] product, not [B, n, A])
            d_stored = alpha[:, :, None] * d_read[:, None, :]
            if flat_t is None:
                d_hist[:t] += d_stored.transpose(0, 1)
                d_keys[:t] += d_pre.transpose(0, 1)
            else:
                d_h_flat.index_add_(0, flat, d_stored.view(-1, H))
                d_k_flat.index_add_(0, flat, d_pre.view(-1, A))
            torch.sum(d_pre, dim=1, out=d_q_t[t])
            d_read = torch.mm(d_q_t[t], wq).mul_(0.5)
        G = d_xw.shape[2]
        d_w_rec = d_xw.reshape(T * B, G).t() @ hist.s.reshape(T * B, H)
        d_wq = d_q[1:].reshape(-1, A).t() @ hist.s[:-1].reshape(-1, H)  # q_t reads s_{t-1}; d_q[0] = 0
        d_bq = d_q.sum(dim=(0, 1))
        d_wk = d_keys.reshape(T * B, A).t() @ hist.h.reshape(T * B, H)
        d_bias = (d_xw * torch.sign(hist.act)).sum(dim=(0, 1)) if cell == "modrelu" else torch.zeros_like(bias)
        return d_xw, d_w_rec, d_wq, d_bq, d_wk, d_v[0], d_bias, None, None, None, None


class _CellBackward:
    """``dL/d xw_t`` from ``dL/dh_t``, step by step in reverse, from the saved gates (an RNN: from its
    saved pre-activations, the slopes of all steps at once). Per step on purpose: formed for all steps
    at once, the LSTM's factors would take a dozen passes over ``[T, B, 4H]`` arrays that leave the cache,
    dearer than the small per-step operations."""

    def __init__(self, cell: str, hist: _Histories, bias: Tensor) -> None:
        self.lstm = hist.c is not None
        if hist.c is None:
            self.slope = _slope(cell, hist.act, hist.h, bias).unbind(0)
            return
        self.act = hist.act.unbind(0)
        self.gates = [u.unbind(0) for u in hist.act.chunk(4, dim=2)]  # i, f, g, o per step
        self.c, self.tanh_c = hist.c.unbind(0), hist.tanh_c.unbind(0)
        self.dc = torch.zeros_like(hist.h[0])  # dL/dc_t through c_{t+1}
        self.one = hist.h.new_ones(())
        self.H = hist.h.shape[2]

    def step(self, t: int, dh: Tensor, out: Tensor) -> Tensor:
        if not self.lstm:
            return torch.mul(dh, self.slope[t], out=out)
        H, dc, one = self.H, self.dc, self.one
        i, f, g, o = (u[t] for u in self.gates)
        tanh_c = self.tanh_c[t]
        # h = o tanh(c): do = dh tanh(c), dc += dh o (1 - tanh^2 c)
        torch.mul(dh, tanh_c, out=out[:, 3 * H :])
        dc.addcmul_(dh, torch.addcmul(one, tanh_c, tanh_c, value=-1).mul_(o))
        # c = f c_{t-1} + i g: di = dc g, df = dc c_{t-1}, dg = dc i
        torch.mul(dc, g, out=out[:, :H])
        if t > 0:
            torch.mul(dc, self.c[t - 1], out=out[:, H : 2 * H])
        else:
            out[:, H : 2 * H].zero_()
        torch.mul(dc, i, out=out[:, 2 * H : 3 * H])
        # through the activations: sigmoid' = s (1 - s) for i, f, o; tanh' = 1 - g^2 for g
        slope = torch.addcmul(self.act[t], self.act[t], self.act[t], value=-1)
        torch.addcmul(one, g, g, value=-1, out=slope[:, 2 * H : 3 * H])
        out.mul_(slope)
        dc.mul_(f)
        return out


def attentive_sequence(xw: Tensor, w_rec: Tensor, wq: Tensor, bq: Tensor, wk: Tensor, v: Tensor,
                       bias: Tensor | None = None, *, cell: str, nu: int, rho: int, loop: str = "auto") -> Tensor:
    """The outputs ``h_t`` [T, B, H] of an attentive core over ``T`` steps from an empty state.

    ``xw`` [T, B, G]: the input projections with the cell's biases (``G = 4H`` for the LSTM, gates in
    ``nn.LSTMCell``'s order i, f, g, o; ``H`` for an RNN); ``w_rec`` [G, H] the recurrent matrix
    applied to ``s_t``; ``wq`` [A, H], ``bq`` [A] the query; ``wk`` [A, H] the keys; ``v`` [A];
    ``bias`` [H]: modReLU's. ``cell``: ``lstm``, ``tanh``, ``relu`` or ``modrelu``.

    ``loop``: where the step loop runs (:data:`LOOPS`): ``native``, the C++ loop of
    ``sequence_native.cpp`` (CPU tensors; built on first use, :mod:`.native`); ``python``, this module's;
    ``auto`` (default), the C++ loop on a CPU where it could be built, else Python's.
    """
    if cell not in CELLS:
        raise ValueError(f"attentive_sequence: unknown cell {cell!r}; choose {', '.join(CELLS)}")
    if nu < 1 or rho < 0:
        raise ValueError(f"attentive_sequence: need nu >= 1 and rho >= 0, got nu={nu}, rho={rho}")
    if bias is None:
        bias = xw.new_zeros(w_rec.shape[1])
    native = _native_loop(xw, loop, "attentive_sequence")
    return _AttentiveSequence.apply(xw, w_rec, wq, bq, wk, v, bias, cell, nu, rho, native)


def _native_loop(xw: Tensor, loop: str, caller: str) -> ModuleType | None:
    """The compiled module where ``loop`` (:data:`LOOPS`) runs the C++ loop for tensors like ``xw``;
    None for the Python path. ``loop="native"`` where it cannot run is an error."""
    if loop not in LOOPS:
        raise ValueError(f"{caller}: unknown loop {loop!r}; choose {', '.join(LOOPS)}")
    if loop == "python":
        return None
    if xw.device.type != "cpu":
        if loop == "native":
            raise ValueError(f"{caller}: loop='native' runs on the CPU only; these tensors are on {xw.device}")
        return None
    native = native_module()
    if native is None and loop == "native":
        raise RuntimeError(f"{caller}: loop='native' asked for, but the native loop is not available here "
                           f"({SWITCH}=0, or its build failed: see the warning)")
    return native





class _RecurrentSequence(torch.autograd.Function):
    """``h_t = phi(xw_t + V h_{t-1})`` from ``h_{-1} = 0``: the RNN cores without attention."""

    @staticmethod
    def forward(ctx: Any, xw: Tensor, w_rec: Tensor, bias: Tensor, cell: str) -> Tensor:
        T, B, H = xw.shape
        hs, pres = xw.new_empty(T, B, H), xw.new_empty(T, B, H)
        h_t, pre_t, xw_t = hs.unbind(0), pres.unbind(0), xw.unbind(0)
        w_t = w_rec.t().contiguous()  # read twice as fast as a transposed view
        h = xw.new_zeros(B, H)
        for t in range(T):
            pre = torch.addmm(xw_t[t], h, w_t, out=pre_t[t])
            h = _activate(pre, cell, bias, out=h_t[t])
        ctx.cell = cell
        ctx.save_for_backward(w_rec, bias, hs, pres)
        return hs.clone()

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        w_rec, bias, hs, pres = ctx.saved_tensors
        T, B, H = hs.shape
        slope = _slope(ctx.cell, pres, hs, bias)
        d_pre = torch.empty_like(pres)
        d_pre_t, slope_t, grad_t = d_pre.unbind(0), slope.unbind(0), grad_out.unbind(0)
        dh = torch.zeros_like(hs[0])  # dL/dh_t through h_{t+1}
        for t in range(T - 1, -1, -1):
            da = torch.mul(dh.add_(grad_t[t]), slope_t[t], out=d_pre_t[t])
            dh = da @ w_rec
        h_prev = torch.cat([torch.zeros_like(hs[:1]), hs[:-1]])
        d_w_rec = d_pre.reshape(T * B, H).t() @ h_prev.reshape(T * B, H)
        d_bias = (d_pre * torch.sign(pres)).sum(dim=(0, 1)) if ctx.cell == "modrelu" else torch.zeros_like(bias)
        return d_pre, d_w_rec, d_bias, None


def recurrent_sequence(xw: Tensor, w_rec: Tensor, bias: Tensor | None = None, *, cell: str) -> Tensor:
    """The outputs ``h_t`` [T, B, H] of a vanilla RNN from ``h_{-1} = 0``: ``xw`` [T, B, H] the input
    projections with the bias, ``w_rec`` [H, H], ``bias`` [H] modReLU's; ``cell`` ``tanh``, ``relu``
    or ``modrelu``. One autograd node with a hand-written backward, as :func:`attentive_sequence`."""
    if cell not in CELLS or cell == "lstm":
        raise ValueError(f"recurrent_sequence: unknown cell {cell!r}; choose tanh, relu or modrelu")
    if bias is None:
        bias = xw.new_zeros(w_rec.shape[1])
    return _RecurrentSequence.apply(xw, w_rec, bias, cell)

class _SparseAttentiveSequence(torch.autograd.Function):
    """SAB over a whole sequence in the native loop (``sab_forward`` / ``sab_backward``)."""

    @staticmethod
    def forward(ctx: Any, xw: Tensor, w_hh: Tensor, wq: Tensor, bq: Tensor, wk: Tensor, v: Tensor, topk: int,
                truncate: int, stride: int, native: ModuleType) -> Tensor:
        ctx.native, ctx.settings = native, (topk, truncate, stride)
        ctx.hist = native.sab_forward(xw, w_hh, wq, bq, wk, v, topk, truncate, stride)
        ctx.save_for_backward(w_hh, wq, wk, v)
        return ctx.hist[0].clone()

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        w_hh, wq, wk, v = ctx.saved_tensors
        grads = ctx.native.sab_backward(grad_out, w_hh, wq, wk, v, *ctx.hist, *ctx.settings)
        return (*grads, None, None, None, None)


def sparse_attentive_sequence(xw: Tensor, w_hh: Tensor, wq: Tensor, bq: Tensor, wk: Tensor, v: Tensor, *,
                              topk: int, truncate: int, stride: int, loop: str = "auto") -> Tensor | None:
    """SAB's outputs ``h_t`` [T, B, H] from an empty state (the recurrence:
    :class:`~recurbench.agents.cores.SABCore`, the reference), as one autograd node with a hand-written
    backward in the native loop; ``None`` where that loop does not run (``loop`` as
    :func:`attentive_sequence`'s: ``python``, or ``auto`` off a CPU or without the build), for the
    caller to step the core instead.

    ``xw`` [T, B, 4H]: the LSTM's input projections with both biases; ``w_hh`` [4H, H]; ``wq`` [A, H],
    ``bq`` [A]: the query; ``wk`` [A, H]: the keys; ``v`` [A]; ``topk``, ``truncate`` and ``stride``
    (``memory_stride``) as SABCore's.
    """
    if min(topk, truncate, stride) < 1:
        raise ValueError(f"sparse_attentive_sequence: topk, truncate and stride must be at least 1, got {topk}, "
                         f"{truncate}, {stride}")
    native = _native_loop(xw, loop, "sparse_attentive_sequence")
    if native is None:
        return None
    return _SparseAttentiveSequence.apply(xw, w_hh, wq, bq, wk, v, topk, truncate, stride, native)


__all__ = ["CELLS", "LOOPS", "attentive_sequence", "recurrent_sequence", "sparse_attentive_sequence"]
