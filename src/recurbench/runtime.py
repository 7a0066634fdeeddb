"""Process-wide settings: glibc's allocator for training on a CPU, and how SIGTERM stops a run.

Allocator
---------

PyTorch's CPU tensors come straight from ``malloc``. With glibc's defaults, a training step's
multi-megabyte activations and gradients are returned to the kernel when freed (``munmap``, or the
heap's top trimmed), so the next step gets fresh pages and pays a page fault (and a page of zeroing)
per 4 KiB it touches. Whether that happens depends on the heap's history: separate processes running
the same step were measured at 0 and 3000 faults per step. :func:`tune_allocator` keeps freed memory in
the process instead: no trimming below 1 GiB, and no ``mmap`` for large blocks at all (an mmapped
block goes back to the kernel when freed, and glibc will not raise its mmap threshold above 32 MiB, so
every tensor of 32 MiB or more paid its pages again at every step). Measured on a 2-core machine
(``recurbench bench forecast``): Informer on ETTh1-24 5-10 % faster alone on the machine (about 2 %
with two training processes sharing it) and step times repeatable; on ETTm1-24 (672-step windows,
tensors up to ~180 MB) 10.2-10.4 s per batch against 12.3-13.7 s with the 32 MiB threshold alone,
for a peak resident size of 4.9 GB instead of 3.9 GB. The cost: the resident size stays at the
process's peak instead of shrinking between steps.

The CLI calls it at start-up; library users can call it themselves. ``RECURBENCH_MALLOC=default`` in
the environment turns it off, and so does any of glibc's own threshold variables
(``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_``)
or a ``glibc.malloc.*`` entry in ``GLIBC_TUNABLES``: nothing is changed where one is set.

SIGTERM
-------
:func:`handle_termination` makes SIGTERM (a scheduler's or ``timeout``'s stop) raise
``KeyboardInterrupt`` like Ctrl-C (SIGINT), so the MLflow runs in progress unwind and end ``KILLED``.
Python runs a signal handler between two bytecodes of whatever the main thread executes, and the
exception it raises can be swallowed there: in a finalizer (``__del__``, a weakref callback during
garbage collection, e.g. SQLAlchemy's) the interpreter prints "Exception ignored" and carries on, and
code that clears errors (C extensions can) drops it silently. The run then went on training as if
the signal had never come: 1 stop in about 20 of a MiniGrid run; raising it again from a timer when a
finalizer reported it still lost 1 stop in ~37. So the handler also records the signal, and the
training loops call :func:`raise_if_terminated` at every step (a batch, an env step), which raises the
stop again: a run stops within a step of the signal.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from recurbench.errors import ConfigError

__all__ = [
    "MEMORY_VAR", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "allocator", "handle_termination", "physical_memory", "raise_if_terminated",
    "stops_held", "tune_allocator",
]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4

MMAP_THRESHOLD = 32 * 1024 * 1024
"""glibc's largest allowed mmap threshold on 64-bit Linux. Set explicitly, so that glibc stops moving
its thresholds itself; with mmap turned off (``M_MMAP_MAX`` 0) it only matters where glibc falls back to
mmap (a heap that cannot grow)."""
TRIM_THRESHOLD = 1024 * 1024 * 1024
"""Free memory at the heap's top is kept until it exceeds this."""

_GLIBC_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

_tuned = False


def allocator() -> str:
    """``"tuned"`` once :func:`tune_allocator` has set the thresholds in this process, else
    ``"default"``; runs record it (tag ``allocator``), since it moves their timings (by up to
    5-10 %)."""
    return "tuned" if _tuned else "default"


def _malloc_tunables(tunables: str) -> list[str]:
    """The ``glibc.malloc.*`` entries of a ``GLIBC_TUNABLES`` value (``name=value`` pairs joined by
    ``:``)."""
    return [entry for entry in tunables.split(":") if entry.strip().startswith("glibc.malloc.")]


