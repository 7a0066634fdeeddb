from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from recurbench.seeding import seed_everything


def _draw():
    return random.random(), float(np.random.rand()), torch.randn(3).tolist()


def test_one_seed_fixes_python_numpy_and_torch():
    seed_everything(7)
    first = _draw()
    seed_everything(7)
    assert _draw() == first
    seed_everything(8)
    assert _draw() != first


def test_training_repeats_exactly_on_cpu_with_the_same_seed():
    def train():
        seed_everything(3)
        model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
        opt = torch.optim.Adam(model.parameters(), 1e-2)
        x, y = torch.randn(64, 4), torch.randn(64, 1)
        for _ in range(20):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    for a, b in zip(train(), train(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_seeds_are_refused(bad):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        seed_everything(bad)
