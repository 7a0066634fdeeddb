"""O(T) REM operator in plain PyTorch: dense C x C blocks within chunks plus a carried state.

P_h V_h is a linear recurrence (RSA paper, eq. 2): for a masked REM,

    y_t = sum_{s < t} Re(c z**(t - s)) v_s,      z = lambda (regular) or gamma e^{i theta} (cyclical).

Split time into chunks of C steps (Mamba-2 SSD / chunked linear attention style). For t = cC + i:

* lags inside the chunk use the dense Toeplitz block F[i, j] = f(i - j) (one batched matmul);
* everything before the chunk enters through the complex state S_c = sum_{s < cC} z**(cC - s) v_s,
  contributing Re(c z**i S_c). The states obey S_{c+1} = z**C S_c + sum_j z**(C - j) v_{cC + j}; we
  evaluate that chunk-level recurrence as one small matrix product with A[c, c'] = (z**C)**(c - 1 - c').

Every power has a non-negative integer exponent, so there is no lambda**(-k) and nothing can overflow.
The state is complex (a rotation for cyclical heads, a real number for regular ones), so a cos and a
sin head are the same code with c = 1 or c = -i. Unmasked REMs add the mirror image (an anti-causal
state running backwards, block F').

* Dilation d: the REM only links positions in the same residue class mod d, with exponent lag/d, so a
  dilated head is d interleaved ordinary recurrences: view time as [T/d, d] and fold d into the batch.
* Truncation at K (exponent > K dropped): no carried state; each chunk instead sees its own block and
  the ceil(K / C) previous chunks through blocks F_m[i, j] = f(mC + i - j). Cost O(T (K + C) D), exact.

Cost: O(T C D) for the blocks, O(T D) for the states, plus the chunk-level product O((T / C)**2 D),
which is under 2% of the block work up to T = 16k with C = 64. Everything is differentiable by autograd
(gradients for V and for eta/nu/theta through the power tables).

Internal layout: ``[H, C, N, n, D]`` (head, step in chunk, batch x lane, chunk, feature), so that every
block product is one ``bmm`` over heads; the input is copied into it once and the output once back.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from recurbench.kernels.rem.heads import HeadLayout, kernel_values, powers

DEFAULT_CHUNK = 32


def rem_chunked_square(
    v: torch.Tensor,
    layout: HeadLayout,
    base: torch.Tensor,
    angle: torch.Tensor,
    *,
    masked: bool,
    truncate: int | None = None,
    chunk_size: int = DEFAULT_CHUNK,
) -> torch.Tensor:
    """P_h V_h for the square case (queries at key positions 0..T-1). ``v``: ``[B, T, H, D]``.

    Returns a ``[B, T, H, D]`` view of a head-major buffer (not necessarily contiguous)."""
    B, T, H, D = v.shape
    coef = layout.coef(base.dtype, v.device)
    # Heads sorted by dilation, so that each group is a slice: one gather in, one scatter out.
    order = sorted(range(H), key=lambda h: layout.dilations[h])
    xh = v.permute(2, 0, 1, 3)  # [H, B, T, D], a view
    perm = None if order == list(range(H)) else torch.tensor(order, device=v.device)
    if perm is not None:
        xh, base, angle, coef = xh.index_select(0, perm), base[perm], angle[perm], coef[perm]
    outs, start = [], 0
    for d in sorted(set(layout.dilations)):
        stop = start + layout.dilations.count(d)
        sl = slice(start, stop)
        outs.append(_lanes(xh[sl], d, base[sl], angle[sl], coef[sl], masked, truncate, chunk_size))
        start = stop
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)
    if perm is not None:
        out = out.index_select(0, torch.argsort(perm))
    return out.permute(1, 2, 0, 3)


def _lanes(xh, d, base, angle, coef, masked, truncate, chunk_size):
    """Heads sharing dilation d, ``xh`` ``[Hg, B, T, D]``. Position t = (c C + i) d + r is step i of
    chunk c of lane r: the d residue classes are d independent recurrences folded into the batch."""
    Hg, B, T, D = xh.shape
    steps = -(-T // d)
    C = max(1, min(chunk_size, steps))
    n = -(-steps // C)
    Tp = n * C * d
    if Tp != T:
        xh = F.pad(xh, (0, 0, 0, Tp - T))
    X = xh.reshape(Hg, B, n, C, d, D).permute(0, 3, 1, 4, 2, 5).reshape(Hg, C, B * d, n, D).contiguous()
    if truncate is not None and truncate >= steps - 1:
        truncate = None  # no exponent reaches K: the truncation is a no-op
    y = _scan(X, base, angle, coef, masked, truncate)
    y = y.view(Hg, C, B, d, n, D).permute(0, 2, 4, 1, 3, 5).reshape(Hg, B, Tp, D)
    return y[:, :, :T]


def _scan(X, base, angle, coef, masked, truncate):
    """Undilated REM along the (chunk, step) axes of ``X`` ``[H, C, N, n, D]``; same layout out."""
    H, C, N, n, D = X.shape
    flat = X.view(H, C, N * n * D)
    idx = torch.arange(C, device=X.device)
    lag = idx[:, None] - idx[None, :]  # i - j
    n_lookback = 0 if truncate is None else min(n - 1, (truncate - 1) // C + 1 if truncate > 0 else 0)
    f = kernel_values(base, angle, coef, (n_lookback + 1) * C + 1, truncate)  # [H, (L + 1) C + 1]
    Fin = f[:, lag.clamp(min=0)] * (lag > 0).to(f.dtype)  # [H, C, C], strictly lower
    if not masked:
        Fin = Fin + Fin.transpose(1, 2)
    y = torch.bmm(Fin, flat)  # intra-chunk, [H, C, N n D]

    if truncate is None and n > 1:
        G, S = _state_term(X, base, angle, coef, masked)
        y.baddbmm_(G, S)  # in place: bmm's backward needs its inputs only
    elif n_lookback > 0:
        y = y.view(H, C, N, n, D)
        for m in range(1, n_lookback + 1):
            Fm = f[:, m * C + lag]  # [H, C, C]: lag m C + i - j between chunk c and chunk c - m
            past = X[:, :, :, : n - m].reshape(H, C, -1)
            y[:, :, :, m:] += torch.bmm(Fm, past).view(H, C, N, n - m, D)
            if not masked:
                future = X[:, :, :, m:].reshape(H, C, -1)
                y[:, :, :, : n - m] += torch.bmm(Fm.transpose(1, 2), future).view(H, C, N, n - m, D)
    return y.view(H, C, N, n, D)


def _state_term(X, base, angle, coef, masked):
    """Contribution of all earlier (and, unmasked, later) chunks through carried complex states,
    as ``(G, S)`` with the output term ``G @ S`` (``[H, C, k] @ [H, k, N n D]``)."""
    H, C, N, n, D = X.shape
    dev = X.device
    zr, zi = powers(base, angle, torch.arange(C + 1, device=dev))  # z**k, k = 0..C
    j = torch.arange(C, device=dev)
    # Chunk summaries: causal  s_c = sum_j z**(C - j) v_j   (state at the next chunk's start),
    #                  anti    r_c = sum_j z**(j + 1) v_j   (state seen from the previous chunk's end).
    w = [zr[:, C - j], zi[:, C - j]]
    if not masked:
        w += [zr[:, j + 1], zi[:, j + 1]]
    W = torch.stack(w, dim=1)  # [H, 2 or 4, C]
    S = torch.bmm(W, X.view(H, C, -1)).view(H, len(w), N, n, D)

    # Chunk level: S_c = sum_{c' < c} (z^C)^(c - 1 - c') s_c' as one complex [n, n] product per head.
    ar, ai = powers(base, angle, torch.arange(n, device=dev) * C)  # (z^C)**m
    cidx = torch.arange(n, device=dev)
    gap = cidx[:, None] - 1 - cidx[None, :]
    valid = (gap >= 0).to(ar.dtype)
    Ar = ar[:, gap.clamp(min=0)] * valid
    Ai = ai[:, gap.clamp(min=0)] * valid
    A = torch.cat([torch.cat([Ar, -Ai], 2), torch.cat([Ai, Ar], 2)], 1)  # [H, 2n, 2n] real form

    def chunk_level(s_re, s_im, transpose):
        """[H, n, N, D] re/im chunk summaries -> [H, 2, N, n, D] carried states."""
        s = torch.cat([s_re, s_im], dim=1).reshape(H, 2 * n, N * D)  # rows: (re | im, chunk)
        # Anti-causal: R_c = sum_{c' > c} (z^C)^(c' - c - 1) r_c', i.e. A^T within each complex block.
        mat = torch.cat([torch.cat([Ar.mT, -Ai.mT], 2), torch.cat([Ai.mT, Ar.mT], 2)], 1) if transpose else A
        return torch.bmm(mat, s).view(H, 2, n, N, D).transpose(2, 3)

    s_perm = S.permute(0, 1, 3, 2, 4)  # [H, k, n, N, D]: chunk index before batch for the products
    states = [chunk_level(s_perm[:, 0], s_perm[:, 1], transpose=False)]
    # Output weights: Re(c z^i S) = g_re S_re - g_im S_im with g = c z^i (causal) or c z^(C-1-i) (anti).
    cr, ci = coef[:, :1], coef[:, 1:]
    g_re = cr * zr[:, :C] - ci * zi[:, :C]
    g_im = cr * zi[:, :C] + ci * zr[:, :C]
    G = [g_re, -g_im]
    if not masked:
        states.append(chunk_level(s_perm[:, 2], s_perm[:, 3], transpose=True))
        G += [g_re.flip(1), -g_im.flip(1)]
    Gm = torch.stack(G, dim=2)  # [H, C, 2 or 4]
    St = torch.cat(states, dim=1).reshape(H, len(G), -1)  # [H, 2 or 4, N n D]
    return Gm, St
