"""Experiment tracking: MLflow for real runs, an in-memory tracker for tests.

Conventions (every suite, study and benchmark follows them):

* one MLflow experiment per suite (``recurbench-<suite>``), a parent run per invocation and a nested
  run per configuration/seed (or per Optuna trial);
* standard tags: ``suite``, ``profile``, ``model`` or ``agent``, ``dataset`` or ``env``, ``seed``,
  ``recurbench_version``, ``git_commit`` (when the code runs from a git checkout), ``device``;
* a run whose body raises is ended ``FAILED`` with the error in the ``error`` tag (``KILLED`` on
  Ctrl-C), and the exception propagates: a crash never leaves a run silently RUNNING or lost;
* a process killed outright (SIGKILL, out of memory) cannot close its runs. Every run is tagged with
  its owner (:func:`owner_tags`: host, boot, pid and start time of the process that opened it, and
  since when), and a RUNNING run is ended FAILED as stale only when its owner is provably gone
  (:func:`owner_gone`: same host, and that process no longer exists, or another process has its pid),
  or when the user names it (``recurbench run --end-run``). A run of a live driver, or of one this
  machine cannot check (another host, an older version that did not tag its owner), is never ended.
  Worker deaths under Ray are handled by the task's next attempt (:mod:`recurbench.engine`);
* an embedded store (sqlite, a folder) is created under a lock file beside it (:func:`store_lock`), by
  one process at a time, and a new sqlite store is built aside and moved into place, so a crash in
  the middle never leaves a half-created store; the suite runner claims a configuration under the
  same lock (:mod:`recurbench.suites.runner`);
* a tracking server that stops answering fails the command within a bounded time (MLflow's HTTP
  retries capped, :data:`SERVER_RETRIES`) with one line naming it (:class:`StoreUnreachable`); the
  runs it could not end stay RUNNING, owned by a process that is gone, so the next driver on this
  host ends them;
* every run is tagged with the ``host`` that ran it (a cluster spreads runs over machines).

Runs are read back as :class:`RunRecord` (latest metric values, params as logged text):
:meth:`Tracker.stored_runs` for ``recurbench run --skip-finished``, and
:mod:`recurbench.reporting.runs` for comparisons; what a run's settings are, and whether two agree,
is :mod:`recurbench.records`.

The default store is embedded: ``sqlite:///results/mlflow.db`` with artifacts under
``results/mlartifacts``. ``--tracking-uri`` (or ``MLFLOW_TRACKING_URI``) selects any other store.
:func:`check_store` probes a store before anything runs, so that an unreachable server, a corrupt
database file or a read-only folder fails in seconds with one line naming the store.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import socket
import sqlite3
import subprocess
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote

from filelock import FileLock, Timeout

import recurbench
from recurbench.errors import ConfigError, RecurbenchError
from recurbench.records import RunRecord, flatten, param_value
from recurbench.runtime import allocator, stop_signal, stops_held

RESULTS_DIR = Path("results")
DEFAULT_TRACKING_URI = "sqlite:///results/mlflow.db"
EXPERIMENT_PREFIX = "recurbench-"


def experiment_name(suite: str) -> str:
    return f"{EXPERIMENT_PREFIX}{suite}"


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the source tree recurbench runs from, if it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def standard_tags(**tags: Any) -> dict[str, str]:
    """The given tags (None dropped; the callers that train give ``device``, what
    :func:`recurbench.devices.describe_device` says of it) plus version, git commit and allocator
    (:func:`recurbench.runtime.allocator`: whether glibc's allocator was tuned, which moves timings)."""
    out = {k: str(v) for k, v in tags.items() if v is not None}
    out["recurbench_version"] = recurbench.__version__
    commit = git_commit()
    if commit:
        out["git_commit"] = commit
    out.setdefault("allocator", allocator())
    return out


PARENT_TAG = "mlflow.parentRunId"
RUN_STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")
"""MLflow's run statuses (a status filter is built from one of them)."""


class RunHandle(ABC):
    """One tracked run. Values are logged immediately (nothing is buffered until the end)."""

    run_id: str

    @abstractmethod
    def log_params(self, params: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    @abstractmethod
    def set_tags(self, tags: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None: ...

    def log_dict(self, data: Any, artifact_file: str) -> None:
        """Write ``data`` as JSON into the run's artifacts under ``artifact_file``."""
        self.log_text(json.dumps(data, indent=2, sort_keys=True, default=str), artifact_file)

    def log_text(self, text: str, artifact_file: str) -> None:
        self._log_written(artifact_file, lambda path: path.write_text(text))

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        """Save a matplotlib figure as an artifact."""
        self._log_written(artifact_file, lambda path: figure.savefig(path, dpi=120, bbox_inches="tight"))

    def _log_written(self, artifact_file: str, write: Any) -> None:
        """``write(path)`` into a temporary file named like ``artifact_file``, then log it there."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            write(path)
            parent = str(Path(artifact_file).parent)
            self.log_artifact(path, None if parent == "." else parent)


class Tracker(ABC):
    """Opens runs. ``with tracker.run(...) as run:`` ends the run FINISHED, or FAILED if it raises
    (KILLED on Ctrl-C or SIGTERM)."""

    @abstractmethod
    def _start(self, experiment: str, name: str, tags: dict[str, str], parent_id: str | None) -> RunHandle: ...

    @abstractmethod
    def _end(self, run: RunHandle, status: str) -> None: ...

    def open(self) -> None:  # noqa: B027 - a no-op unless the tracker has a store to open
        """Open the store now (a bad URI fails here), e.g. before a command writes elsewhere."""

    def stored_runs(self, experiment: str, tags: Mapping[str, str], status: str = "FINISHED", *,
                    parents: bool = False) -> list[RunRecord]:
        """The runs of ``experiment`` in ``status`` (parent runs aside; with ``parents``, the parent
        runs alone) carrying every tag in ``tags``, newest first; [] when the experiment does not exist yet."""
        return []

    @abstractmethod
    def end_stale(
        self, experiment: str, tags: Mapping[str, str], reason: str, *, status: str = "FAILED",
        parent_id: str | None = None,
    ) -> list[str]:
        """End ``status`` every RUNNING run of ``experiment`` that carries every tag in ``tags`` (and,
        with ``parent_id``, is nested under that run), with ``reason`` as its ``error`` tag; their ids.
        For runs whose process is known to have died without closing them: a Ray task's dead attempt
        (under its own parent), or runs of this driver's own parent that it stops."""

    @abstractmethod
    def end_runs(self, run_ids: Sequence[str], reason: str, *, status: str = "FAILED") -> list[str]:
        """End ``status`` those of ``run_ids`` that are RUNNING (parent runs too), with ``reason`` as
        their ``error`` tag; the ids ended."""

    def _resume(self, run_id: str) -> RunHandle:
        """A handle on the existing run ``run_id`` (one :meth:`open_run` created, say)."""
        raise NotImplementedError(f"{type(self).__name__} cannot write into an existing run")

    def open_run(self, name: str, *, experiment: str, tags: Mapping[str, Any] | None = None,
                 parent: RunHandle | str | None = None) -> RunHandle:
        """Create a RUNNING run tagged with its host and owner (this process, :func:`owner_tags`) and
        return it open: the caller ends it (:meth:`run` with ``run_id`` writes into it and ends it)."""
        parent_id = parent if isinstance(parent, str) or parent is None else parent.run_id
        tags = {HOST_TAG: socket.gethostname(), **owner_tags(), **{k: str(v) for k, v in (tags or {}).items()}}
        return self._start(experiment, name, tags, parent_id)

    def run_status(self, run_id: str) -> str | None:
        """The status of run ``run_id``; None where the store has no such run."""
        raise NotImplementedError(f"{type(self).__name__} cannot look a run up")

    def read_artifact(self, run_id: str, path: str) -> bytes | None:
        """The bytes of artifact ``path`` (``folder/name``) of run ``run_id``; None where it has none
        (default: a tracker that cannot read artifacts back has none)."""
        return None

    def withdraw(self, run_id: str, reason: str) -> None:
        """Take back a run opened to claim work that another driver holds (default: end it KILLED)."""
        self.end_runs([run_id], reason, status="KILLED")

    def last_claim(self, key: str) -> tuple[int, dict[str, str]] | None:
        """The newest claim of ``key`` (:meth:`take_claim`): its generation and its holder's tags; None
        before the first."""
        raise NotImplementedError(f"{type(self).__name__} keeps no claims")

    def take_claim(self, key: str, generation: int, holder: Mapping[str, str]) -> dict[str, str]:
        """Take claim ``generation`` of ``key`` for ``holder`` (tags naming it), atomically for every
        process on the store: the tags of the holder that has it, ``holder`` where this call took it,
        the first taker's where another did. A claim, once taken, is never given back or changed: a
        later one takes the next generation."""
        raise NotImplementedError(f"{type(self).__name__} keeps no claims")

    @contextmanager
    def run(
        self,
        name: str,
        *,
        experiment: str,
        tags: Mapping[str, Any] | None = None,
        parent: RunHandle | str | None = None,
        run_id: str | None = None,
    ) -> Iterator[RunHandle]:
        """``parent``: the parent run, or its id (e.g. a study's parent run seen from a worker process).
        ``run_id``: write into that RUNNING run (opened by :meth:`open_run`) instead of a new one."""
        handle = (self._resume(run_id) if run_id is not None
                  else self.open_run(name, experiment=experiment, tags=tags, parent=parent))
        try:
            yield handle
        except KeyboardInterrupt as exc:
            self._close(handle, "KILLED", {"error": f"KeyboardInterrupt: {exc}" if str(exc) else "KeyboardInterrupt"})
            raise
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}"
            self._close(handle, "FAILED", {"error": message[:5000], "error_traceback": traceback.format_exc()[-5000:]})
            raise
        else:
            with stops_held():  # a stop now comes after the run is FINISHED, not between
                self._end(handle, "FINISHED")

    def _close(self, handle: RunHandle, status: str, tags: Mapping[str, str]) -> None:
        """End a run that raised, a second stop held back until it is ended; where the store itself
        is gone, leave it (its owner, this process, will be gone too when the next driver looks) rather
        than mask the error with another one."""
        try:
            with stops_held():
                handle.set_tags(tags)
                self._end(handle, status)
        except StoreUnreachable:
            pass


HOST_TAG = "host"


# ----------------------------------------------------------------------------------------------
# Owners: which process a RUNNING run belongs to, and whether that process is provably gone

OWNER_HOST, OWNER_BOOT, OWNER_PID, OWNER_START, OWNER_SINCE = (
    "owner_host", "owner_boot", "owner_pid", "owner_start", "owner_since")


def _boot_id() -> str:
    """This machine's boot (Linux: a new id at every boot), so that a pid of an earlier boot is gone."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (Linux: clock ticks after boot, field 22 of ``/proc/PID/stat``),
    "" for a zombie (it has exited), None where ``/proc`` does not say (no such process, not Linux).
    With the pid it names one process of one boot: a pid reused later has another start."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    return "" if fields[0] == "Z" else fields[19]


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_tags(pid: int | None = None) -> dict[str, str]:
    """The tags naming the process ``pid`` (default: this one) as the owner of a run it opens."""
    pid = os.getpid() if pid is None else pid
    since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return {OWNER_HOST: socket.gethostname(), OWNER_BOOT: _boot_id(), OWNER_PID: str(pid),
            OWNER_START: _process_start(pid) or "", OWNER_SINCE: since}


def owner_gone(tags: Mapping[str, str]) -> bool:
    """Whether the owner of a run with these tags is provably gone: it ran on this host, and this
    machine has rebooted since, or its process no longer exists (or is a zombie), or another process
    now has its pid (another start time). False wherever that cannot be proven: another host, or a
    run without owner tags (an older recurbench's)."""
    host, pid = tags.get(OWNER_HOST), tags.get(OWNER_PID, "")
    if not host or host != socket.gethostname() or not pid.isdigit():
        return False
    boot, mine = tags.get(OWNER_BOOT), _boot_id()
    if boot and mine and boot != mine:
        return True
    start = _process_start(int(pid))
    if start is None:  # no /proc entry: on Linux the process is gone; elsewhere ask the kernel
        return not _pid_exists(int(pid))
    return start == "" or (bool(tags.get(OWNER_START)) and start != tags.get(OWNER_START))


def describe_owner(tags: Mapping[str, str]) -> str:
    """``host h, pid p, since t`` for a run's owner (what a message names it by)."""
    if not tags.get(OWNER_PID):
        return f"host {tags.get(HOST_TAG, '?')}, owner not recorded (an older recurbench)"
    return f"host {tags.get(OWNER_HOST)}, pid {tags.get(OWNER_PID)}, since {tags.get(OWNER_SINCE, '?')}"


# ----------------------------------------------------------------------------------------------
# In-memory tracker (tests)


@dataclass
class RecordedRun(RunHandle):
    run_id: str
    experiment: str
    name: str
    tags: dict[str, str]
    parent_id: str | None
    start_time: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, list[tuple[int | None, float]]] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)
    status: str = "RUNNING"

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.params.update(flatten(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        for key, value in metrics.items():
            self.metrics.setdefault(key, []).append((step, float(value)))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self.tags.update({k: str(v) for k, v in tags.items()})

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        p = Path(path)
        key = f"{artifact_path}/{p.name}" if artifact_path else p.name
        self.artifacts[key] = p.read_bytes()

    def last(self, metric: str) -> float:
        return self.metrics[metric][-1][1]


class MemoryTracker(Tracker):
    """Keeps runs in memory: writes nothing, lets tests assert what would have been logged."""

    def __init__(self) -> None:
        self.runs: list[RecordedRun] = []
        self.claims: dict[tuple[str, int], dict[str, str]] = {}
        self._started = 0

    def _start(self, experiment: str, name: str, tags: dict[str, str], parent_id: str | None) -> RunHandle:
        run = RecordedRun(f"run-{self._started}", experiment, name, dict(tags), parent_id, start_time=self._started)
        self._started += 1
        self.runs.append(run)
        return run

    def _end(self, run: RunHandle, status: str) -> None:
        assert isinstance(run, RecordedRun)
        run.status = status

    def _resume(self, run_id: str) -> RunHandle:
        return next(r for r in self.runs if r.run_id == run_id)

    def run_status(self, run_id: str) -> str | None:
        return next((r.status for r in self.runs if r.run_id == run_id), None)

    def read_artifact(self, run_id: str, path: str) -> bytes | None:
        return next((r.artifacts.get(path) for r in self.runs if r.run_id == run_id), None)

    def end_stale(
        self, experiment: str, tags: Mapping[str, str], reason: str, *, status: str = "FAILED",
        parent_id: str | None = None,
    ) -> list[str]:
        ended = []
        for r in self.runs:
            if (r.experiment == experiment and r.status == "RUNNING" and _selected(r.tags, tags, False)
                    and (parent_id is None or r.parent_id == parent_id)):
                r.tags["error"] = reason
                r.status = status
                ended.append(r.run_id)
        return ended

    def end_runs(self, run_ids: Sequence[str], reason: str, *, status: str = "FAILED") -> list[str]:
        ended = []
        for r in self.runs:
            if r.run_id in run_ids and r.status == "RUNNING":
                r.tags["error"], r.status = reason, status
                ended.append(r.run_id)
        return ended

    def last_claim(self, key: str) -> tuple[int, dict[str, str]] | None:
        generations = [g for k, g in self.claims if k == key]
        return (g := max(generations), dict(self.claims[key, g])) if generations else None

    def take_claim(self, key: str, generation: int, holder: Mapping[str, str]) -> dict[str, str]:
        return dict(self.claims.setdefault((key, generation), dict(holder)))

    def children(self, parent: RunHandle) -> list[RecordedRun]:
        return [r for r in self.runs if r.parent_id == parent.run_id]

    def stored_runs(self, experiment: str, tags: Mapping[str, str], status: str = "FINISHED", *,
                    parents: bool = False) -> list[RunRecord]:
        return [
            RunRecord(r.run_id, r.name, r.status, r.start_time, dict(r.tags),
                      {k: param_value(v) for k, v in r.params.items()},
                      {k: values[-1][1] for k, values in r.metrics.items()}, r.parent_id)
            for r in reversed(self.runs)
            if r.experiment == experiment and r.status == status and _selected(r.tags, tags, parents)
        ]


# ----------------------------------------------------------------------------------------------
# MLflow


def resolve_tracking_uri(uri: str | None = None) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def sqlite_file(uri: str) -> Path | None:
    """The database file of an ``sqlite:///`` URI (``sqlite:////abs`` or ``sqlite:///relative``, query
    and percent-encoding removed); None for any other URI."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(unquote(uri.removeprefix("sqlite:///").split("?", 1)[0]))


SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def refuse_plain_sqlite_path(uri: str, what: str) -> None:
    """Refuse a path without a scheme that names an SQLite file (``/tmp/x.db``): MLflow reads it as a
    folder store (and recent MLflow refuses that in a paragraph on its maintenance mode), SQLAlchemy
    cannot parse it; the error gives the URI meant."""
    if "://" not in uri and not uri.startswith(("file:", "journal:")) and Path(uri).suffix.lower() in SQLITE_SUFFIXES:
        raise ConfigError(f"{what} {uri!r}: a path without a scheme is not an SQLite file; write sqlite:///{uri}")


def _writable_folder(folder: Path, what: str) -> None:
    """Refuse a folder this process cannot create files in (the nearest existing ancestor, where the
    folder does not exist yet: nothing is created here). Tried by creating a file, since permission
    bits do not tell for root or a read-only mount."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{what}: {probe} is not a folder")
    try:
        fd, name = tempfile.mkstemp(dir=probe, prefix=".recurbench-probe-")
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write in the folder {probe} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(name)


def check_output_file(path: str | os.PathLike[str], what: str) -> None:
    """Refuse a file this process could not write later (``tune --best-out``, after hours of
    trials): a folder at ``path``, or a folder for it that is a file or cannot be written in. Nothing
    is created here."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what}: {path} is a folder, not a file")
    _writable_folder(path.parent, what)


SQLITE_KINDS = {"mlflow": ("an MLflow tracking store", {"experiments", "runs"}, "--tracking-uri"),
                "optuna": ("an Optuna storage", {"studies", "trials"}, "--storage")}
"""What each tool's database holds (a few of its tables), and the option that takes it."""


def check_sqlite_file(path: Path, what: str, *, write: bool = True, expect: str | None = None) -> None:
    """Refuse an SQLite store that cannot serve: an existing file that is not an SQLite database (or
    not readable), one that is the other tool's (``expect``: ``mlflow`` or ``optuna``; either would add
    its tables to the other's database), and, with ``write``, a file or folder this process cannot
    write. One line naming the file, in milliseconds, where MLflow and Optuna would retry for minutes or
    print a traceback."""
    if path.exists():
        if not path.is_file():
            raise ConfigError(f"{what}: {path} is not a file")
        # Read-write where this process may write it: a journal left by a process killed in the middle of
        # a write (a hot journal) is rolled back on that open, as MLflow's own would. A read-only open
        # cannot roll it back and fails ("attempt to write a readonly database"): the store was refused
        # as unreadable after a killed driver or store writer.
        mode = "rw" if os.access(path, os.R_OK | os.W_OK) else "ro"
        try:
            with sqlite3.connect(f"file:{path}?mode={mode}", uri=True, timeout=10) as db:
                db.execute("PRAGMA schema_version").fetchone()
                tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.Error as exc:
            raise ConfigError(f"{what}: {path} is not a readable SQLite database ({exc})") from None
        finally:
            db.close()
        if expect is not None:
            wanted = SQLITE_KINDS[expect]
            for kind, (name, signature, option) in SQLITE_KINDS.items():
                if kind != expect and signature <= tables and not wanted[1] <= tables:
                    raise ConfigError(f"{what}: {path} is {name}, not {wanted[0]} (pass it as {option})")
        if write:
            try:
                with open(path, "r+b"):
                    pass
            except OSError as exc:
                raise ConfigError(f"{what}: cannot write {path} ({exc.strerror or exc})") from None
    if write:
        _writable_folder(path.parent, what)  # sqlite writes its journal beside the file


def _check_server(uri: str, what: str, timeout: float | None = None) -> None:
    """Refuse an HTTP tracking server that does not answer (MLflow's client would retry for minutes),
    or one that answers but is not MLflow (its client would fail with a long traceback): MLflow
    answers an experiment lookup with JSON, an experiment or an ``error_code``. The lookup may take a
    while on a server's first request (it opens its store then): a server that answers ``/health``
    but not the lookup in time is left to MLflow's own client. ``timeout``: MLflow's own request
    timeout (``MLFLOW_HTTP_REQUEST_TIMEOUT``, 10 s where unset: :data:`SERVER_RETRIES`)."""
    if timeout is None:
        timeout = float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", SERVER_RETRIES["MLFLOW_HTTP_REQUEST_TIMEOUT"]))
    shown = redact_uri(uri)
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout):
            pass
    except urllib.error.HTTPError:
        pass  # something answers: the lookup below tells whether it is MLflow
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConfigError(
            f"{what} {shown}: no MLflow server answers ({reason}); start one with `mlflow server --host "
            f"127.0.0.1 --port 5000` and pass --tracking-uri http://127.0.0.1:5000"
        ) from None
    probe = f"{uri.rstrip('/')}/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default"
    try:
        with urllib.request.urlopen(probe, timeout=3 * timeout) as answer:
            status, body = answer.status, answer.read(65536)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403, 407):
            return  # an authenticating server or proxy: MLflow's own errors (with credentials) say more
        status, body = exc.code, exc.read(65536)
    except (urllib.error.URLError, OSError):
        return  # it answered /health but is slow to look up: MLflow's client, with its retries, decides
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not ({"experiment", "error_code"} & answer.keys()):
        raise ConfigError(f"{what} {shown}: the server answers (HTTP {status}) but is not an MLflow tracking "
                          "server (no MLflow answer to an experiment lookup); check the host, port and path")


