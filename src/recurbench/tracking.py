"""Experiment tracking: MLflow for real runs, an in-memory tracker for tests.

Conventions (every suite, study and benchmark follows them):

* one MLflow experiment per suite (``recurbench-<suite>``), a parent run per invocation and a nested
  run per configuration/seed (or per Optuna trial);
* standard tags: ``suite``, ``profile``, ``model`` or ``agent``, ``dataset`` or ``env``, ``seed``,
  ``recurbench_version``, ``git_commit`` (when the code runs from a git checkout), ``device``;
* a run whose body raises is ended ``FAILED`` with the error in the ``error`` tag (``KILLED`` on
  Ctrl-C), and the exception propagates: a crash never leaves a run silently RUNNING or lost;
* every run is tagged with its process (``host``, ``pid``, ...: :mod:`recurbench.processes`). A
  process killed outright (SIGKILL, out of memory) cannot close its runs, so the next process that
  tracks to the same experiment on that machine marks such runs ``FAILED`` with an ``error`` tag
  saying so (:func:`mark_lost_runs`), and comparisons show them as ``LOST`` until then;
* while a run is open, a thread of its process rewrites its ``heartbeat`` tag every minute, so that
  a run whose process cannot be checked from here (another machine, another container) and whose
  heartbeat stopped reads as ``LOST`` too (never written: it may only be paused).

Runs are read back as :class:`RunRecord` (latest metric values, params as logged text):
:meth:`Tracker.stored_runs` for ``recurbench run --skip-finished``, and
:mod:`recurbench.reporting.runs` for comparisons.

The default store is embedded: ``sqlite:///results/mlflow.db`` with artifacts under
``results/mlartifacts``. ``--tracking-uri`` (or ``MLFLOW_TRACKING_URI``) selects any other store.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import tempfile
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import recurbench
from recurbench.errors import ConfigError
from recurbench.processes import (
    HEARTBEAT_TAG,
    heartbeat_stale,
    lost_reason,
    process_gone,
    process_tags,
)
from recurbench.runtime import allocator

RESULTS_DIR = Path("results")
DEFAULT_TRACKING_URI = "sqlite:///results/mlflow.db"
EXPERIMENT_PREFIX = "recurbench-"
_MAX_PARAM_CHARS = 6000


def experiment_name(suite: str) -> str:
    return f"{EXPERIMENT_PREFIX}{suite}"


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings become dotted keys (``model.d_model``), the form MLflow params take."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


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


class RunWithdrawn(Exception):  # noqa: N818 - not an error: the run yields to another
    """Raised inside ``with tracker.run(...)`` to take the run back: it is deleted from the store
    instead of being ended (it holds no result), and the exception propagates. ``holder``: the run
    it yielded to (a claim lost to another process)."""

    def __init__(self, holder: str) -> None:
        super().__init__(f"withdrawn in favour of run {holder}")
        self.holder = holder


@dataclass(frozen=True)
class RunRecord:
    """One tracked run read back: its latest metric values, tags and params (as the logged text)."""

    run_id: str
    name: str
    status: str
    start_time: int
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]
    parent_id: str | None

    @property
    def seed(self) -> int | None:
        value = self.tags.get("seed", self.params.get("seed"))
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None


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
    """Opens runs. ``with tracker.run(...) as run:`` ends the run FINISHED, or FAILED if it raises."""

    @abstractmethod
    def _start(self, experiment: str, name: str, tags: dict[str, str], parent_id: str | None) -> RunHandle: ...

    @abstractmethod
    def _end(self, run: RunHandle, status: str) -> None: ...

    @abstractmethod
    def _discard(self, run: RunHandle) -> None:
        """Remove a run that holds no result (:class:`RunWithdrawn`) from the store."""

    def open(self) -> None:  # noqa: B027 - a no-op unless the tracker has a store to open
        """Open the store now (a bad URI fails here), e.g. before a command writes elsewhere."""

    @property
    def lost_runs(self) -> list[str]:
        """Names of earlier runs this tracker marked FAILED because their process was gone."""
        return []

    def stored_runs(self, experiment: str, tags: Mapping[str, str], status: str = "FINISHED") -> list[RunRecord]:
        """The runs of ``experiment`` in ``status`` (parent runs aside) carrying every tag in ``tags``,
        newest first; [] when the experiment does not exist yet. ``RUNNING`` leaves out the runs whose
        process is surely gone (they read as ``LOST``: :func:`run_record`)."""
        return []

    @contextmanager
    def run(
        self,
        name: str,
        *,
        experiment: str,
        tags: Mapping[str, Any] | None = None,
        parent: RunHandle | str | None = None,
    ) -> Iterator[RunHandle]:
        """``parent``: the parent run, or its id (e.g. a study's parent run seen from a worker process)."""
        parent_id = parent if isinstance(parent, str) or parent is None else parent.run_id
        tags = {**process_tags(), HEARTBEAT_TAG: str(_now_ms()), **{k: str(v) for k, v in (tags or {}).items()}}
        handle = self._start(experiment, name, tags, parent_id)
        heartbeat = _Heartbeat(handle)
        heartbeat.start()
        try:
            try:
                yield handle
            finally:
                heartbeat.stop()
        except RunWithdrawn:
            self._discard(handle)
            raise
        except KeyboardInterrupt as exc:
            handle.set_tags({"error": f"KeyboardInterrupt: {exc}" if str(exc) else "KeyboardInterrupt"})
            self._end(handle, "KILLED")
            raise
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}"
            handle.set_tags({"error": message[:5000], "error_traceback": traceback.format_exc()[-5000:]})
            self._end(handle, "FAILED")
            raise
        else:
            self._end(handle, "FINISHED")


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Heartbeat(threading.Thread):
    """Rewrites a run's ``heartbeat`` tag every :data:`recurbench.processes.HEARTBEAT_S` seconds
    until stopped; a write that fails (a store busy for a moment) waits for the next beat."""

    def __init__(self, handle: RunHandle) -> None:
        super().__init__(name=f"heartbeat-{handle.run_id}", daemon=True)
        self.handle = handle
        self._stopped = threading.Event()

    def run(self) -> None:
        from recurbench import processes

        while not self._stopped.wait(processes.HEARTBEAT_S):
            try:
                self.handle.set_tags({HEARTBEAT_TAG: str(_now_ms())})
            except Exception:  # noqa: BLE001, S110 - the next beat tries again
                pass

    def stop(self) -> None:
        self._stopped.set()
        self.join()


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
        self.discarded: list[RecordedRun] = []
        self._started = 0

    def _start(self, experiment: str, name: str, tags: dict[str, str], parent_id: str | None) -> RunHandle:
        run = RecordedRun(f"run-{self._started}", experiment, name, dict(tags), parent_id, start_time=self._started)
        self._started += 1
        self.runs.append(run)
        return run

    def _end(self, run: RunHandle, status: str) -> None:
        assert isinstance(run, RecordedRun)
        run.status = status

    def _discard(self, run: RunHandle) -> None:
        assert isinstance(run, RecordedRun)
        self.runs.remove(run)
        self.discarded.append(run)

    def children(self, parent: RunHandle) -> list[RecordedRun]:
        return [r for r in self.runs if r.parent_id == parent.run_id]

    def stored_runs(self, experiment: str, tags: Mapping[str, str], status: str = "FINISHED") -> list[RunRecord]:
        return [
            RunRecord(r.run_id, r.name, r.status, r.start_time, dict(r.tags),
                      {k: param_value(v) for k, v in r.params.items()},
                      {k: values[-1][1] for k, values in r.metrics.items()}, r.parent_id)
            for r in reversed(self.runs)
            if r.experiment == experiment and r.status == status and _is_nested_with(r.tags, tags)
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


@contextmanager
def sqlite_store_lock(uri: str) -> Iterator[None]:
    """Hold an exclusive lock on the folder of an sqlite store's file (a no-op for other stores, or
    where ``fcntl`` is missing) while opening it. MLflow and Optuna create or upgrade their tables when
    they open a store, and two processes doing that at once fail ("table ... already exists")."""
    try:
        import fcntl
    except ImportError:  # Windows
        fcntl = None  # type: ignore[assignment]
    db = sqlite_file(uri)
    if fcntl is None or db is None or not db.parent.is_dir():
        yield
        return
    fd = os.open(db.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def mlflow_client(uri: str) -> Any:
    """``MlflowClient(uri)``, opened under :func:`sqlite_store_lock`; a URI MLflow cannot serve (an unknown
    scheme, a missing driver) is a :class:`ConfigError` naming it instead of MLflow's traceback."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        with sqlite_store_lock(uri):
            return MlflowClient(tracking_uri=uri)
    except (MlflowException, ImportError) as exc:
        shown = redact_uri(uri)
        raise ConfigError(f"tracking URI {shown!r}: {str(exc).strip().replace(uri, shown)}") from None


def redact_uri(uri: str) -> str:
    """``uri`` with the password of its ``user:password@`` part replaced by ``***`` (for messages)."""
    return re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", uri, count=1)


class MlflowRun(RunHandle):
    def __init__(self, client: Any, run_id: str) -> None:
        self.client = client
        self.run_id = run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, param_value(v)) for k, v in flatten(params).items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [
            Metric(k, float(v), now, int(step or 0))
            for k, v in metrics.items()
            if v is not None
        ]
        for i in range(0, len(items), 500):
            self.client.log_batch(self.run_id, metrics=items[i : i + 500])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)


def param_value(value: Any) -> str:
    """``value`` as the text an MLflow param stores (lists, tuples and mappings as JSON)."""
    text = json.dumps(value) if isinstance(value, (list, tuple, dict)) else str(value)
    return text if len(text) <= _MAX_PARAM_CHARS else text[: _MAX_PARAM_CHARS - 3] + "..."


class MlflowTracker(Tracker):
    """Tracks to MLflow. The store is opened (and, for the default embedded one, ``results/`` created)
    on first use, so a command that fails validation before its first run writes nothing."""

    def __init__(self, tracking_uri: str | None = None) -> None:
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        self._experiments: dict[str, str] = {}
        self._lost: list[str] = []

    @property
    def lost_runs(self) -> list[str]:
        return list(self._lost)

    @functools.cached_property
    def client(self) -> Any:
        if self.tracking_uri == DEFAULT_TRACKING_URI:
            RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        return mlflow_client(self.tracking_uri)

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
                    self._experiments[experiment] = self.client.create_experiment(
                        experiment, artifact_location=location
                    )
                except Exception:  # another worker created it first
                    found = self.client.get_experiment_by_name(experiment)
                    if found is None:
                        raise
                    self._experiments[experiment] = found.experiment_id
            self._lost += mark_lost_runs(self.client, self._experiments[experiment])
        return self._experiments[experiment]

    def _start(self, experiment: str, name: str, tags: dict[str, str], parent_id: str | None) -> RunHandle:
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        if parent_id is not None:
            tags = {**tags, MLFLOW_PARENT_RUN_ID: parent_id}
        run = self.client.create_run(self.experiment_id(experiment), run_name=name, tags=tags)
        return MlflowRun(self.client, run.info.run_id)

    def _end(self, run: RunHandle, status: str) -> None:
        self.client.set_terminated(run.run_id, status=status)

    def _discard(self, run: RunHandle) -> None:
        self.client.set_terminated(run.run_id, status="KILLED")
        self.client.delete_run(run.run_id)  # MLflow keeps it, deleted, until `mlflow gc`

    def stored_runs(self, experiment: str, tags: Mapping[str, str], status: str = "FINISHED") -> list[RunRecord]:
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; expected one of {', '.join(RUN_STATUSES)}")
        if (db := sqlite_file(self.tracking_uri)) is not None and not db.is_file():
            return []  # reading does not create a store
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            return []
        # Tags are compared here rather than in MLflow's filter syntax, which would need their values quoted.
        runs = search_all_runs(self.client, found.experiment_id, f"attributes.status = '{status}'")
        return [r for r in map(run_record, runs) if r.status == status and _is_nested_with(r.tags, tags)]


def _is_nested_with(run_tags: Mapping[str, str], tags: Mapping[str, str]) -> bool:
    return run_tags.get("role") != "parent" and all(run_tags.get(k) == v for k, v in tags.items())


def run_record(run: Any) -> RunRecord:
    """An MLflow run as a :class:`RunRecord`; a RUNNING run whose process is surely gone, or whose
    heartbeat stopped (:func:`recurbench.processes.heartbeat_stale`), reads as ``LOST``, with the
    reason in its ``error`` tag (the store is not changed)."""
    status, tags = run.info.status, dict(run.data.tags)
    if status == "RUNNING" and process_gone(tags, run.info.start_time):
        status, tags["error"] = "LOST", lost_reason(tags)
    elif status == "RUNNING" and heartbeat_stale(tags, now := _now_ms()):
        status, tags["error"] = "LOST", lost_reason(tags, now)
    return RunRecord(
        run_id=run.info.run_id,
        name=run.info.run_name or run.data.tags.get("mlflow.runName", run.info.run_id),
        status=status,
        start_time=int(run.info.start_time or 0),
        tags=tags,
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


def mark_lost_runs(client: Any, experiment_id: str) -> list[str]:
    """Mark FAILED every RUNNING run of the experiment whose process is surely gone
    (:func:`recurbench.processes.process_gone`), with the reason in its ``error`` tag; their names."""
    from mlflow.entities import RunTag

    lost: list[str] = []
    for run in search_all_runs(client, experiment_id, "attributes.status = 'RUNNING'"):
        tags = run.data.tags
        if process_gone(tags, run.info.start_time):
            client.log_batch(run.info.run_id, tags=[RunTag("error", lost_reason(tags))])
            client.set_terminated(run.info.run_id, status="FAILED")
            lost.append(run.info.run_name or run.info.run_id)
    return lost


def make_tracker(tracking_uri: str | None = None, *, enabled: bool = True) -> Tracker:
    """The tracker the CLI uses: MLflow at ``tracking_uri`` (or the default), or memory if disabled."""
    return MlflowTracker(tracking_uri) if enabled else MemoryTracker()
