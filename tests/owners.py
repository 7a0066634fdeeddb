"""Owner tags of a process that is provably gone, for tests of runs left RUNNING by a dead driver."""

from __future__ import annotations

import subprocess
import sys

from recurbench.tracking import owner_tags


def dead_owner() -> dict[str, str]:
    """Owner tags of a process of this host that has exited (reaped, so its pid is free)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    tags = owner_tags(proc.pid)  # taken while it lives: its start time is recorded
    proc.communicate(b"")
    return tags