def check_store(uri: str, *, write: bool = True) -> None:
    """Probe the tracking store at ``uri`` before anything runs (see the module docstring): a
    :class:`ConfigError` of one line naming the store, else nothing. Nothing is created."""
    what = "tracking store"
    refuse_plain_sqlite_path(uri, "tracking URI")
    if (db := sqlite_file(uri)) is not None:
        check_sqlite_file(db, what, write=write, expect="mlflow")
    elif uri.startswith(("http://", "https://")):
        _check_server(uri, what)
    elif write and (uri.startswith("file:") or "://" not in uri):
        folder = Path(unquote(uri.removeprefix("file://").removeprefix("file:")))
        _writable_folder(folder, what)
    elif "://" in uri and not uri.startswith("file:"):
        mlflow_client(uri)  # another scheme: one MLflow cannot serve is a ConfigError; nothing local is created


STORE_LOCK_TIMEOUT = 120.0
"""Seconds a process waits for an embedded store's lock (held for a store's creation, or a claim)."""


def store_lock(uri: str) -> AbstractContextManager[Any]:
    """The lock of an embedded store (``<file>.lock`` beside an sqlite file, ``<folder>.lock`` beside
    a folder store), shared by every recurbench process on this machine: held to create the store and
    to claim a configuration (check the store, open the run). A server store has none (it is a no-op
    there): a claim there is taken through the server (:meth:`MlflowTracker.take_claim`)."""
    if (db := sqlite_file(uri)) is not None:
        path = db.parent / f"{db.name}.lock"
    elif uri.startswith("file:") or "://" not in uri:
        folder = Path(unquote(uri.removeprefix("file://").removeprefix("file:"))).absolute()
        path = folder.parent / f"{folder.name}.lock"
    else:
        return nullcontext()
    return _StoreLock(path)


