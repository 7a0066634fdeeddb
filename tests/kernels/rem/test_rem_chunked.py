"""The O(T) chunked path against the dense reference: outputs and gradients, all REM types."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rem_cases import ALL_DILATIONS, ALL_KINDS, make_params, sequential_rem

from recurbench.kernels.rem import rem_apply

TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=2e-4, atol=2e-4)}


def _both(v, pos=None, truncate=None, masked=True, chunk=8, kinds=ALL_KINDS, dils=ALL_DILATIONS, seed=0):
    """(naive, chunked) outputs and gradients wrt v, eta, nu, theta for one random cotangent."""
    eta, nu, theta = make_params(v.shape[2], v.dtype, seed)
    v = v.detach().requires_grad_()
    results = []
    for impl in ("naive", "chunked"):
        y = rem_apply(v, kind=kinds, eta=eta, nu=nu, theta=theta, dilation=dils, masked=masked,
                      query_positions=pos, truncate=truncate, impl=impl, chunk_size=chunk)
        cot = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(1))
        grads = torch.autograd.grad(y, [v, eta, nu, theta], cot, allow_unused=True)
        results.append((y, *(torch.zeros_like(p) if g is None else g for p, g in zip([v, eta, nu, theta], grads, strict=True))))
    return results


def _assert_same(results, dtype, scale=1.0):
    tol = {k: v * scale for k, v in TOL[dtype].items()}
    for name, a, b in zip(["y", "dv", "deta", "dnu", "dtheta"], *results, strict=True):
        torch.testing.assert_close(b, a, **tol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("truncate", [None, 0, 5, 40])
@pytest.mark.parametrize("chunk", [4, 7, 32])
def test_chunked_matches_dense_square(dtype, masked, truncate, chunk):
    """All six types, dilations {1, 2, 3, 24}, T = 53 (not a multiple of any chunk)."""
    v = torch.randn(2, 53, 6, 3, dtype=dtype)
    _assert_same(_both(v, truncate=truncate, masked=masked, chunk=chunk), dtype)


@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("truncate", [None, 6])
@pytest.mark.parametrize(
    "pos",
    [
        torch.arange(10, 25),  # Transformer-XL: memory of 10, segment of 15
        torch.arange(12, 40),  # cross-attention: decoder steps beyond the encoder's last key
        torch.arange(-5, 8),  # queries before the first key
        torch.tensor([[3, 0, 24], [7, 7, 1]]),  # [B, Tq]
    ],
    ids=["xl", "cross", "before", "batch_rows"],
)
def test_chunked_matches_dense_non_square(pos, masked, truncate):
    v = torch.randn(2, 25, 6, 2, dtype=torch.float64)
    _assert_same(_both(v, pos=pos, truncate=truncate, masked=masked, chunk=4), torch.float64)


def test_probsparse_rows_per_batch_and_head():
    """Informer's top-u rows gathered per (batch, head), not the first u rows."""
    g = torch.Generator().manual_seed(3)
    v = torch.randn(3, 30, 6, 2, dtype=torch.float64)
    pos = torch.stack([torch.randperm(30, generator=g)[:7] for _ in range(3 * 6)]).view(3, 6, 7).transpose(1, 2)
    _assert_same(_both(v, pos=pos, masked=False, chunk=8), torch.float64)


@pytest.mark.parametrize(
    "eta, nu",
    [(-30.0, 1.0), (0.0, 1.0), (30.0, 40.0), (-0.3, -40.0), (9.5, 9.5)],
    ids=["lambda=-1", "lambda=0", "lambda=gamma=1", "gamma=0", "near_one"],
)
def test_extreme_parameters_long_sequence_are_finite_and_exact(eta, nu):
    """|lambda|, gamma at or near 1 and 0 over T = 8192: no NaN/inf, and equal to the step-by-step RNN."""
    H, T = 6, 8192
    v = torch.randn(1, T, H, 2, dtype=torch.float64)
    e, n, th = torch.full((H,), eta, dtype=torch.float64), torch.full((H,), nu, dtype=torch.float64), torch.full((H,), 0.7)
    th = th.double()
    for masked in (True, False):
        e.requires_grad_(), n.requires_grad_(), th.requires_grad_()
        y = rem_apply(v, kind=ALL_KINDS, eta=e, nu=n, theta=th, dilation=ALL_DILATIONS, masked=masked, impl="chunked")
        grads = torch.autograd.grad(y.square().mean(), [e, n, th])
        assert torch.isfinite(y).all() and all(torch.isfinite(g).all() for g in grads)
        want = sequential_rem(v, ALL_KINDS, e.detach(), n.detach(), th.detach(), ALL_DILATIONS, masked)
        scale = want.abs().max().item() + 1
        torch.testing.assert_close(y, want, rtol=1e-9, atol=1e-9 * scale)