def tune_allocator() -> bool:
    """Set glibc's mmap and trim thresholds (see the module docstring). Returns whether they were set:
    False off Linux/glibc, with ``RECURBENCH_MALLOC=default``, or when glibc's own variables (or its
    malloc tunables) are set."""
    global _tuned
    if os.environ.get("RECURBENCH_MALLOC", "").strip().lower() == "default":
        return False
    if any(name in os.environ for name in _GLIBC_VARS) or _malloc_tunables(os.environ.get("GLIBC_TUNABLES", "")):
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return False  # not glibc (musl's mallopt does nothing)
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success. The mmap threshold goes first: setting it explicitly also stops
    # glibc from moving the thresholds itself. Then no mmapped blocks at all: large ones come from the
    # heap too, and stay there when freed.
    _tuned = (
        bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        and bool(mallopt(_M_MMAP_MAX, 0))
    )
    return _tuned


_pending: int | None = None  # the signal that asked this process to stop, once one has
_previous_unraisablehook: Any = None


def _stop(signum: int) -> KeyboardInterrupt:
    # Ctrl-C keeps Python's plain KeyboardInterrupt(); other signals say which one stopped the run.
    return KeyboardInterrupt() if signum == signal.SIGINT else KeyboardInterrupt(f"terminated by signal {signum}")


def _terminated(signum: int, frame: Any) -> None:
    global _pending
    _pending = signum
    raise _stop(signum)


def raise_if_terminated() -> None:
    """A checkpoint for loops that run for long (a training step, an env step): raise the stop again
    if a termination signal came and its ``KeyboardInterrupt`` was swallowed on the way (see the module
    docstring). Does nothing unless :func:`handle_termination` is installed and a signal came."""
    if _pending is not None:
        raise _stop(_pending)


def _unraisable(unraisable: Any) -> None:
    """A termination raised inside a finalizer is swallowed there; the next checkpoint raises it again,
    so the "Exception ignored" report would only mislead."""
    if _pending is not None and isinstance(unraisable.exc_value, KeyboardInterrupt):
        return
    _previous_unraisablehook(unraisable)


def handle_termination() -> None:
    """SIGTERM raises ``KeyboardInterrupt("terminated by signal 15")`` in the main thread, and Ctrl-C
    (SIGINT) Python's usual ``KeyboardInterrupt()``; the training loops' :func:`raise_if_terminated`
    raises it again if it was swallowed (see the module docstring). Call from the main thread."""
    global _previous_unraisablehook
    signal.signal(signal.SIGTERM, _terminated)
    signal.signal(signal.SIGINT, _terminated)
    if sys.unraisablehook is not _unraisable:
        _previous_unraisablehook = sys.unraisablehook
        sys.unraisablehook = _unraisable


@contextmanager
def stops_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs (a run being ended in the store), then let a
    stop that came meanwhile through: a second Ctrl-C right after the first cut the closing of runs
    short, and left them RUNNING though the command said they were ended (2 of 12 tries of three
    Ctrl-C 50 ms apart). The handlers are swapped for one that notes the signal, which is raised again
    once the block is done (a signal mask would not do: the kernel hands a process's signal to any of
    its threads that does not block it, MLflow's and Ray's included). A no-op outside the main thread,
    where Python runs no signal handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, lambda signum, frame: came.append(signum)) for signum in stops}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if came:
            signal.raise_signal(came[0])  # as if it came now, to the handler it would have met


def stop_signal() -> int | None:
    """The signal (SIGTERM, SIGINT) that asked this process to stop, once one has
    (:func:`handle_termination`); None until then."""
    return _pending


MEMORY_VAR = "RECURBENCH_MEMORY_GIB"
"""The memory, in GiB, that plan-time checks take a machine to have instead of this one's: a driver on
a small machine planning for larger workers of a Ray cluster, or a test suite that must not depend on
the machine it runs on."""


def physical_memory() -> int | None:
    """This machine's memory in bytes (or ``$RECURBENCH_MEMORY_GIB``'s); None where the platform does not
    say. Plan-time checks refuse a run that could not fit in it."""
    if (given := os.environ.get(MEMORY_VAR)) is not None:
        try:
            gib = float(given)
        except ValueError:
            gib = float("nan")
        if not gib > 0 or gib == float("inf"):
            raise ConfigError(f"${MEMORY_VAR}: must be a positive number of GiB, got {given!r}")
        return int(gib * 2**30)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
