"""One Triton kernel launch as data: the launch code builds its launches with this, and
:mod:`recurbench.kernels.compile` compiles the same launches ahead of time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KernelLaunch:
    """One launch as the launch code makes it: ``kernel[grid](*args, **meta)``."""

    kernel: Any
    """The ``@triton.jit`` function."""
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    """Runtime arguments in the kernel's order (tensors and integers)."""
    meta: dict[str, Any]
    """Compile-time parameters (``tl.constexpr``) and launch options (``num_warps``)."""
