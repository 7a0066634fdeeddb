"""Process-wide settings: glibc's allocator for training on a CPU, and how SIGTERM stops a run.

Allocator
---------

PyTorch's CPU tensors come straight from ``malloc``. With glibc's defaults, a training step's
multi-megabyte activations and gradients are returned to the kernel when freed (``munmap``, or the
heap's top trimmed), so the next step gets fresh pages and pays a page fault (and a page of zeroing)
per 4 KiB it touches. Whether that happens depends on the heap's history: separate processes running
the same step were measured at 0 and 3000 faults per step. :func:`tune_allocator` keeps freed memory in
the process instead (a fixed mmap threshold of 32 MiB, no trimming below 1 GiB), which made Informer's
training on ETTh1 5-10 % faster on a 2-core machine when it ran alone (``recurbench bench forecast``;
about 2 % with two training processes sharing the machine) and step times repeatable. The cost: the
resident size stays at the process's peak instead of shrinking between steps.

The CLI calls it at start-up; library users can call it themselves. ``RECURBENCH_MALLOC=default`` in
the environment turns it off, and so does any of glibc's own threshold variables
(``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_``):
nothing is changed where one is set. (``GLIBC_TUNABLES`` is not read.)

SIGTERM
-------
:func:`handle_termination` makes SIGTERM (a scheduler's or ``timeout``'s stop) raise
``KeyboardInterrupt`` like Ctrl-C (SIGINT), so the MLflow runs in progress unwind and end ``KILLED``. Python
runs a signal handler between two bytecodes of whatever the main thread executes, and that can be a
finalizer (``__del__``, a weakref callback during garbage collection, e.g. SQLAlchemy's), where an
exception cannot propagate: the interpreter prints "Exception ignored" and carries on, and the run
would go on training as if the signal had never come (seen in about 1 of 20 stops of a MiniGrid run).
So a termination (SIGTERM or Ctrl-C) swallowed that way is delivered again, after a short delay, until it propagates.
"""

from __future__ import annotations

import _thread
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from typing import Any

__all__ = ["MMAP_THRESHOLD", "REDELIVERY_DELAY", "TRIM_THRESHOLD", "allocator", "handle_termination", "tune_allocator"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 1024 * 1024
"""Allocations at least this large are mmapped (glibc's largest allowed value on 64-bit Linux)."""
TRIM_THRESHOLD = 1024 * 1024 * 1024
"""Free memory at the heap's top is kept until it exceeds this."""

_GLIBC_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

_tuned = False


def allocator() -> str:
    """``"tuned"`` once :func:`tune_allocator` has set the thresholds in this process, else
    ``"default"``; runs record it (tag ``allocator``), since it moves their timings (by up to
    5-10 %)."""
    return "tuned" if _tuned else "default"


def tune_allocator() -> bool:
    """Set glibc's mmap and trim thresholds (see the module docstring). Returns whether they were set:
    False off Linux/glibc, with ``RECURBENCH_MALLOC=default``, or when glibc's own variables are set."""
    global _tuned
    if os.environ.get("RECURBENCH_MALLOC", "").strip().lower() == "default":
        return False
    if any(name in os.environ for name in _GLIBC_VARS):
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
    # glibc from moving the thresholds itself.
    _tuned = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _tuned


REDELIVERY_DELAY = 0.05
"""Seconds after a swallowed termination before it is delivered again."""

_raised: tuple[KeyboardInterrupt, int] | None = None  # the handler's last exception, and its signal
_previous_unraisablehook: Any = None


def _terminated(signum: int, frame: Any) -> None:
    global _raised
    # Ctrl-C keeps Python's plain KeyboardInterrupt(); other signals say which one stopped the run.
    exc = KeyboardInterrupt() if signum == signal.SIGINT else KeyboardInterrupt(f"terminated by signal {signum}")
    _raised = (exc, signum)
    raise exc


def _unraisable(unraisable: Any) -> None:
    """A termination raised inside a finalizer is swallowed there: deliver it again, from a timer
    thread, once the finalizer has returned (an exception raised in this hook would be lost too)."""
    if _raised is not None and unraisable.exc_value is _raised[0]:
        timer = threading.Timer(REDELIVERY_DELAY, _thread.interrupt_main, args=(_raised[1],))
        timer.daemon = True
        timer.start()
        return
    _previous_unraisablehook(unraisable)


def handle_termination() -> None:
    """SIGTERM raises ``KeyboardInterrupt("terminated by signal 15")`` in the main thread, and Ctrl-C
    (SIGINT) Python's usual ``KeyboardInterrupt()``; either is raised again if a finalizer swallows it
    (see the module docstring). Call from the main thread."""
    global _previous_unraisablehook
    signal.signal(signal.SIGTERM, _terminated)
    signal.signal(signal.SIGINT, _terminated)
    if sys.unraisablehook is not _unraisable:
        _previous_unraisablehook = sys.unraisablehook
        sys.unraisablehook = _unraisable
