"""recurbench.runtime.tune_allocator: freed tensor memory stays in the process (no page faults when a
training step's buffers are allocated again)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from recurbench.errors import ConfigError
from recurbench.runtime import physical_memory, tune_allocator

# A training step's pattern in small: six 8 MiB, two ~12 MiB and one 40 MiB tensors (growing a little each
# round) allocated, written and freed, eight times. With glibc's defaults part of that memory goes back to
# the kernel every round (unmapped, or the heap's top trimmed), so each round faults pages in again; tuned,
# the rounds reuse memory already faulted in. The 40 MiB tensor is above the largest mmap threshold glibc
# accepts (32 MiB): only turning mmap off keeps it.
#
# Where a round's tensors land in the heap depends on the small allocations between them (Python's and
# torch's bookkeeping), and so on the hash seed and the paths on sys.path: a round's 40 MiB tensor can
# outgrow the hole it had and move to fresh heap (it failed 1 run in ~110 that way, faulting 10,268 pages in
# round 6). So a warm-up first holds two steps' worth of the largest tensors at once, as a training run's
# first steps reach its peak: every round then fits in memory that is already the process's, whatever the
# layout. The subprocess's environment is fixed too (one hash seed, not whatever an earlier test left in
# os.environ).
_ROUNDS = """
import json, resource
import torch
from recurbench.errors import ConfigError
from recurbench.runtime import physical_memory, tune_allocator
from recurbench.tracking import standard_tags
applied = tune_allocator()
M = 1024 * 1024  # float32 elements: 4 MiB


def step(r):
    return ([torch.empty(2 * M).fill_(1.0) for _ in range(6)]
            + [torch.empty(3 * M + 7 * 1024 * r).fill_(1.0) for _ in range(2)]
            + [torch.empty(10 * M + 7 * 1024 * r).fill_(1.0)])


warm_up = [step(8), step(8)]
del warm_up
faults = []
for r in range(8):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    tensors = step(r)
    del tensors
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print(json.dumps({"applied": applied, "faults": faults, "tag": standard_tags()["allocator"]}))
"""
PAGES_PER_ROUND = (6 * 8 + 2 * 12 + 40) * 1024 * 1024 // 4096


def _rounds(env_extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k not in ("RECURBENCH_MALLOC", "GLIBC_TUNABLES", "PYTHONHASHSEED")}
    env.update({"PYTHONHASHSEED": "0", **env_extra})
    out = subprocess.run([sys.executable, "-c", _ROUNDS], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_allocator_reuses_freed_tensor_memory():
    default = _rounds({"RECURBENCH_MALLOC": "default"})
    assert default["applied"] is False and default["tag"] == "default"
    if min(default["faults"][-3:]) < PAGES_PER_ROUND // 5:
        pytest.skip(f"this allocator keeps freed memory by default (faults per round {default['faults']})")
    tuned = _rounds({})
    assert tuned["applied"] is True and tuned["tag"] == "tuned"  # runs record it: it moves their timings
    # Every round reuses the warm-up's pages: almost no faults (a few for torch's own bookkeeping).
    assert max(tuned["faults"]) < PAGES_PER_ROUND // 50, (tuned["faults"], default["faults"])


def test_opting_out_and_glibc_variables_leave_the_allocator_alone(monkeypatch):
    monkeypatch.setenv("RECURBENCH_MALLOC", "default")
    assert tune_allocator() is False
    monkeypatch.delenv("RECURBENCH_MALLOC")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000000")
    assert tune_allocator() is False
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0:glibc.malloc.mmap_threshold=65536")
    assert tune_allocator() is False


def test_only_glibcs_malloc_tunables_count_as_the_users_allocator_settings():
    from recurbench.runtime import _malloc_tunables

    assert _malloc_tunables("glibc.pthread.rseq=0:glibc.malloc.trim_threshold=1:glibc.malloc.top_pad=0") == [
        "glibc.malloc.trim_threshold=1", "glibc.malloc.top_pad=0"]
    assert _malloc_tunables("glibc.pthread.rseq=0") == [] and _malloc_tunables("") == []


# SIGTERM arrives while a finalizer runs (a __del__ here; SQLAlchemy's weakref callbacks during garbage
# collection in the runs that hung), or inside code that clears errors (as C extensions do): the
# handler's KeyboardInterrupt is swallowed there. The loop's checkpoint must raise it again.
_SWALLOWED = """
import os, signal, sys, time
from recurbench.runtime import handle_termination, raise_if_terminated
mode, where, signum = sys.argv[1], sys.argv[2], int(sys.argv[3])

def bare(signum, frame):
    raise KeyboardInterrupt(f"terminated by signal {signum}")

if mode == "handled":
    handle_termination()
else:
    signal.signal(signal.SIGTERM, bare)

def receive():
    os.kill(os.getpid(), signum)
    for _ in range(1000):  # the handler runs here
        pass

class Finalized:
    def __del__(self):
        receive()

def cleared():
    try:
        receive()
    except BaseException:
        pass

try:
    Finalized() if where == "finalizer" else cleared()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # a training loop
        raise_if_terminated()
        time.sleep(0.01)
    print("still running")
except KeyboardInterrupt as exc:
    print(f"stopped: {exc}")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")
def test_a_termination_swallowed_on_its_way_is_raised_at_the_next_checkpoint():
    import signal

    def run(mode: str, where: str, signum: int) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-c", _SWALLOWED, mode, where, str(signum)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    bare = run("bare", "finalizer", signal.SIGTERM)  # the failure guarded against: a raising handler alone
    assert bare.stdout.strip() == "still running" and "Exception ignored" in bare.stderr, bare
    for where in ("finalizer", "cleared"):
        handled = run("handled", where, signal.SIGTERM)
        assert handled.stdout.strip() == "stopped: terminated by signal 15", (where, handled)
        assert "Exception ignored" not in handled.stderr, (where, handled.stderr)
    ctrl_c = run("handled", "finalizer", signal.SIGINT)  # Ctrl-C: Python's plain KeyboardInterrupt
    assert ctrl_c.stdout.strip() == "stopped:", ctrl_c


@pytest.mark.parametrize("value", ["0", "-2", "lots", "inf", "nan", ""])
def test_a_bad_memory_setting_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("RECURBENCH_MEMORY_GIB", value)
    with pytest.raises(ConfigError, match=rf"^\$RECURBENCH_MEMORY_GIB: must be a positive number of GiB, got '{value}'$"):
        physical_memory()


def test_the_memory_setting_stands_in_for_the_machine(monkeypatch):
    monkeypatch.setenv("RECURBENCH_MEMORY_GIB", "1.5")
    assert physical_memory() == 3 * 2**29
    monkeypatch.delenv("RECURBENCH_MEMORY_GIB")
    assert physical_memory() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
