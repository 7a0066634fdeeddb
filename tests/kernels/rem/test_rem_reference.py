"""The dense reference (App. D.1/D.2) against the definitions, and its gradients (gradcheck)."""

from __future__ import annotations

import math

import pytest
import torch
from rem_cases import ALL_DILATIONS, ALL_KINDS, make_params, sequential_rem

from recurbench.kernels.rem import rem_apply
from recurbench.kernels.rem.heads import head_params, make_layout
from recurbench.kernels.rem.naive import rem_dense_matrices


@pytest.mark.parametrize("masked", [True, False])
def test_naive_equals_the_recurrence_it_encodes(masked):
    """P V is the linear RNN of eq. 2 (all six types, dilated = d interleaved RNNs)."""
    v = torch.randn(2, 30, 6, 3, dtype=torch.float64)
    eta, nu, theta = make_params(6)
    got = rem_apply(v, kind=ALL_KINDS, eta=eta, nu=nu, theta=theta, dilation=ALL_DILATIONS, masked=masked, impl="naive")
    want = sequential_rem(v, ALL_KINDS, eta, nu, theta, ALL_DILATIONS, masked)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_regular_masked_matrix_is_eq3():
    lam = 0.5
    layout = make_layout("regular", 1, 1)
    base, angle = head_params(layout, torch.tensor([math.atanh(lam)]), None, None, torch.float64, torch.device("cpu"))
    P = rem_dense_matrices(layout, base, angle, n_keys=4, masked=True)[0]
    want = torch.tensor([[0, 0, 0, 0], [lam, 0, 0, 0], [lam**2, lam, 0, 0], [lam**3, lam**2, lam, 0]], dtype=torch.float64)
    torch.testing.assert_close(P, want)


def test_sin_rem_has_zero_diagonal_and_dilation_zeros_off_grid():
    """Corrections to App. D.1's literal D - I: no -1 on the sin diagonal, no 1 where d does not divide."""
    layout = make_layout(["sin", "regular"], [1, 3], 2)
    base, angle = head_params(layout, torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0]), torch.tensor([0.7, 0.0]),
                              torch.float64, torch.device("cpu"))
    P = rem_dense_matrices(layout, base, angle, n_keys=7, masked=False)
    assert torch.all(P[0].diagonal() == 0)
    lag = (torch.arange(7)[:, None] - torch.arange(7)[None, :]).abs()
    assert torch.all(P[1][lag % 3 != 0] == 0)
    torch.testing.assert_close(P[1][lag == 6], torch.tanh(torch.tensor(1.0, dtype=torch.float64)).pow(2).expand(2))


def test_non_square_matches_appendix_d2():
    """Queries at T-K..T+L against keys 1..T: entry f(|p - s|), zero where p = s (App. D.2)."""
    T, K, L = 6, 2, 3
    layout = make_layout("cos", 1, 1)
    base, angle = head_params(layout, None, torch.tensor([0.3], dtype=torch.float64), torch.tensor([0.9], dtype=torch.float64), torch.float64, torch.device("cpu"))
    pos = torch.arange(T - K - 1, T + L)  # 0-based positions of rows T-K .. T+L
    P = rem_dense_matrices(layout, base, angle, n_keys=T, masked=False, query_positions=pos)[0]
    gamma, theta = torch.sigmoid(torch.tensor(0.3, dtype=torch.float64)), 0.9
    for i, p in enumerate(pos.tolist()):
        for s in range(T):
            k = abs(p - s)
            want = 0.0 if k == 0 else (gamma**k * math.cos(k * theta)).item()
            assert P[i, s].item() == pytest.approx(want, abs=1e-14)


def test_truncation_drops_exponents_above_k():
    layout = make_layout(["regular", "regular"], [1, 2], 2)
    base, angle = head_params(layout, torch.tensor([0.5, 0.5]), None, None, torch.float64, torch.device("cpu"))
    P = rem_dense_matrices(layout, base, angle, n_keys=12, masked=True, truncate=3)
    lag = torch.arange(12)[:, None] - torch.arange(12)[None, :]
    assert torch.all(P[0][lag > 3] == 0) and torch.all(P[0][(lag >= 1) & (lag <= 3)] != 0)
    # dilated: the exponent is lag / d, so lags up to 6 survive
    assert torch.all(P[1][lag > 6] == 0) and torch.all(P[1][(lag == 6)] != 0)


@pytest.mark.parametrize("masked", [True, False])
def test_gradcheck_naive(masked):
    v = torch.randn(1, 7, 6, 2, dtype=torch.float64, requires_grad=True)
    eta, nu, theta = make_params(6)
    pos = torch.tensor([0, 3, 6, 8])

    def fn(v, eta, nu, theta):
        return rem_apply(v, kind=ALL_KINDS, eta=eta, nu=nu, theta=theta, dilation=[1, 1, 1, 2, 3, 2],
                         masked=masked, impl="naive", query_positions=pos)

    assert torch.autograd.gradcheck(fn, (v, eta, nu, theta))


def test_lambda_zero_gradient_is_lag_one_correlation():
    """At lambda = 0 only f(1) = lambda depends on eta to first order: d/d lambda = <dY_t, v_{t-1}>."""
    v = torch.randn(1, 9, 1, 2, dtype=torch.float64)
    eta = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    for impl in ("naive", "chunked"):
        y = rem_apply(v, kind="regular", eta=eta, dilation=1, masked=True, impl=impl, chunk_size=4)
        (g,) = torch.autograd.grad(y.sum(), eta)
        assert g.item() == pytest.approx(v[0, :-1].sum().item(), abs=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kind="bogus"), "unknown REM kind"),
        (dict(kind=["regular"] * 2), "kind has 2 entries"),
        (dict(dilation=0), "dilation must be an integer"),
        (dict(truncate=-1), "truncate must be None"),
        (dict(impl="cuda-magic"), "unknown impl"),
        (dict(kind="cos"), "nu is required"),
        (dict(query_positions=torch.tensor([0.5])), "integer tensor"),
        (dict(eta=torch.zeros(2)), r"shape \[3\]"),
    ],
)
def test_bad_arguments_name_the_culprit(kwargs, match):
    v = torch.randn(1, 5, 3, 2)
    args = dict(kind="regular", eta=torch.zeros(3), dilation=1, masked=True)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        rem_apply(v, **args)
