"""RSA eq. 4 as one op (``rem_mix``): the fused lanes path against lerp(A, naive P V), and the
table-built REM matrices against App. D.1's construction."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rem_cases import ALL_DILATIONS, ALL_KINDS, make_params

from recurbench.kernels.rem import LANES_MAX_STEPS, rem_apply, rem_matrices, rem_mix
from recurbench.kernels.rem.lanes import _LaneMix, head_groups

TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=2e-4, atol=2e-4)}


def _mix_and_reference(attn, v, mu, kinds, dils, masked, truncate, seed=0):
    """Outputs and gradients (attn, v, mu, eta, nu, theta) of the default rem_mix and of the
    reference lerp(attn, naive P V, sigmoid(mu))."""
    eta, nu, theta = make_params(v.shape[2], v.dtype, seed)
    leaves = [attn.detach().requires_grad_(), v.detach().requires_grad_(), mu.detach().requires_grad_(), eta, nu, theta]
    out = []
    for impl in (None, "naive"):
        a, x, m, e, n, t = leaves
        kw = dict(kind=kinds, eta=e, nu=n, theta=t, dilation=dils, masked=masked, truncate=truncate)
        if impl is None:
            y = rem_mix(a, x, torch.sigmoid(m), **kw)
        else:
            y = torch.lerp(a, rem_apply(x, impl="naive", **kw), torch.sigmoid(m))
        cot = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(1))
        grads = torch.autograd.grad(y, leaves, cot, allow_unused=True)
        out.append((y, *(torch.zeros_like(p) if gr is None else gr for p, gr in zip(leaves, grads, strict=True))))
    return out


def _assert_same(results, dtype):
    for name, a, b in zip(["y", "dattn", "dv", "dmu", "deta", "dnu", "dtheta"], *results, strict=True):
        torch.testing.assert_close(a, b, **TOL[dtype], msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("truncate", [None, 0, 3, 40])
def test_fused_mix_equals_lerp_of_dense_rem(dtype, masked, truncate):
    """All six types, dilations {1, 2, 3, 24}, T = 53 (a multiple of none of them but 1)."""
    attn = torch.randn(2, 53, 6, 3, dtype=dtype).transpose(1, 2).contiguous().transpose(1, 2)  # SDPA's layout
    v = torch.randn(2, 53, 6, 3, dtype=dtype)
    mu = torch.tensor(0.4, dtype=dtype)
    _assert_same(_mix_and_reference(attn, v, mu, ALL_KINDS, ALL_DILATIONS, masked, truncate), dtype)


def test_fused_mix_with_table5_layout_and_interleaved_dilations():
    """Heads grouped into runs of one dilation: (0,1,1,2,2,2) with [48,24,48,96,48,96], T = 96."""
    kinds = ["cos", "sin", "regular", "regular", "cos", "cos", "sin", "sin"]
    dils = [1, 1, 48, 24, 48, 96, 48, 96]
    assert head_groups(dils) == ((0, 2, 1), (2, 3, 48), (3, 4, 24), (4, 5, 48), (5, 6, 96), (6, 7, 48), (7, 8, 96))
    attn, v = torch.randn(3, 96, 8, 4, dtype=torch.float64), torch.randn(3, 96, 8, 4, dtype=torch.float64)
    for masked in (True, False):
        _assert_same(_mix_and_reference(attn, v, torch.tensor(-1.2, dtype=torch.float64), kinds, dils, masked, None),
                     torch.float64)


def test_lane_mix_gradcheck():
    """The hand-written backward of the fused op, against finite differences (fp64)."""
    g = torch.Generator().manual_seed(0)
    attn = torch.randn(2, 7, 3, 2, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, 7, 3, 2, dtype=torch.float64, generator=g, requires_grad=True)
    scale = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    groups = ((0, 2, 1), (2, 3, 3))
    mats = [torch.randn(2, 7, 7, dtype=torch.float64, generator=g, requires_grad=True),
            torch.randn(1, 3, 3, dtype=torch.float64, generator=g, requires_grad=True)]
    assert torch.autograd.gradcheck(lambda a, x, s, p, q: _LaneMix.apply(a, x, s, groups, p, q),
                                    (attn, v, scale, *mats))


def test_paths_are_chosen_as_documented():
    """Fused only for square self-attention on a CPU within LANES_MAX_STEPS; the rest is rem_apply."""
    kw = dict(kind="regular", eta=torch.ones(2), dilation=1, masked=True)
    gate = torch.tensor(0.5)
    long_t = LANES_MAX_STEPS + 1
    for T, pos in ((20, None), (long_t, None), (20, torch.arange(5, 25))):
        v = torch.randn(1, T, 2, 2)
        attn = torch.randn(1, T if pos is None else len(pos), 2, 2)
        want = torch.lerp(attn, rem_apply(v, impl="naive", query_positions=pos, **kw), gate)
        torch.testing.assert_close(rem_mix(attn, v, gate, query_positions=pos, **kw), want, rtol=1e-4, atol=1e-4)


@settings(max_examples=15, deadline=None)
@given(
    B=st.integers(1, 2), T=st.integers(1, 40), D=st.integers(1, 3),
    heads=st.lists(st.tuples(st.sampled_from(["regular", "cos", "sin"]), st.integers(1, 7)), min_size=1, max_size=4),
    masked=st.booleans(), truncate=st.one_of(st.none(), st.integers(0, 20)), mu=st.floats(-3, 3),
    seed=st.integers(0, 2**16),
)
def test_property_fused_mix_equals_reference(B, T, D, heads, masked, truncate, mu, seed):
    kinds, dils = [h[0] for h in heads], [h[1] for h in heads]
    g = torch.Generator().manual_seed(seed)
    attn = torch.randn(B, T, len(heads), D, dtype=torch.float64, generator=g)
    v = torch.randn(B, T, len(heads), D, dtype=torch.float64, generator=g)
    _assert_same(_mix_and_reference(attn, v, torch.tensor(mu, dtype=torch.float64), kinds, dils, masked, truncate, seed),
                 torch.float64)


@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("truncate", [None, 2])
@pytest.mark.parametrize(
    "pos", [None, torch.arange(4, 30), torch.arange(-3, 9), torch.tensor([[3, 0, 24], [7, 7, 1]])],
    ids=["square", "cross", "before", "batch_rows"],
)
def test_table_matrices_equal_appendix_d1_construction(masked, truncate, pos):
    eta, nu, theta = make_params(6)
    kw = dict(kind=ALL_KINDS, eta=eta, nu=nu, theta=theta, dilation=ALL_DILATIONS, masked=masked,
              query_positions=pos, truncate=truncate, dtype=torch.float64)
    table, naive = rem_matrices(25, **kw), rem_matrices(25, impl="naive", **kw)
    torch.testing.assert_close(table, naive, rtol=1e-12, atol=1e-12)
    (gt,) = torch.autograd.grad(table.sum(), [theta])
    (gn,) = torch.autograd.grad(naive.sum(), [theta])
    torch.testing.assert_close(gt, gn)


def test_rem_matrices_errors_name_the_problem():
    with pytest.raises(ValueError, match="n_heads is required"):
        rem_matrices(4, kind="regular", eta=1.0, masked=True)
    with pytest.raises(ValueError, match="unknown impl 'fast'"):
        rem_matrices(4, kind=["regular"], eta=1.0, masked=True, impl="fast")


def test_non_square_mix_needs_query_positions():
    with pytest.raises(ValueError, match=r"query_positions is required when Tq \(5\) != Tk \(7\)"):
        rem_mix(torch.randn(1, 5, 2, 2), torch.randn(1, 7, 2, 2), torch.tensor(0.5), kind="regular", eta=1.0, masked=False)
