"""Triton kernels against the dense reference under the interpreter (run in their own process):

    TRITON_INTERPRET=1 pytest tests/kernels -m triton_interpret
"""

from __future__ import annotations

import os

import pytest
import torch
from rem_cases import TRITON_LAYOUTS, make_params

pytestmark = [
    pytest.mark.triton_interpret,
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 before triton import"),
]

from recurbench.kernels.rem import rem_apply  # noqa: E402

TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-4, atol=1e-4)}
LAYOUTS = TRITON_LAYOUTS
KINDS = LAYOUTS["reg1-cos2-sin3-sin24"][0]


def _run(impl, v, dils, masked, truncate, pos=None, kinds=KINDS):
    eta, nu, theta = make_params(v.shape[2], v.dtype, seed=4)
    v = v.detach().requires_grad_()
    y = rem_apply(v, kind=kinds, eta=eta, nu=nu, theta=theta, dilation=dils, masked=masked,
                  truncate=truncate, query_positions=pos, impl=impl, chunk_size=16)
    cot = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(1))
    return (y, *torch.autograd.grad(y, [v, eta, nu, theta], cot))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("truncate", [None, 20])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_triton_matches_dense(dtype, masked, truncate, layout):
    """T = 37 spans 3 chunks of 16 (state and look-back paths)."""
    kinds, dils = LAYOUTS[layout]
    v = torch.randn(1, 37, 4, 3, dtype=dtype)
    want = _run("naive", v, dils, masked, truncate, kinds=kinds)
    got = _run("triton", v, dils, masked, truncate, kinds=kinds)
    for name, a, b in zip(["y", "dv", "deta", "dnu", "dtheta"], want, got, strict=True):
        torch.testing.assert_close(b, a, **TOL[dtype], msg=lambda m, n=name: f"{n}: {m}")


def test_triton_non_square():
    v = torch.randn(2, 20, 4, 2, dtype=torch.float64)
    pos = torch.arange(6, 30)
    for a, b in zip(_run("naive", v, [1, 1, 2, 1], True, None, pos), _run("triton", v, [1, 1, 2, 1], True, None, pos),
                    strict=True):
        torch.testing.assert_close(b, a, **TOL[torch.float64])


def test_op_is_registered_for_torch_compile():
    import recurbench.kernels.rem.triton  # noqa: F401

    assert hasattr(torch.ops.recurbench, "rem_scan") and hasattr(torch.ops.recurbench, "rem_scan_backward")
