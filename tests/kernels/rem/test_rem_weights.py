"""RSA eq. 4 on attention weights (``rem_mix_weights``): ``((1 - g) A + g P) V`` against the output
mix ``lerp(A V, P V, g)`` with the reference P V, and the hand-written backward against autograd's."""

from __future__ import annotations

import pytest
import torch
from rem_cases import ALL_DILATIONS, ALL_KINDS, make_params

from recurbench.kernels.rem import rem_apply, rem_mix_weights
from recurbench.kernels.rem.weights import _SoftmaxMix, _WeightMix, rem_weight_mix

TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=2e-4, atol=2e-4)}


def _both_paths(dtype, masked, truncate, n_queries, positions, seed=0):
    """Outputs and gradients (A, V, mu, eta, nu, theta) of the weight mix and of the output mix."""
    H, Tk, B, D = len(ALL_KINDS), 53, 2, 3
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, H, n_queries, Tk, dtype=dtype, generator=g)
    weights = torch.softmax(scores, dim=-1)
    v = torch.randn(B, Tk, H, D, dtype=dtype, generator=g)
    mu = torch.tensor(0.3, dtype=dtype)
    eta, nu, theta = make_params(H, dtype, seed)
    leaves = [weights.requires_grad_(), v.requires_grad_(), mu.requires_grad_(), eta, nu, theta]
    cot = torch.randn(B, n_queries, H, D, dtype=dtype, generator=g)
    results = []
    for via_weights in (True, False):
        a, x, m, e, n, t = leaves
        kw = dict(kind=ALL_KINDS, eta=e, nu=n, theta=t, dilation=ALL_DILATIONS, masked=masked,
                  query_positions=positions, truncate=truncate)
        if via_weights:
            y = (rem_mix_weights(a, torch.sigmoid(m), **kw) @ x.transpose(1, 2)).transpose(1, 2)
        else:
            y = torch.lerp((a @ x.transpose(1, 2)).transpose(1, 2), rem_apply(x, impl="naive", **kw), torch.sigmoid(m))
        grads = torch.autograd.grad(y, leaves, cot, allow_unused=True)
        results.append((y, *(torch.zeros_like(p) if gr is None else gr for p, gr in zip(leaves, grads, strict=True))))
    return results


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("truncate", [None, 3])
@pytest.mark.parametrize(
    "n_queries, positions",
    [(53, None), (20, range(40, 60)), (5, torch.tensor([52, 0, 17, 3, 60]))],
    ids=["square", "cross-range", "tensor-rows"],
)
def test_weight_mix_equals_output_mix_with_reference_rem(dtype, masked, truncate, n_queries, positions):
    """All six types, dilations {1, 2, 3, 24}, T = 53; square, queries beyond the keys (Informer's
    cross-attention, XL's memory frame) and unordered rows shared by the batch."""
    weight_path, output_path = _both_paths(dtype, masked, truncate, n_queries, positions)
    for name, a, b in zip(["y", "dA", "dV", "dmu", "deta", "dnu", "dtheta"], weight_path, output_path, strict=True):
        torch.testing.assert_close(a, b, **TOL[dtype], msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("batched_rem", [False, True])
def test_weight_mix_gradcheck(batched_rem):
    """The hand-written backward against finite differences (fp64), REM shared by the batch or not."""
    g = torch.Generator().manual_seed(0)
    attn = torch.rand(2, 3, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    rem = torch.randn(*((2,) if batched_rem else ()), 3, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    gate = torch.tensor(0.35, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_WeightMix.apply, (attn, rem, gate))


@pytest.mark.parametrize("batched_rem", [False, True])
def test_softmax_mix_gradcheck_and_values(batched_rem):
    """Softmax and mixing in one op: the scale and gate folded into the softmax's backward pass."""
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(2, 3, 4, 5, dtype=torch.float64, generator=g)
    scores[0, 0, 1, 3] = float("-inf")  # a masked key
    scores.requires_grad_()
    rem = torch.randn(*((2,) if batched_rem else ()), 3, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    gate = torch.tensor(0.6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s, r, gt: _SoftmaxMix.apply(s, 0.37, r, gt), (scores, rem, gate))
    torch.testing.assert_close(
        rem_weight_mix(scores, rem, gate, softmax_scale=0.37), torch.lerp(torch.softmax(scores * 0.37, -1), rem, gate)
    )


def test_weight_mix_gate_limits_are_exact():
    attn, rem = torch.rand(2, 3, 4, 4), torch.randn(3, 4, 4)
    assert torch.equal(rem_weight_mix(attn, rem, torch.tensor(0.0)), attn)
    assert torch.equal(rem_weight_mix(attn, rem, torch.tensor(1.0)), rem.expand(2, 3, 4, 4))


def test_weight_mix_errors_name_the_problem():
    kw = dict(kind="regular", eta=torch.ones(2), masked=False)
    weights, gate = torch.rand(1, 2, 3, 5), torch.tensor(0.5)
    with pytest.raises(ValueError, match=r"query_positions is required when Tq \(3\) != Tk \(5\)"):
        rem_mix_weights(weights, gate, **kw)
    with pytest.raises(ValueError, match=r"shared by the batch, as \[Tq=3\], got \(1, 3\).*use rem_mix"):
        rem_mix_weights(weights, gate, query_positions=torch.tensor([[0, 1, 2]]), **kw)
    with pytest.raises(ValueError, match=r"weights must be \[B, H, Tq, Tk\], got shape \(2, 3, 5\)"):
        rem_mix_weights(weights[0], gate, **kw)