class _StoreLock:
    """A :class:`filelock.FileLock` whose timeout is one line naming the lock file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = FileLock(path, timeout=STORE_LOCK_TIMEOUT)

    def __enter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.lock.acquire()
        except Timeout:
            raise ConfigError(f"tracking store: another process has held its lock {self.path} for "
                              f"{STORE_LOCK_TIMEOUT:.0f} s") from None

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def prepare_store(uri: str) -> None:
    """Create an embedded store that does not exist yet, under its lock (:func:`store_lock`): a new
    sqlite store is built (MLflow's schema and migrations) in a file beside it and moved into place,
    so a crash in the middle leaves no half-created store, and a process that waited finds it made."""
    import sqlalchemy  # noqa: PLC0415 - with MLflow: 1.5 s to import, the CLI's store checks and --help do without
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

    db = sqlite_file(uri)
    if db is None:
        if uri.startswith("file:") or "://" not in uri:
            with store_lock(uri):  # MLflow's folder store makes its default experiment on creation
                mlflow_client(uri).search_experiments(max_results=1)
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    if db.is_file() and db.stat().st_size:
        return
    with store_lock(uri):
        if db.is_file() and db.stat().st_size:
            return  # another process made it while this one waited
        aside = db.with_name(f".{db.name}.creating")
        aside.unlink(missing_ok=True)  # a creation that crashed
        aside_uri = f"sqlite:///{aside.absolute()}"
        # The file aside is thrown away if anything fails, so its ~200 migration steps need no fsync
        # each (8.7 s -> ~3 s on a loaded 2-core machine); the finished file is synced once, then moved.
        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", _unsynced)
        try:
            store = SqlAlchemyStore(aside_uri, (db.parent / "mlartifacts").absolute().as_uri())
            store.engine.dispose()
            with open(aside, "rb+") as f:
                os.fsync(f.fileno())
        except BaseException:  # a failure, Ctrl-C: nothing is left (a kill outright leaves the file aside)
            aside.unlink(missing_ok=True)
            raise
        finally:
            sqlalchemy.event.remove(sqlalchemy.engine.Engine, "connect", _unsynced)
            getattr(SqlAlchemyStore, "_engine_map", {}).pop(aside_uri, None)
        os.replace(aside, db)
        folder = os.open(db.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def _unsynced(connection: Any, _record: Any) -> None:
    connection.execute("PRAGMA synchronous = OFF")
    connection.execute("PRAGMA journal_mode = MEMORY")


SERVER_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                  "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""MLflow's HTTP retries for a tracking server, where the environment does not set them: a server that
stopped answering fails a request within about 10 s (refused) to 50 s (hung), where MLflow's own
defaults (7 retries, backoff 2, 120 s timeout) wait about 290 s for each."""
STOPPING_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
"""While the command stops (SIGTERM, Ctrl-C): one try of 5 s at most per write."""


class StoreUnreachable(RecurbenchError):
    """The tracking server stopped answering during the command."""


@contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class ServerClient:
    """An ``MlflowClient`` of a tracking server that fails fast once the server has stopped answering:
    the first request that runs out of retries raises :class:`StoreUnreachable` naming the server, and
    so does every later call, at once (the runs are then left RUNNING: their owner, this process, is
    gone when the next driver looks). While the command stops, each request is tried once."""

    lost: ClassVar[list[str]] = []
    """What every client of this process that lost its server said (the command's stop line reads it)."""

    def __init__(self, client: Any, uri: str) -> None:
        self._client = client
        self._uri = uri
        self._lost: str | None = None
        for key, value in SERVER_RETRIES.items():
            os.environ.setdefault(key, value)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        return self._guarded(attr) if callable(attr) else attr

    def _guarded(self, method: Any) -> Any:
        import requests  # noqa: PLC0415 - MLflow's HTTP client, imported with it

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._lost is not None:
                raise StoreUnreachable(self._lost)
            try:
                with _environment(STOPPING_RETRIES) if stop_signal() is not None else nullcontext():
                    return method(*args, **kwargs)
            except Exception as exc:
                cause = exc.__cause__ or exc.__context__
                if not isinstance(exc, requests.RequestException) and not isinstance(cause, requests.RequestException):
                    raise
                text = str(cause or exc)
                errno = re.search(r"\[Errno -?\d+\] [^'\"()]+", text)  # urllib3 wraps it in three layers
                reason = errno.group(0).strip() if errno else type(cause or exc).__name__
                self._lost = (f"tracking server {redact_uri(self._uri)} stopped answering ({reason}); the runs "
                              "in progress are left RUNNING, and the next `recurbench run` on this host ends them")
                ServerClient.lost.append(self._lost)
                raise StoreUnreachable(self._lost) from None

        return call


def mlflow_client(uri: str) -> Any:
    """``MlflowClient(uri)``; a URI MLflow cannot serve (an unknown scheme, a missing driver) is a
    :class:`ConfigError` naming it instead of MLflow's traceback."""
    from mlflow.exceptions import MlflowException  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without
    from mlflow.tracking import MlflowClient  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

    try:
        return MlflowClient(tracking_uri=uri)
    except (MlflowException, ImportError) as exc:
        shown = redact_uri(uri)
        raise ConfigError(f"tracking URI {shown!r}: {str(exc).strip().replace(uri, shown)}") from None


def redact_uri(uri: str) -> str:
    """``uri`` with the password of its ``user:password@`` part replaced by ``***`` (for messages)."""
    return re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", uri, count=1)


def now_ms() -> int:
    """The time now in milliseconds since the epoch, as MLflow stamps metrics."""
    return int(time.time() * 1000)


class MlflowRun(RunHandle):
    def __init__(self, client: Any, run_id: str) -> None:
        self.client = client
        self.run_id = run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

        items = [Param(k, param_value(v)) for k, v in flatten(params).items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None,
                    timestamp_ms: int | None = None) -> None:
        """``timestamp_ms``: the points' time (now by default); the store keeps one copy of a point
        logged twice with the same time, step and value."""
        from mlflow.entities import Metric  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

        now = now_ms() if timestamp_ms is None else timestamp_ms
        items = [
            Metric(k, float(v), now, int(step or 0))
            for k, v in metrics.items()
            if v is not None
        ]
        for i in range(0, len(items), 500):
            self.client.log_batch(self.run_id, metrics=items[i : i + 500])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)


