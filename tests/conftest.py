"""Shared fixtures. The LTSF files are looked up as users do: --data-dir / $RECURBENCH_DATA."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ltsf"


def ltsf_data_dir() -> Path | None:
    """$RECURBENCH_DATA if set, else the workplace's shared copy beside the checkout, else None."""
    env = os.environ.get("RECURBENCH_DATA")
    if env and Path(env).is_dir():
        return Path(env)
    return SHARED_DATA if SHARED_DATA.is_dir() else None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    found = ltsf_data_dir()
    if found is None:
        pytest.skip("LTSF data not available: set RECURBENCH_DATA to a folder with ETTh1.csv etc.")
    return found


@pytest.fixture(autouse=True)
def _machine_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan-time memory checks (the ltsf and memory suites) judge a machine of 64 GiB, whatever the one
    the tests run on has: a plan refused on a small machine must not fail a test there. A test of the
    checks sets its own."""
    monkeypatch.setenv("RECURBENCH_MEMORY_GIB", "64")


@pytest.fixture(autouse=True)
def _signals_as_found():
    """SIGINT's and SIGTERM's handlers and the signal mask as each test found them. The command line
    installs its own handlers for its process's lifetime (``runtime.handle_termination``) and
    ``ray.init`` one for SIGTERM: in one pytest process they would outlive the test that ran them and
    change what a later test's Ctrl-C does."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    for signum, handler in handlers.items():
        if handler is not None and signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
