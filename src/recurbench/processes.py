"""Which process owns a tracked run, and whether that process is gone.

A run ends FAILED or KILLED when its body raises or a signal stops it (:mod:`recurbench.tracking`).
A process killed outright (SIGKILL, the kernel's out-of-memory killer, a machine that stops) runs no
code at all, so its MLflow runs stay RUNNING forever and read like runs still in progress. To tell
them apart, every run is tagged with its process (:func:`process_tags`); :func:`process_gone` later
decides, from another process on the same machine, that the owner no longer exists.

The verdict errs on the side of "not known to be gone": a run is only declared lost when

* it was started on a machine with this host name, and
* on Linux, in the same boot and PID namespace, and the PID is now unused or belongs to a process
  started at another time (a reused PID) — or the run started before this machine last booted;
* elsewhere, the PID is unused (a reused PID reads as alive); on Windows, never.

So runs of other machines sharing a store, or of other containers, are never touched.

For those, a run's heartbeat speaks instead: while a run is open, its process rewrites the run's
``heartbeat`` tag (milliseconds since the epoch) every :data:`HEARTBEAT_S` seconds
(:mod:`recurbench.tracking`). A run whose heartbeat is older than :data:`HEARTBEAT_STALE_S`, and whose
process cannot be seen alive from here, has most likely lost its process (:func:`heartbeat_stale`).
That verdict is only read (it makes such a run read as ``LOST``, so ``run --skip-finished`` does not
wait on it), never written to the store: a process that was only paused may still come back.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

HOST_TAG = "host"
PID_TAG = "pid"
PID_START_TAG = "pid_start"
BOOT_TAG = "boot_id"
PID_NAMESPACE_TAG = "pid_namespace"

HEARTBEAT_TAG = "heartbeat"
HEARTBEAT_S = 60.0
"""Seconds between two heartbeats of an open run."""
HEARTBEAT_STALE_S = 900.0
"""Seconds without a heartbeat after which a run whose process cannot be checked reads as lost."""

_PROC = Path("/proc")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _boot_id() -> str | None:
    return _read(_PROC / "sys/kernel/random/boot_id")


def _pid_namespace() -> str | None:
    try:
        return os.readlink(_PROC / "self/ns/pid")
    except OSError:
        return None


def _boot_time() -> float | None:
    """Seconds since the epoch at which this machine booted (Linux), else None."""
    for line in (_read(_PROC / "stat") or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def pid_start(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat``, field 22);
    None if there is no such process or no ``/proc``."""
    stat = _read(_PROC / str(pid) / "stat")
    if stat is None:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or parentheses.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def process_tags() -> dict[str, str]:
    """Tags naming the current process: host, PID and, on Linux, its start time, boot and PID namespace."""
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    extra = {PID_START_TAG: pid_start(os.getpid()), BOOT_TAG: _boot_id(), PID_NAMESPACE_TAG: _pid_namespace()}
    tags.update({k: v for k, v in extra.items() if v})
    return tags


def _pid_unused(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there, not probe it
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False  # it exists (another user's), or we cannot tell
    return False


def _local_pid(tags: Mapping[str, str]) -> int | None:
    """The PID a run's :func:`process_tags` name, if that process ran on this machine (by host name)."""
    if tags.get(HOST_TAG) != socket.gethostname():
        return None
    try:
        return int(tags.get(PID_TAG, ""))
    except ValueError:
        return None


def process_gone(tags: Mapping[str, str], started_ms: int | None = None) -> bool:
    """Whether the process named by a run's :func:`process_tags` surely no longer exists.

    ``started_ms``: the run's start time (MLflow's milliseconds), used when the machine has rebooted
    since. False whenever that cannot be told from here (see the module docstring)."""
    if (pid := _local_pid(tags)) is None:
        return False
    boot = _boot_id()
    if BOOT_TAG in tags and boot is not None:
        if tags[BOOT_TAG] != boot:
            booted = _boot_time()
            return started_ms is not None and booted is not None and started_ms / 1000 < booted
        if tags.get(PID_NAMESPACE_TAG) != _pid_namespace() or PID_START_TAG not in tags:
            return False
        return pid_start(pid) != tags[PID_START_TAG]
    return _pid_unused(pid)


def process_alive(tags: Mapping[str, str]) -> bool:
    """Whether the process named by a run's :func:`process_tags` surely exists now, seen from here:
    this machine, and on Linux the same boot and PID namespace with the same start time."""
    if (pid := _local_pid(tags)) is None:
        return False
    boot = _boot_id()
    if BOOT_TAG in tags and boot is not None:
        return (tags[BOOT_TAG] == boot and tags.get(PID_NAMESPACE_TAG) == _pid_namespace()
                and PID_START_TAG in tags and pid_start(pid) == tags[PID_START_TAG])
    return os.name != "nt" and not _pid_unused(pid)


def heartbeat_stale(tags: Mapping[str, str], now_ms: int) -> bool:
    """Whether a run's last heartbeat is older than :data:`HEARTBEAT_STALE_S` at ``now_ms`` while its
    process cannot be seen alive from here (:func:`process_alive`). False for a run without one."""
    try:
        beat = int(tags[HEARTBEAT_TAG])
    except (KeyError, ValueError):
        return False
    return now_ms - beat > HEARTBEAT_STALE_S * 1000 and not process_alive(tags)


def lost_reason(tags: Mapping[str, str], now_ms: int | None = None) -> str:
    """The ``error`` text of a run whose process is gone; with ``now_ms``, of one whose heartbeat
    stopped (:func:`heartbeat_stale`)."""
    if now_ms is not None:
        minutes = (now_ms - int(tags[HEARTBEAT_TAG])) / 60000
        return (
            f"lost: no heartbeat from its process (pid {tags.get(PID_TAG, '?')} on {tags.get(HOST_TAG, '?')}) "
            f"for {minutes:.0f} min (it stopped, or its machine did; it may only be paused)"
        )
    return (
        f"lost: its process (pid {tags.get(PID_TAG, '?')} on {tags.get(HOST_TAG, '?')}) ended without closing "
        "the run (killed by SIGKILL or the out-of-memory killer, or the machine stopped)"
    )
