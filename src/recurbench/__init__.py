"""recurbench: a benchmark suite that untangles recurrence and self-attention.

Tensor layout for attention and kernels, project-wide: ``[B, T, H, D]``
(batch, time, heads, head dimension).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("recurbench")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
