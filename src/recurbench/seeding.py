"""One seed for every random number generator recurbench touches."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and PyTorch's RNGs so that CPU runs with the same seed repeat exactly.

    ``PYTHONHASHSEED`` only affects sub-processes started after this call (the current interpreter's
    hash seed is fixed at start-up); recurbench never relies on set/dict iteration order of strings.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