def test_float32_long_sequence_finite_with_unit_modulus():
    v = torch.randn(1, 8192, 6, 4)
    eta, nu, theta = torch.full((6,), 20.0), torch.full((6,), 30.0), torch.full((6,), 0.7)
    for masked in (True, False):
        y = rem_apply(v, kind=ALL_KINDS, eta=eta, nu=nu, theta=theta, dilation=ALL_DILATIONS, masked=masked)
        assert torch.isfinite(y).all()


def test_negative_lambda_keeps_parity():
    v = torch.zeros(1, 6, 1, 1, dtype=torch.float64)
    v[0, 0] = 1.0
    y = rem_apply(v, kind="regular", eta=torch.tensor([-0.5], dtype=torch.float64), dilation=1, masked=True, chunk_size=2)
    lam = torch.tanh(torch.tensor(-0.5, dtype=torch.float64))
    torch.testing.assert_close(y[0, :, 0, 0], torch.stack([lam * 0] + [lam**k for k in range(1, 6)]))


def test_default_impl_on_cpu_is_chunked_and_half_precision_is_accepted():
    v = torch.randn(1, 40, 2, 3)
    kw = dict(kind=["regular", "cos"], eta=torch.ones(2), nu=torch.ones(2), theta=torch.ones(2), dilation=[1, 3], masked=True)
    torch.testing.assert_close(rem_apply(v, **kw), rem_apply(v, impl="chunked", **kw))
    y16 = rem_apply(v.bfloat16(), **kw)
    assert y16.dtype == torch.bfloat16
    torch.testing.assert_close(y16.float(), rem_apply(v, **kw), rtol=0.05, atol=0.05)


@settings(max_examples=12, deadline=None)
@given(
    B=st.integers(1, 2), T=st.integers(1, 40), D=st.integers(1, 3),
    heads=st.lists(st.tuples(st.sampled_from(["regular", "cos", "sin"]), st.integers(1, 7)), min_size=1, max_size=3),
    masked=st.booleans(), truncate=st.one_of(st.none(), st.integers(0, 20)), chunk=st.integers(1, 16),
    offset=st.integers(-6, 6), n_queries=st.integers(0, 12), seed=st.integers(0, 2**16),
)
def test_property_chunked_equals_dense(B, T, D, heads, masked, truncate, chunk, offset, n_queries, seed):
    """Random shapes, kinds, dilations, truncations, chunk sizes and query windows."""
    kinds, dils = [h[0] for h in heads], [h[1] for h in heads]
    v = torch.randn(B, T, len(heads), D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    pos = None if n_queries == 0 else torch.arange(offset, offset + n_queries)
    _assert_same(_both(v, pos=pos, truncate=truncate, masked=masked, chunk=chunk, kinds=kinds, dils=dils, seed=seed),
                 torch.float64)


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_static_range_positions_equal_tensor_positions(impl):
    """A Python range (static span, no host read-back) gives exactly what the same tensor gives."""
    v = torch.randn(2, 25, 6, 2, dtype=torch.float64)
    eta, nu, theta = make_params(6, requires_grad=False)
    kw = dict(kind=ALL_KINDS, eta=eta, nu=nu, theta=theta, dilation=ALL_DILATIONS, masked=False, impl=impl)
    for r in (range(10, 40), range(-5, 8), range(3, 3)):
        torch.testing.assert_close(rem_apply(v, query_positions=r, **kw),
                                   rem_apply(v, query_positions=torch.arange(r.start, r.stop), **kw))
