"""RSA's eq. 4 on the attention weights: ``(1 - g) A + g P`` before the product with V.

``(1 - g) (A V) + g (P V) = ((1 - g) A + g P) V``: where the baseline attention materialises its weights
A ``[B, H, Tq, Tk]`` anyway (short sequences on a CPU, :mod:`recurbench.forecasters.layers.attention`),
mixing the REMs into A costs one pass over it, and the REM term rides along in the product with V that
the attention computes in any case. The output mix (:mod:`.lanes`) instead multiplies V by P a second
time and moves V through a head-major buffer, forward and backward.

P ``[H, Tq, Tk]`` (positions shared by the batch) is shared by the whole batch; its gradient is the
batch sum of the weights' gradient. The backward pass is written out: one pass for dA, one reduction
over the batch for dP and one dot product for the gate (autograd's ``lerp`` backward materialises a
broadcast P and two more full-size products). Given raw scores instead (``softmax_scale``), the op takes
the softmax too, so that its backward folds the gate and the scale into the softmax's own pass. Tested
against the output mix with the reference REMs (values and gradients) and ``gradcheck`` in fp64.
"""

from __future__ import annotations

import torch


def _lerp(attn: torch.Tensor, rem: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``(1 - gate) attn + gate rem`` in ``attn``'s dtype (rem broadcast over the leading dimensions)."""
    return torch.lerp(attn, rem.to(attn.dtype), gate.to(attn.dtype))


def _rem_and_gate_grads(grad, attn, rem, gate, need_rem, need_gate):
    """d rem and d gate of ``(1 - gate) attn + gate rem`` (rem broadcast over the leading dimensions)."""
    if not (need_rem or need_gate):
        return None, None
    g = gate.to(grad.dtype)
    lead = grad.dim() - rem.dim()
    summed = grad.sum(dim=tuple(range(lead))) if lead else grad  # the batch sum, rem's shape
    d_rem = (summed * g).to(rem.dtype) if need_rem else None
    d_gate = None
    if need_gate:  # <grad, rem - attn>
        dot = torch.dot(summed.reshape(-1), rem.to(grad.dtype).reshape(-1))
        d_gate = (dot - torch.dot(grad.reshape(-1), attn.reshape(-1))).reshape(gate.shape).to(gate.dtype)
    return d_rem, d_gate


class _WeightMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, attn, rem, gate):  # type: ignore[override]
        ctx.save_for_backward(attn, rem, gate)
        return _lerp(attn, rem, gate)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        attn, rem, gate = ctx.saved_tensors
        need_attn, need_rem, need_gate = ctx.needs_input_grad
        d_attn = grad * (1 - gate.to(grad.dtype)) if need_attn else None
        return (d_attn, *_rem_and_gate_grads(grad, attn, rem, gate, need_rem, need_gate))


class _SoftmaxMix(torch.autograd.Function):
    """``(1 - g) softmax(c S) + g P``: the softmax's backward takes the gate and the scale c in its one
    pass over the scores, as the baseline's ``softmax(S * c)`` takes c."""

    @staticmethod
    def forward(ctx, scores, scale, rem, gate):  # type: ignore[override]
        attn = torch.softmax(scores * scale, dim=-1)
        ctx.scale = scale
        ctx.save_for_backward(attn, rem, gate)
        return _lerp(attn, rem, gate)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        attn, rem, gate = ctx.saved_tensors
        need_scores, _, need_rem, need_gate = ctx.needs_input_grad
        d_scores = None
        if need_scores:
            d_scores = torch._softmax_backward_data(grad, attn, -1, attn.dtype)
            d_scores.mul_(ctx.scale * (1 - gate.to(grad.dtype)))
        return (d_scores, None, *_rem_and_gate_grads(grad, attn, rem, gate, need_rem, need_gate))


def rem_weight_mix(
    attn: torch.Tensor, rem: torch.Tensor, gate: torch.Tensor, *, softmax_scale: float | None = None
) -> torch.Tensor:
    """``(1 - gate) * attn + gate * rem``: ``attn`` ``[B, H, Tq, Tk]`` (attention weights), ``rem``
    ``[H, Tq, Tk]`` (broadcast over the batch) or ``[B, H, Tq, Tk]``, ``gate`` a 0-dim tensor. With
    ``softmax_scale`` c, ``attn`` holds raw scores S and the weights are ``softmax(c S)`` (last axis).
    Under ``torch.compile`` it is the plain ``lerp`` (same values; the compiler fuses it)."""
    if torch.compiler.is_compiling():
        if softmax_scale is not None:
            attn = torch.softmax(attn * softmax_scale, dim=-1)
        return _lerp(attn, rem, gate)
    if softmax_scale is not None:
        return _SoftmaxMix.apply(attn.contiguous(), float(softmax_scale), rem, gate)
    return _WeightMix.apply(attn.contiguous(), rem, gate)
