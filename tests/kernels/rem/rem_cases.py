"""Shared helpers for the REM tests: random head configurations and an O(T) sequential oracle."""

from __future__ import annotations

import torch

ALL_KINDS = ["regular", "cos", "sin", "regular", "cos", "sin"]
ALL_DILATIONS = [1, 1, 1, 2, 3, 24]
# Two four-head layouts (kinds, dilations) that together hold all six REM types, each kind undilated and
# dilated, with dilations 1, 2, 3 and 24: the Triton tests' cases (interpreter and GPU).
TRITON_LAYOUTS = {
    "reg1-cos2-sin3-sin24": (["regular", "cos", "sin", "sin"], [1, 2, 3, 24]),
    "cos1-sin1-reg24-cos3": (["cos", "sin", "regular", "cos"], [1, 1, 24, 3]),
}


def make_params(H: int, dtype=torch.float64, seed: int = 0, requires_grad: bool = True):
    g = torch.Generator().manual_seed(seed)
    eta = (torch.rand(H, generator=g, dtype=dtype) * 4 - 2)  # lambda of both signs
    nu = torch.rand(H, generator=g, dtype=dtype) * 2 + 0.5
    theta = torch.rand(H, generator=g, dtype=dtype) * 3
    return [p.requires_grad_(requires_grad) for p in (eta, nu, theta)]


def sequential_rem(v, kinds, eta, nu, theta, dilations, masked):
    """The RNN of RSA eq. 2 run step by step in complex fp64 (masked), plus its mirror (unmasked).

    Head h keeps one state per residue class mod d_h (a dilated REM is d interleaved RNNs)."""
    B, T, H, D = v.shape
    x = v.double().permute(2, 0, 1, 3).to(torch.complex128)  # [H, B, T, D]
    z = torch.tensor([
        complex(torch.tanh(eta[h]).item(), 0.0) if kind == "regular"
        else complex(torch.sigmoid(nu[h]).item() * torch.cos(theta[h]).item(),
                     torch.sigmoid(nu[h]).item() * torch.sin(theta[h]).item())
        for h, kind in enumerate(kinds)
    ], dtype=torch.complex128)[:, None, None]
    c = torch.tensor([-1j if k == "sin" else 1.0 for k in kinds], dtype=torch.complex128)[:, None, None]
    dil = torch.tensor(dilations)
    heads = torch.arange(H)
    out = torch.zeros(H, B, T, D, dtype=torch.float64)
    for direction in ([1] if masked else [1, -1]):
        state = torch.zeros(H, max(dilations), B, D, dtype=torch.complex128)
        for t in (range(T) if direction == 1 else range(T - 1, -1, -1)):
            r = t % dil
            s = state[heads, r]  # [H, B, D]
            # h_t = z (h_{t-d} + v_{t-d}): the state excludes v_t itself (zero diagonal).
            out[:, :, t] += (c * s).real
            state[heads, r] = z * (s + x[:, :, t])
    return out.permute(1, 2, 0, 3)