class MlflowTracker(Tracker):
    """Tracks to MLflow. The store is probed (:func:`check_store`) and opened (and, for the default
    embedded one, ``results/`` created) on first use, so a command that fails validation before its
    first run writes nothing. Picklable: a copy opens its own client (a Ray task's, say)."""

    def __init__(self, tracking_uri: str | None = None, *, write: bool = True) -> None:
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        self.write = write
        self._experiments: dict[str, str] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"tracking_uri": self.tracking_uri, "write": self.write, "_experiments": dict(self._experiments)}

    @functools.cached_property
    def client(self) -> Any:
        check_store(self.tracking_uri, write=self.write)
        if self.write:
            prepare_store(self.tracking_uri)
        client = mlflow_client(self.tracking_uri)
        return ServerClient(client, self.tracking_uri) if self.tracking_uri.startswith(("http://", "https://")) else client

    def open(self) -> None:
        self.client  # noqa: B018 - opens the store

    def experiment_id(self, experiment: str) -> str:
        if experiment not in self._experiments:
            found = self.client.get_experiment_by_name(experiment)
            if found is not None:
                self._experiments[experiment] = found.experiment_id
            else:
                location = None
                if (db := sqlite_file(self.tracking_uri)) is not None:
                    # Artifacts beside the database (MLflow would otherwise use ./mlruns of the cwd).
                    location = (db.parent / "mlartifacts" / experiment).resolve().as_uri()
                try:
                    self._experiments[experiment] = self.client.create_experiment(experiment,
                                                                                  artifact_location=location)
                except Exception as exc:  # another driver created it first (MLflow's RESOURCE_ALREADY_EXISTS)
                    if (found := self.client.get_experiment_by_name(experiment)) is None:
                        raise exc from None
                    self._experiments[experiment] = found.experiment_id
        return self._experiments[experiment]

    def _resume(self, run_id: str) -> RunHandle:
        return MlflowRun(self.client, run_id)

    def run_status(self, run_id: str) -> str | None:
        from mlflow.exceptions import MlflowException  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return None
        return None if run.info.lifecycle_stage == "deleted" else run.info.status

    def read_artifact(self, run_id: str, path: str) -> bytes | None:
        from mlflow.exceptions import MlflowException  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

        folder = path.rpartition("/")[0] or None
        try:
            listed = {f.path for f in self.client.list_artifacts(run_id, folder)}
        except (MlflowException, OSError):  # no such run, or its artifact folder gone
            return None
        if path not in listed:
            return None
        with tempfile.TemporaryDirectory() as tmp, _environment({"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}):
            return Path(self.client.download_artifacts(run_id, path, tmp)).read_bytes()

    def withdraw(self, run_id: str, reason: str) -> None:
        """Delete a claim that lost to another driver's (MLflow keeps it, marked deleted, out of searches)."""
        self.client.log_batch(run_id, tags=[_tag("error", reason)])
        self.client.set_terminated(run_id, status="KILLED")
        self.client.delete_run(run_id)

    def last_claim(self, key: str) -> tuple[int, dict[str, str]] | None:
        from mlflow.entities import ViewType  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

        prefix = _claim_name(key, "")
        found: list[Any] = []
        token = None
        while True:  # deleted experiments too: a claim is deleted once taken
            page = self.client.search_experiments(view_type=ViewType.ALL, max_results=1000, page_token=token,
                                                  filter_string=f"name LIKE '{prefix}%'")
            found.extend(page)
            token = page.token
            if not token:
                break
        claims = [(int(e.name[len(prefix):]), e) for e in found if e.name[len(prefix):].isdigit()]
        if not claims:
            return None
        generation, experiment = max(claims, key=lambda c: c[0])
        return generation, _claim_tags(experiment)

    def take_claim(self, key: str, generation: int, holder: Mapping[str, str]) -> dict[str, str]:
        """A claim is an experiment named ``recurbench-claim/<key>/<generation>``, its holder in the
        experiment's tags (written in the same transaction). MLflow's tracking database keeps
        experiment names unique (a unique constraint on the table), so of the drivers that create one
        name, exactly one succeeds and the others get RESOURCE_ALREADY_EXISTS; the name stays taken
        after the taker deletes the experiment, which keeps claims out of every list of experiments.
        (A server on a folder store checks names before it writes: not atomic; use a database.)"""
        from mlflow.exceptions import MlflowException  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

        name = _claim_name(key, str(generation))
        try:
            self.client.create_experiment(name, tags=dict(holder))
        except MlflowException as exc:  # taken first (or a retried request of this one that had landed)
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        experiment = self.client.get_experiment_by_name(name)
        taken = _claim_tags(experiment)
        if taken == dict(holder) and experiment.lifecycle_stage == "active":
            self.client.delete_experiment(experiment.experiment_id)
        return taken

    def _start(self, experiment: str, name: str, tags: dict[str, str], parent_id: str | None) -> RunHandle:
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

        if parent_id is not None:
            tags = {**tags, MLFLOW_PARENT_RUN_ID: parent_id}
        run = self.client.create_run(self.experiment_id(experiment), run_name=name, tags=tags)
        return MlflowRun(self.client, run.info.run_id)

    def _end(self, run: RunHandle, status: str) -> None:
        self.client.set_terminated(run.run_id, status=status)

    def runs_tagged(self, experiment: str, key: str, value: str) -> list[str]:
        """The ids of the runs of ``experiment`` (any status) whose tag ``key`` is ``value``, newest first."""
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            return []
        return [r.info.run_id for r in search_all_runs(self.client, found.experiment_id, f"tags.`{key}` = '{value}'")]

    def stored_runs(self, experiment: str, tags: Mapping[str, str], status: str = "FINISHED", *,
                    parents: bool = False) -> list[RunRecord]:
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; expected one of {', '.join(RUN_STATUSES)}")
        if (db := sqlite_file(self.tracking_uri)) is not None and not db.is_file():
            return []  # reading does not create a store
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            return []
        # Tags whose text needs no quoting are filtered by the store too; every tag is compared here.
        plain = [f"tags.`{k}` = '{v}'" for k, v in tags.items() if re.fullmatch(r"[\w.\-]+", f"{k}{v}")]
        runs = search_all_runs(self.client, found.experiment_id, " and ".join([f"attributes.status = '{status}'", *plain]))
        return [r for r in map(run_record, runs) if r.status == status and _selected(r.tags, tags, parents)]

    def end_stale(
        self, experiment: str, tags: Mapping[str, str], reason: str, *, status: str = "FAILED",
        parent_id: str | None = None,
    ) -> list[str]:

        ids = [r.run_id for r in self.stored_runs(experiment, tags, "RUNNING")
               if parent_id is None or r.parent_id == parent_id]
        return self.end_runs(ids, reason, status=status)

    def end_runs(self, run_ids: Sequence[str], reason: str, *, status: str = "FAILED") -> list[str]:
        from mlflow.entities import RunTag  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

        ended = []
        for run_id in run_ids:
            if self.client.get_run(run_id).info.status == "RUNNING":
                self.client.log_batch(run_id, tags=[RunTag("error", reason)])
                self.client.set_terminated(run_id, status=status)
                ended.append(run_id)
        return ended


CLAIM_PREFIX = "recurbench-claim/"
"""The experiments that stand for claims (:meth:`MlflowTracker.take_claim`), all deleted once taken."""


def _claim_name(key: str, generation: str) -> str:
    return f"{CLAIM_PREFIX}{key}/{generation}"


def _claim_tags(experiment: Any) -> dict[str, str]:
    """A claim's holder: its experiment's tags, those MLflow may add itself (``mlflow.*``) aside."""
    return {k: v for k, v in experiment.tags.items() if not k.startswith("mlflow.")}


def _tag(key: str, value: str) -> Any:
    from mlflow.entities import RunTag  # noqa: PLC0415 - MLflow: 1.5 s to import, the CLI's store checks and --help do without

    return RunTag(key, value)


def _selected(run_tags: Mapping[str, str], tags: Mapping[str, str], parents: bool) -> bool:
    """Whether a run with ``run_tags`` carries every tag in ``tags`` and is a parent run (``parents``)
    or not."""
    return (run_tags.get("role") == "parent") == parents and all(run_tags.get(k) == v for k, v in tags.items())


def run_record(run: Any) -> RunRecord:
    """An MLflow run as a :class:`RunRecord`."""
    return RunRecord(
        run_id=run.info.run_id,
        name=run.info.run_name or run.data.tags.get("mlflow.runName", run.info.run_id),
        status=run.info.status,
        start_time=int(run.info.start_time or 0),
        tags=dict(run.data.tags),
        params=dict(run.data.params),
        metrics=dict(run.data.metrics),
        parent_id=run.data.tags.get(PARENT_TAG),
    )


def search_all_runs(client: Any, experiment_id: str, filter_string: str = "") -> list[Any]:
    """Every run of the experiment matching ``filter_string``, newest first (all of MLflow's pages)."""
    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string=filter_string, max_results=1000,
                                  order_by=["attributes.start_time DESC"], page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def make_tracker(tracking_uri: str | None = None, *, enabled: bool = True, write: bool = True) -> Tracker:
    """The tracker the CLI uses: MLflow at ``tracking_uri`` (or the default), or memory if disabled.
    ``write=False``: a reader (``compare``, ``report``, a dry run), probed as such."""
    return MlflowTracker(tracking_uri, write=write) if enabled else MemoryTracker()
