"""The REM entry points trace into one graph under ``torch.compile`` (no graph break), on the CPU paths;
the Triton op's own compile test needs a GPU (``test_rem_cuda.py``)."""

from __future__ import annotations

import pytest
import torch
from rem_cases import TRITON_LAYOUTS, make_params

from recurbench.kernels.rem import rem_apply, rem_mix

KINDS, DILATIONS = TRITON_LAYOUTS["cos1-sin1-reg24-cos3"]  # the three kinds, dilations 1, 3 and 24


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_rem_apply_compiles_into_one_graph(impl):
    # The head kinds used to be read back from a device tensor (bool(is_reg.all())): a data-dependent
    # branch that broke the graph, and a host synchronisation per call on a GPU.
    eta, nu, theta = make_params(4, torch.float32, requires_grad=False)
    v = torch.randn(2, 40, 4, 16, generator=torch.Generator().manual_seed(0))

    def f(v):
        return rem_apply(v, kind=KINDS, eta=eta, nu=nu, theta=theta, dilation=DILATIONS, masked=True, impl=impl)

    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="eager")(v), f(v))


def test_rem_mix_compiles_into_one_graph_and_keeps_its_values():
    # Eagerly, short square self-attention on a CPU takes the fused lane path (strided out= writes,
    # which dynamo cannot trace); compiled, it takes rem_apply and a lerp: the same values.
    eta, nu, theta = make_params(4, torch.float32, requires_grad=False)
    gen = torch.Generator().manual_seed(0)
    attn, v = torch.randn(2, 40, 4, 16, generator=gen), torch.randn(2, 40, 4, 16, generator=gen)

    def f(attn, v):
        return rem_mix(attn, v, torch.tensor(0.3), kind=KINDS, eta=eta, nu=nu, theta=theta, dilation=DILATIONS,
                       masked=False)

    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="eager")(attn, v), f(attn, v))
