"""Quantities as a person reads them in a table or a line of output: times, sizes, ratios. One home
for them, whether the CLI's bench tables or a suite's plan print them; ``-`` stands for a missing value."""

from __future__ import annotations


def duration(seconds: float | None, *, rough: bool = False) -> str:
    """Seconds as ``183 ms``, ``1.24 s`` or ``5,432 s`` (a measured time, three figures); ``rough``:
    ``42 s``, ``12 min`` or ``3.4 h`` (an estimate, such as a plan's typical run time). ``-`` for None."""
    if seconds is None:
        return "-"
    if rough:
        if seconds < 90:
            return f"{seconds:.0f} s"
        if seconds < 90 * 60:
            return f"{seconds / 60:.0f} min"
        return f"{seconds / 3600:.1f} h"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    return f"{seconds:.3g} s" if seconds < 100 else f"{seconds:,.0f} s"


def megabytes(n: float | None) -> str:
    """Bytes as ``6,511 MB`` or ``12.3 MB``; ``-`` for None."""
    if n is None:
        return "-"
    mb = n / 1e6
    return f"{mb:,.0f} MB" if abs(mb) >= 100 else f"{mb:.3g} MB"


def times(ratio: float | None) -> str:
    """A ratio as ``24.4×``; ``-`` for None."""
    return "-" if ratio is None else f"{ratio:.3g}×"
