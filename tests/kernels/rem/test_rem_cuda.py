"""The Triton REM kernels on a real GPU (skipped without CUDA and under the interpreter): the same
comparisons as ``test_rem_triton.py``, with CUDA tensors, realistic head sizes and T up to 8192, plus
``torch.compile``. ``.ci/gpu-check`` runs these with the GPU benchmarks when a GPU is at hand."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from rem_cases import TRITON_LAYOUTS, make_params

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"
    or importlib.util.find_spec("triton") is None,
    reason="needs a CUDA GPU and triton, outside the interpreter",
)

from recurbench.kernels.rem import rem_apply  # noqa: E402

CUDA = torch.device("cuda")
LAYOUTS = TRITON_LAYOUTS


def _run(impl, v, kinds, dils, masked, truncate=None, pos=None, params=None):
    eta, nu, theta = (p.detach().to(CUDA).requires_grad_() for p in (params or make_params(v.shape[2], v.dtype, 4)))
    v = v.detach().requires_grad_()
    y = rem_apply(v, kind=kinds, eta=eta, nu=nu, theta=theta, dilation=dils, masked=masked, truncate=truncate,
                  query_positions=pos, impl=impl)
    cot = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(1)).to(CUDA)
    return (y, *torch.autograd.grad(y, [v, eta, nu, theta], cot))


def _assert_close(got, want, rel, name):
    """Max error relative to the largest reference entry: tl.dot multiplies in TF32 (10-bit mantissa)
    on fp32 inputs, and the parameter gradients are sums over every entry of V."""
    scale = want.abs().max().clamp_min(1e-30)
    err = ((got - want).abs().max() / scale).item()
    assert err < rel, f"{name}: max error {err:.2e} of the largest entry (allowed {rel:.0e})"


@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("truncate", [None, 20])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("seq_len", [37, 1000])  # within one chunk's reach, and many chunks with a ragged end
def test_triton_on_the_gpu_matches_the_reference(masked, truncate, layout, seq_len):
    kinds, dils = LAYOUTS[layout]
    v = torch.randn(2, seq_len, 4, 64, generator=torch.Generator().manual_seed(0)).to(CUDA)
    want = _run("naive", v, kinds, dils, masked, truncate)
    got = _run("triton", v, kinds, dils, masked, truncate)
    for name, a, b in zip(["y", "dv", "deta", "dnu", "dtheta"], want, got, strict=True):
        _assert_close(b, a, 5e-3, name)


def test_triton_on_the_gpu_non_square():
    kinds, dils = LAYOUTS["reg1-cos2-sin3-sin24"]
    v = torch.randn(2, 200, 4, 32, generator=torch.Generator().manual_seed(0)).to(CUDA)
    pos = torch.arange(50, 260, device=CUDA)  # beyond the keys on both ends
    for name, a, b in zip(["y", "dv", "deta", "dnu", "dtheta"], _run("naive", v, kinds, dils, True, pos=pos),
                          _run("triton", v, kinds, dils, True, pos=pos), strict=True):
        _assert_close(b, a, 5e-3, name)


def test_long_sequences_near_the_unit_circle_stay_finite_and_agree():
    # lambda = tanh(+-6) ~ +-0.99999 and gamma = sigmoid(9) ~ 0.9999 over T = 8192: the chunked PyTorch path
    # is the reference here (the dense one would need 8192 x 8192 matrices per head).
    kinds, dils = ["regular", "regular", "cos", "sin"], [1, 3, 1, 2]
    params = [torch.tensor(x, dtype=torch.float32) for x in ([6.0, -6.0, 0.0, 0.0], [0.0, 0.0, 9.0, 9.0],
                                                              [0.0, 0.0, 0.3, 0.3])]
    v = torch.randn(1, 8192, 4, 64, generator=torch.Generator().manual_seed(0)).to(CUDA)
    got = _run("triton", v, kinds, dils, False, params=params)
    want = _run("chunked", v, kinds, dils, False, params=params)
    for name, a, b in zip(["y", "dv", "deta", "dnu", "dtheta"], want, got, strict=True):
        assert torch.isfinite(b).all(), f"{name}: not finite"
        _assert_close(b, a, 1e-2, name)


def test_the_op_compiles_in_one_graph():
    kinds, dils = LAYOUTS["cos1-sin1-reg24-cos3"]
    eta, nu, theta = (p.to(CUDA) for p in make_params(4, torch.float32, 4, requires_grad=False))
    v = torch.randn(2, 300, 4, 64, generator=torch.Generator().manual_seed(0)).to(CUDA)

    def f(v):
        return rem_apply(v, kind=kinds, eta=eta, nu=nu, theta=theta, dilation=dils, masked=True, impl="triton")

    torch.testing.assert_close(torch.compile(f, fullgraph=True)(v), f(v))
