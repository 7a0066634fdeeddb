"""Telling a run whose process was killed outright from a run still in progress."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from recurbench import processes
from recurbench.processes import process_gone, process_tags

linux = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")


def _tags_of_an_ended_process() -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", "import json; from recurbench.processes import process_tags; print(json.dumps(process_tags()))"],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout)


def test_the_current_process_is_not_gone():
    assert process_gone(process_tags()) is False


def test_a_process_that_ended_is_gone():
    tags = _tags_of_an_ended_process()
    assert tags["pid"] != str(os.getpid())
    assert process_gone(tags) is True


@linux
def test_a_reused_pid_is_told_apart_by_its_start_time():
    tags = {**process_tags(), "pid_start": "1"}  # this PID, but a process started at another time
    assert process_gone(tags) is True


def test_runs_of_another_host_are_never_declared_gone():
    tags = {**_tags_of_an_ended_process(), "host": "some-other-machine"}
    assert process_gone(tags) is False


@linux
def test_another_pid_namespace_is_never_declared_gone():
    """A container on the same host name sees other PIDs: not knowable from here."""
    tags = {**_tags_of_an_ended_process(), "pid_namespace": "pid:[1]"}
    assert process_gone(tags) is False


@linux
def test_after_a_reboot_only_runs_started_before_it_are_gone(monkeypatch):
    tags = {**process_tags(), "boot_id": "an-earlier-boot"}
    booted = time.time() - 3600
    monkeypatch.setattr(processes, "_boot_time", lambda: booted)
    assert process_gone(tags, started_ms=int((booted - 60) * 1000)) is True
    # Started after this boot, yet another boot id: another machine with the same host name.
    assert process_gone(tags, started_ms=int((booted + 60) * 1000)) is False
    assert process_gone(tags, started_ms=None) is False


def test_tags_without_a_pid_are_not_gone():
    assert process_gone({"host": process_tags()["host"]}) is False
    assert process_gone({"host": process_tags()["host"], "pid": "x"}) is False


def test_without_proc_an_unused_pid_is_gone(monkeypatch):
    """Where there is no /proc (macOS), liveness falls back to probing the PID."""
    ended = _tags_of_an_ended_process()
    monkeypatch.setattr(processes, "_boot_id", lambda: None)
    assert process_gone(ended) is True
    assert process_gone(process_tags()) is False


def test_a_process_is_seen_alive_only_where_it_can_be_checked():
    from recurbench.processes import process_alive

    assert process_alive(process_tags()) is True
    assert process_alive({**process_tags(), "host": "another-machine"}) is False
    assert process_alive(_tags_of_an_ended_process()) is False


def test_a_stopped_heartbeat_means_lost_only_for_a_process_that_cannot_be_seen_alive():
    from recurbench.processes import HEARTBEAT_STALE_S, heartbeat_stale, lost_reason

    now = int(time.time() * 1000)
    old = str(now - int(HEARTBEAT_STALE_S * 1000) - 60_000)
    elsewhere = {**process_tags(), "host": "another-machine", "pid": "77"}
    assert heartbeat_stale({**elsewhere, "heartbeat": old}, now) is True
    assert heartbeat_stale({**elsewhere, "heartbeat": str(now - 30_000)}, now) is False  # beating
    assert heartbeat_stale(elsewhere, now) is False  # an older version's run has no heartbeat
    assert heartbeat_stale({**process_tags(), "heartbeat": old}, now) is False  # alive here, only paused
    minutes = round(HEARTBEAT_STALE_S / 60) + 1
    assert lost_reason({**elsewhere, "heartbeat": old}, now) == (
        f"lost: no heartbeat from its process (pid 77 on another-machine) for {minutes} min "
        "(it stopped, or its machine did; it may only be paused)")
