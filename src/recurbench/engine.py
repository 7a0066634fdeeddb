"""Where runs execute: in this process, one at a time (``serial``), or as Ray tasks (``ray``).

``recurbench run`` and ``recurbench tune`` take ``--engine serial|ray``:

* ``serial`` (the default) runs everything in the calling process, in order.
* ``ray`` runs each unit of work (a configuration x seed of a suite; a study worker of ``tune``) as a
  Ray task. Without ``--address`` the command starts a local Ray instance of its own, sized to
  ``--workers`` x ``--cpus-per-run`` CPUs, and stops it at the end, whatever other Ray heads, marker
  files (``ray_current_cluster``) or ``$RAY_ADDRESS`` this machine has: that instance listens on
  loopback only and takes Ray's token authentication. ``--address HOST:PORT`` (or ``ray://HOST:PORT``,
  Ray's client) attaches to that cluster instead, the only way to attach. Either way one line on stderr
  names the instance. ``--cpus-per-run`` sets each task's CPU reservation and torch's thread count in
  it; ``--gpus-per-run`` (fractions allowed) its GPU share, and the task trains on the GPU Ray assigned.

Requests that cannot be met end at once with one line: an address where nothing answers (a bounded
connect, naming the address), a ``ray://`` address without Ray's client installed, and a run's
``--cpus-per-run``/``--gpus-per-run`` that no node of the instance has (checked after it starts,
before any task is submitted; each such task would wait forever).

Failures: a task whose worker dies (SIGKILL, the out-of-memory killer, a node lost) is retried by Ray
up to ``max_retries`` times; each attempt first ends FAILED the run its dead predecessor left RUNNING
and, in a suite that saves checkpoints, continues from that run's newest one.
When the retries run out the driver ends it FAILED with Ray's reason. An exception in the training code
is not retried: the run ends FAILED with the error, as in ``serial``. Ctrl-C or SIGTERM of the driver
cancels the tasks and ends their runs KILLED.

Tracking: the driver owns the parent run. With an embedded store (sqlite, a folder), every write of the
session, the driver's and the tasks', goes through one Ray actor (:class:`StoreWriter`) that holds the
store's only client, so N workers cannot lock each other out of the database. Such a store lives on one
machine, so it is refused with a cluster address: workers then write straight to an MLflow server.

Ray is an optional dependency (``pip install 'recurbench[ray]'``); it is imported only here, and only
when ``--engine ray`` is asked for.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from recurbench.errors import ConfigError
from recurbench.plugins import left_out_lines, plugin_paths, said_by_driver
from recurbench.runtime import raise_if_terminated, tune_allocator
from recurbench.tracking import (
    MlflowRun,
    MlflowTracker,
    RunHandle,
    RunRecord,
    Tracker,
    now_ms,
    redact_uri,
    sqlite_file,
)

ENGINES = ("serial", "ray")
INSTALL_RAY = "pip install 'recurbench[ray]'"
LOCAL = "local"
"""``--address local``: a local instance of the command's own, as without ``--address``."""
CONNECT_TIMEOUT_S = 10.0
"""How long an ``--address`` may take to accept a connection before the command gives up on it."""


@dataclass(frozen=True)
class EngineSpec:
    """How to execute: the command line's ``--engine``, ``--workers``, ``--address``,
    ``--cpus-per-run`` and ``--gpus-per-run``."""

    kind: str = "serial"
    workers: int | None = None
    """Tasks at a time (ray). None: as many as the local CPUs allow (``cpus_per_run`` each), or as the
    cluster schedules with an address."""
    address: str | None = None
    """A Ray cluster to attach to (``HOST:PORT`` or ``ray://HOST:PORT``); None or ``local``: a local
    instance started here. ``$RAY_ADDRESS`` is not read: attaching is asked for by name."""
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    max_retries: int = 2
    """Ray's retries of a task whose worker died."""

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, got {self.kind!r}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"--workers must be at least 1, got {self.workers}")
        if self.cpus_per_run <= 0:
            raise ConfigError(f"--cpus-per-run must be positive, got {self.cpus_per_run}")
        if self.gpus_per_run < 0:
            raise ConfigError(f"--gpus-per-run must not be negative, got {self.gpus_per_run}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must not be negative, got {self.max_retries}")
        if self.address == "auto":
            raise ConfigError("--address auto: name the cluster to attach to (--address HOST:PORT, or "
                              "--address \"$RAY_ADDRESS\"); recurbench does not guess it from Ray's marker files")
        if self.kind == "serial":
            given = [flag for flag, value in (("--workers", self.workers if self.workers != 1 else None),
                                              ("--address", self.address),
                                              ("--gpus-per-run", self.gpus_per_run or None),
                                              ("--cpus-per-run", self.cpus_per_run if self.cpus_per_run != 1 else None))
                     if value is not None]
            if given:
                raise ConfigError(f"{', '.join(given)} need{'s' if len(given) == 1 else ''} --engine ray (the serial "
                                  "engine runs one run at a time in this process)")

    @property
    def cluster_address(self) -> str | None:
        """The Ray cluster to attach to, if any (``address``; None for a local instance)."""
        if self.kind != "ray" or self.address in (None, "", LOCAL):
            return None
        return self.address

    @property
    def threads(self) -> int:
        """torch's intra-op threads inside a task: its CPU reservation, at least 1."""
        return max(1, int(self.cpus_per_run))

    def in_flight(self) -> int | None:
        """The most tasks submitted at once: ``workers``; locally without it, the CPUs' share."""
        if self.workers is not None:
            return self.workers
        if self.cluster_address is None:
            return max(1, int((os.cpu_count() or 1) // self.cpus_per_run))
        return None


def import_ray() -> Any:
    """The ``ray`` module, or a one-line :class:`ConfigError` saying how to install it."""
    try:
        import ray  # noqa: PLC0415 - Ray is optional (the ray extra); optional: only --engine ray needs it
    except ImportError:
        raise ConfigError(f"--engine ray needs Ray, which is not installed here: {INSTALL_RAY}") from None
    return ray


def is_local_store(uri: str) -> bool:
    """An embedded tracking store or Optuna storage (a file or folder on this machine)."""
    return sqlite_file(uri) is not None or uri.startswith(("file:", "journal:")) or "://" not in uri


def check_device(spec: EngineSpec, device: str | None) -> None:
    """Under Ray, a GPU ``--device`` needs ``--gpus-per-run``: Ray hides the GPUs from a task that
    reserves none (a task given GPUs trains on the one Ray assigned, :func:`task_device`)."""
    if spec.kind == "ray" and not spec.gpus_per_run and device not in (None, "auto", "cpu"):
        raise ConfigError(f"--device {device} with --engine ray needs --gpus-per-run (Ray hides the GPUs from a "
                          "task that reserves none)")


def check_cluster_store(spec: EngineSpec, uri: str, what: str = "tracking URI") -> None:
    """With a cluster address, refuse a store that lives on this machine's disk: workers on other
    machines cannot share it."""
    if spec.cluster_address is not None and is_local_store(uri):
        raise ConfigError(
            f"{what} {redact_uri(uri)!r} is a file on this machine, which workers on other machines of the "
            f"Ray cluster at {spec.cluster_address} cannot share: start a tracking server (`mlflow server "
            "--host 0.0.0.0 --port 5000 --backend-store-uri sqlite:///mlflow.db`) and pass "
            "--tracking-uri http://HOST:5000" + (" (and a database storage, e.g. postgresql://..., for Optuna)"
                                                   if what != "tracking URI" else "")
        )


# ----------------------------------------------------------------------------------------------
# Tracking through one writer (embedded stores under Ray)


REQUEST_TAG = "recurbench.writer_request"
"""The tag naming the :meth:`WriterTracker._start` call that created a run, so that a retried call
finds its run instead of creating a second one."""


class StoreWriter:
    """Holds the only client of an embedded MLflow store during a Ray session; every run of the
    session is written through it, one call at a time (a Ray actor of this class)."""

    def __init__(self, tracking_uri: str) -> None:
        self.tracker = MlflowTracker(tracking_uri)
        self.tracker.open()

    def start(self, experiment: str, name: str, tags: dict[str, str], parent_id: str | None) -> str:
        """Create the run, or return the one an earlier attempt of this same call created: a call
        retried after the writer's process died between creating the run and answering would
        otherwise open the run twice (``tags`` carries the caller's :data:`REQUEST_TAG`)."""
        if (request := tags.get(REQUEST_TAG)) is not None:
            done = self.tracker.runs_tagged(experiment, REQUEST_TAG, request)
            if done:
                return done[0]
        return self.tracker._start(experiment, name, tags, parent_id).run_id

    def call(self, run_id: str, method: str, *args: Any) -> None:
        getattr(MlflowRun(self.tracker.client, run_id), method)(*args)

    def end(self, run_id: str, status: str) -> None:
        self.tracker._end(MlflowRun(self.tracker.client, run_id), status)

    def end_stale(self, experiment: str, tags: dict[str, str], reason: str, status: str,
                  parent_id: str | None) -> list[str]:
        return self.tracker.end_stale(experiment, tags, reason, status=status, parent_id=parent_id)

    def end_runs(self, run_ids: list[str], reason: str, status: str) -> list[str]:
        return self.tracker.end_runs(run_ids, reason, status=status)

    def stored_runs(self, experiment: str, tags: dict[str, str], status: str, parents: bool = False) -> list[RunRecord]:
        return self.tracker.stored_runs(experiment, tags, status, parents=parents)

    def read_artifact(self, run_id: str, path: str) -> bytes | None:
        return self.tracker.read_artifact(run_id, path)


class WriterRun(RunHandle):
    """A run written through a :class:`StoreWriter` actor. Each call waits for the write, so the
    order of a run's records holds and a failed write raises here."""

    def __init__(self, writer: Any, run_id: str) -> None:
        self.writer = writer
        self.run_id = run_id

    def _call(self, method: str, *args: Any) -> None:
        import ray  # noqa: PLC0415 - Ray is optional (the ray extra)

        ray.get(self.writer.call.remote(self.run_id, method, *args))

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._call("log_params", dict(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        # Stamped here, so that a write retried after the writer's process died stores the same
        # points (the store drops an exact repeat) instead of a second copy of each.
        self._call("log_metrics", dict(metrics), step, now_ms())

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self._call("set_tags", dict(tags))

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        # The writer runs on this machine (an embedded store is refused on a cluster): it reads the file.
        self._call("log_artifact", str(path), artifact_path)


class WriterTracker(Tracker):
    """A :class:`Tracker` whose runs are written by a :class:`StoreWriter` actor; picklable, so Ray
    tasks receive it as an argument."""

    def __init__(self, writer: Any, tracking_uri: str) -> None:
        self.writer = writer
        self.tracking_uri = tracking_uri

    def _get(self, ref: Any) -> Any:
        import ray  # noqa: PLC0415 - Ray is optional (the ray extra)

        return ray.get(ref)

    def _start(self, experiment: str, name: str, tags: dict[str, str], parent_id: str | None) -> RunHandle:
        tags = {**tags, REQUEST_TAG: uuid.uuid4().hex}
        return WriterRun(self.writer, self._get(self.writer.start.remote(experiment, name, tags, parent_id)))

    def _end(self, run: RunHandle, status: str) -> None:
        self._get(self.writer.end.remote(run.run_id, status))

    def _resume(self, run_id: str) -> RunHandle:
        return WriterRun(self.writer, run_id)

    def end_stale(self, experiment: str, tags: Mapping[str, str], reason: str, *, status: str = "FAILED",
                  parent_id: str | None = None) -> list[str]:
        return self._get(self.writer.end_stale.remote(experiment, dict(tags), reason, status, parent_id))

    def end_runs(self, run_ids: Sequence[str], reason: str, *, status: str = "FAILED") -> list[str]:
        return self._get(self.writer.end_runs.remote(list(run_ids), reason, status))

    def stored_runs(self, experiment: str, tags: Mapping[str, str], status: str = "FINISHED", *,
                    parents: bool = False) -> list[RunRecord]:
        return self._get(self.writer.stored_runs.remote(experiment, dict(tags), status, parents))

    def read_artifact(self, run_id: str, path: str) -> bytes | None:
        return self._get(self.writer.read_artifact.remote(run_id, path))


# ----------------------------------------------------------------------------------------------
# Sessions

#: ``on_done(index, result)``: a job returned; ``on_crash(index, reason)``: its retries ran out.
OnDone = Callable[[int, Any], None]
OnCrash = Callable[[int, str], None]


class Session:
    """An open engine: :attr:`tracker` writes every run of the session; :meth:`map` runs jobs."""

    kind = "serial"

    def __init__(self, spec: EngineSpec, tracker: Tracker) -> None:
        self.spec = spec
        self.tracker = tracker

    def map(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], on_done: OnDone,
            on_crash: OnCrash, on_start: Callable[[int], None] | None = None) -> None:
        """Call ``fn(*job)`` for each job, in order, here."""
        for index, job in enumerate(jobs):
            raise_if_terminated()
            if on_start is not None:
                on_start(index)
            on_done(index, fn(*job))


class RaySession(Session):
    kind = "ray"

    def __init__(self, spec: EngineSpec, tracker: Tracker, ray: Any) -> None:
        super().__init__(spec, tracker)
        self.ray = ray

    def map(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], on_done: OnDone,
            on_crash: OnCrash, on_start: Callable[[int], None] | None = None) -> None:
        """Run each job as a Ray task (at most :meth:`EngineSpec.in_flight` at once), reporting each as
        it ends. Ctrl-C or SIGTERM cancels the tasks still queued or running and propagates."""
        ray = self.ray
        # max_calls=1: a fresh worker process per task. A worker kept for the next run would keep its
        # predecessor's peak memory (the tuned allocator returns nothing to the system: 8 GB after a
        # few dozen ltsf runs) and its torch.compile caches; a process start is seconds against minutes.
        remote = ray.remote(max_calls=1)(_in_task).options(
            num_cpus=self.spec.cpus_per_run, num_gpus=self.spec.gpus_per_run,
            max_retries=self.spec.max_retries, retry_exceptions=False,
        )
        cap = self.spec.in_flight() or len(jobs)
        queue = list(enumerate(jobs))
        pending: dict[Any, int] = {}
        try:
            while queue or pending:
                while queue and len(pending) < cap:
                    index, job = queue.pop(0)
                    if on_start is not None:
                        on_start(index)
                    pending[remote.remote(fn, job, self.spec.threads, self.spec.gpus_per_run > 0,
                                          left_out_lines())] = index
                raise_if_terminated()
                # A bounded wait, so that Ctrl-C and SIGTERM are seen between two waits.
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for ref in ready:
                    index = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        on_crash(index, _crash_reason(exc, self.spec.max_retries))
                    else:
                        on_done(index, result)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            if pending:  # let the cancellations land before the runs are ended
                ray.wait(list(pending), num_returns=len(pending), timeout=30)
            raise


def _crash_reason(exc: Exception, retries: int) -> str:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{type(exc).__name__} after {retries} retr{'y' if retries == 1 else 'ies'}: {first}"[:2000]


def _in_task(fn: Callable[..., Any], job: tuple[Any, ...], threads: int, gpu: bool,
             said: Sequence[str] = ()) -> Any:
    """The body of every Ray task: this process's settings, then ``fn(*job)``. ``said``: the plugins'
    left-out lines the driver printed, which this worker's own loading does not print again."""
    import torch  # noqa: PLC0415 - torch: the CLI imports this at start-up, --help must not wait

    said_by_driver(said)
    tune_allocator()
    torch.set_num_threads(threads)
    if gpu:
        os.environ["RECURBENCH_TASK_DEVICE"] = "cuda"  # Ray made the assigned GPU(s) the visible ones
    return fn(*job)


def task_device(device: str | None) -> str | None:
    """The device a job should train on: inside a Ray task given GPUs, the GPU Ray assigned."""
    return os.environ.get("RECURBENCH_TASK_DEVICE") or device


@contextmanager
def open_session(spec: EngineSpec, tracker: Tracker) -> Iterator[Session]:
    """Start (or attach to) the engine for one command; ``tracker`` is the command's store."""
    if spec.kind == "serial":
        yield Session(spec, tracker)
        return
    if not isinstance(tracker, MlflowTracker):
        raise ConfigError("--engine ray needs an MLflow tracking store (the in-memory tracker stays in one process)")
    ray = import_ray()
    check_cluster_store(spec, tracker.tracking_uri)
    if spec.cluster_address is not None:
        check_reachable(spec.cluster_address)  # a dead address is reported before the store is opened
    elif not ray.is_initialized():
        check_fits_here(spec)
    tracker.open()  # a bad store fails here, before Ray starts
    with ray_instance(ray, spec):
        session_tracker: Tracker = tracker
        writer = None
        if is_local_store(tracker.tracking_uri):
            # Restarted, and its calls retried, if its process dies (the writer holds nothing but its
            # client): a killed writer ended the command with a traceback and left its runs RUNNING.
            writer = ray.remote(StoreWriter).options(num_cpus=0, max_restarts=-1,
                                                     max_task_retries=-1).remote(tracker.tracking_uri)
            session_tracker = WriterTracker(writer, tracker.tracking_uri)
        try:
            yield RaySession(spec, session_tracker, ray)
        finally:
            if writer is not None:
                ray.kill(writer)


# ----------------------------------------------------------------------------------------------
# The Ray instance: a local one of the command's own, or the cluster named by --address

LOOPBACK = "127.0.0.1"


def announce(line: str) -> None:
    """The one line that names the Ray instance of a command, on stderr (beside Ray's own messages;
    rich's progress display prints it above its bars)."""
    print(line, file=sys.stderr, flush=True)


@contextmanager
def ray_instance(ray: Any, spec: EngineSpec) -> Iterator[str]:
    """The Ray instance of one command, announced in one line (yielded too) once the requests were
    checked against its nodes: a local instance started here and stopped at the end (:func:`_start_local`),
    the cluster at ``--address`` (:func:`_attach`), or the caller's own (a notebook's, a test's), used
    and left running."""
    if ray.is_initialized():
        where = "the Ray instance this process already runs"
        line = f"Ray: {where} ({_sizes(check_resources(ray, spec, where))}); it is left running"
        announce(line)
        yield line
        return
    # ray.init installs its own SIGTERM handler (sys.exit, then an abort): keep ours, which unwinds
    # like Ctrl-C so that the tasks are cancelled and their runs end KILLED.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with ExitStack() as stack:
        stack.enter_context(_plain_worker_lines())
        try:
            if spec.cluster_address is None:
                elsewhere = os.environ.get("RAY_ADDRESS")  # named in the line, never attached to
                stack.enter_context(_local_only_settings())
                stack.callback(ray.shutdown)  # also after a start that failed half-way
                line = _start_local(ray, spec, elsewhere)
            else:
                stack.callback(ray.shutdown)
                line = _attach(ray, spec, spec.cluster_address)
        finally:
            if threading.current_thread() is threading.main_thread():
                for sig, handler in handlers.items():
                    if handler is not None:
                        signal.signal(sig, handler)
        announce(line)
        yield line


@contextmanager
def _plain_worker_lines() -> Iterator[None]:
    """Ray prints its workers' lines behind a coloured ``(_in_task pid=...)`` prefix: into a log file
    (stderr not a terminal) without the colour codes, unless the user's ``RAY_COLOR_PREFIX`` says."""
    saved = os.environ.get("RAY_COLOR_PREFIX")
    if saved is None and not sys.stderr.isatty():
        os.environ["RAY_COLOR_PREFIX"] = "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("RAY_COLOR_PREFIX", None)


@contextmanager
def _local_only_settings() -> Iterator[None]:
    """Ray's settings, while the command's own instance runs, for an instance nobody else can use.

    * ``RAY_AUTH_MODE=token``: every connection to it, its own workers' included, must carry the token
      of ``~/.ray/auth_token`` (``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH`` where set; Ray writes the file
      if there is none). Ray 2.59+ does this by default for a local instance, except where the user's
      environment says ``RAY_AUTH_MODE=disabled``: that setting is for their clusters, not this one.
    * The node on loopback: Ray binds its servers (GCS, raylet, workers, agents) to 127.0.0.1 only when
      the node's address is loopback, and keeps ``_node_ip_address="127.0.0.1"`` only where it expects
      no multi-node cluster (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` off, the default on macOS and
      Windows). The variable reaches the raylet and the workers; Ray read it into ``ray_constants``
      when this process imported it, hence the patch of that module's copy too.
    * ``RAY_ADDRESS`` removed, so that nothing in the instance attaches elsewhere.
    * Ray's memory monitor off (``RAY_memory_monitor_refresh_ms=0``, unless the user's environment sets
      it): it kills this instance's workers, the training and the store writer, when the *machine* is
      nearly full, whoever fills it. Beside another process that took 20 GB of a 24 GB machine it
      killed both. A worker that itself exhausts the memory is killed by the system's OOM killer instead,
      and retried as any worker that died.
    * ``PYTHONPATH`` extended by the folders this process finds plugins in that a fresh interpreter
      would not search (:func:`recurbench.plugins.plugin_paths`): the workers then load the plugins the
      driver planned with (entry points of a package installed into such a folder, ``module:Class``).
    """
    import ray._private.ray_constants as ray_constants  # noqa: PLC0415 - Ray is optional (the ray extra)
    from ray._raylet import Config  # noqa: PLC0415 - Ray is optional (the ray extra)

    saved_env = {name: os.environ.get(name) for name in ("RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
                                                          "RAY_ADDRESS", "PYTHONPATH", "RAY_worker_niceness",
                                                          "RAY_memory_monitor_refresh_ms")}
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    if extra := plugin_paths():
        os.environ["PYTHONPATH"] = os.pathsep.join([*filter(None, (saved_env["PYTHONPATH"] or "").split(os.pathsep)),
                                                    *extra])
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ.pop("RAY_ADDRESS", None)
    # Ray starts its workers at nice 15 by default; training runs at the priority the command has.
    os.environ.setdefault("RAY_worker_niceness", "0")
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    ray_constants.ENABLE_RAY_CLUSTER = False
    Config.initialize("")  # this process's copy of Ray's settings: it read RAY_AUTH_MODE at import
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        Config.initialize("")


def check_fits_here(spec: EngineSpec) -> None:
    """Refuse a run wider than this machine for a local instance, which is sized to the request: it
    would reserve (and train with, as torch threads) more CPUs than there are, or GPUs that PyTorch
    does not see. Before the store is opened or Ray started (the instance refused it 18 s later, an
    empty store left behind)."""
    cores = os.cpu_count() or 1
    if spec.cpus_per_run > cores:
        raise ConfigError(f"--cpus-per-run {spec.cpus_per_run:g}: this machine has {cores} CPU"
                          f"{'s' if cores != 1 else ''}, fewer than one run would reserve (and train with, as "
                          f"torch threads); give --cpus-per-run {cores} or less, or --address for a cluster")
    if spec.gpus_per_run:
        import torch  # noqa: PLC0415 - only where GPUs are asked for

        gpus = torch.cuda.device_count()
        if spec.gpus_per_run > gpus:
            raise ConfigError(f"--gpus-per-run {spec.gpus_per_run:g}: PyTorch sees {gpus} GPU"
                              f"{'s' if gpus != 1 else ''} on this machine, fewer than one run would reserve; "
                              + (f"give --gpus-per-run {gpus} or less" if gpus else "leave --gpus-per-run out")
                              + ", or --address for a cluster")


def _start_local(ray: Any, spec: EngineSpec, elsewhere: str | None) -> str:
    """Start the command's own instance (``address="local"``: Ray looks at no other head, marker file
    or ``$RAY_ADDRESS``), check that it is protected and that a run fits on it; its line."""
    workers = spec.workers or max(1, int((os.cpu_count() or 1) // spec.cpus_per_run))
    ray.init(address=LOCAL, num_cpus=max(1, round(workers * spec.cpus_per_run)), include_dashboard=False,
             _node_ip_address=LOOPBACK, logging_level=logging.WARNING)
    address = ray.get_runtime_context().gcs_address
    _check_protected(address)
    sizes = _sizes(check_resources(ray, spec, f"the local Ray instance at {address}"))
    note = f"; $RAY_ADDRESS ({elsewhere}) is not used: --address {elsewhere} attaches to it" if elsewhere else ""
    return (f"Ray: a local instance of this command's own at {address} ({sizes}; loopback only, token "
            f"authentication), stopped when it ends{note}")


def _check_protected(address: str) -> None:
    """Refuse to run on a local instance that others could use: token authentication off (Ray's own
    record of the mode) or a node address that is not loopback."""
    try:
        from ray._raylet import AuthenticationMode, get_authentication_mode  # noqa: PLC0415 - Ray is optional
    except ImportError:  # a Ray that moved it: the floor (2.59) has it; RAY_AUTH_MODE=token was set above
        token = True
    else:
        token = get_authentication_mode() == AuthenticationMode.TOKEN
    host = address.rpartition(":")[0]
    if not token or host != LOOPBACK:
        raise ConfigError(f"the local Ray instance at {address} is not protected (token authentication "
                          f"{'on' if token else 'off'}, node address {host}): refusing to run on it")


def _attach(ray: Any, spec: EngineSpec, address: str) -> str:
    """Attach to the cluster at ``address`` after a bounded check that something answers there; its line."""
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise ConfigError(f"--address {address} uses Ray's client, which is not installed here: "
                          "pip install 'ray[client]' (or 'recurbench[ray]', which includes it)")
    check_reachable(address)
    needs_token = (f"the Ray cluster at {address} (--address) refused this command's token (or its lack of one): "
                   "for a cluster with Ray's token authentication, set RAY_AUTH_MODE=token and its token in "
                   "~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN")
    try:
        if not address.startswith("ray://"):
            # Ray's GCS client answers at once, token refused included, where ray.init retries for 20 s.
            from ray._raylet import GcsClient  # noqa: PLC0415 - Ray is optional (the ray extra)

            GcsClient(address=address)
        _init_client_retrying(ray, address)
    except ray.exceptions.AuthenticationError:
        raise ConfigError(needs_token) from None
    except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
        if len(lines) > 1 and lines[1].startswith("Traceback"):  # the server's traceback: its own last line
            first = f"{lines[0]} {lines[-1]}"[:500]
        else:
            first = " ".join(lines[:2] if lines[0].endswith(":") else lines[:1])[:500]
        # Ray's client says only "connection timeout" when the cluster refuses a connection without its token.
        hint = "; if it uses Ray's token authentication, set RAY_AUTH_MODE=token" if (
            address.startswith("ray://") and os.environ.get("RAY_AUTH_MODE") != "token") else ""
        raise ConfigError(f"cannot attach to the Ray cluster at {address} (--address): {first}{hint}") from None
    where = f"the Ray cluster at {address}"
    return f"Ray: attached to {where} (--address: {_sizes(check_resources(ray, spec, where))}); it is left running"


CLIENT_INIT_ATTEMPTS = 3


def _init_client_retrying(ray: Any, address: str) -> None:
    """``ray.init(address)``; for Ray's client, tried again (up to :data:`CLIENT_INIT_ATTEMPTS` in all)
    where its server answered but could not start this client's own server in time ("Initialization
    failure from server"), which a loaded head does now and then. Every other failure is at once."""
    for attempt in range(1, CLIENT_INIT_ATTEMPTS + 1):
        try:
            ray.init(address=address, logging_level=logging.WARNING)
            return
        except ConnectionAbortedError as exc:
            transient = address.startswith("ray://") and str(exc).startswith("Initialization failure from server")
            if not transient or attempt == CLIENT_INIT_ATTEMPTS:
                raise
            ray.shutdown()
            print(f"Ray: the client server at {address} could not start this command's own server "
                  f"(attempt {attempt} of {CLIENT_INIT_ATTEMPTS}): trying again", file=sys.stderr, flush=True)


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, within ``timeout``, an ``--address`` where nothing accepts a connection: Ray itself
    retries such an address for minutes, naming the machine's own address for a loopback one."""
    host, sep, port = address.removeprefix("ray://").rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"--address {address!r}: expected HOST:PORT (a Ray head's GCS) or ray://HOST:PORT "
                          "(Ray's client server)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        reason = f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ConfigError(f"no Ray cluster answers at {address} (--address): {reason}") from None


def check_resources(ray: Any, spec: EngineSpec, where: str) -> list[dict[str, float]]:
    """The alive nodes' resources, once at least one of them can hold a run (``--cpus-per-run`` CPUs and
    ``--gpus-per-run`` GPUs): otherwise each task would wait forever, so the command is refused. On an
    autoscaling cluster, a node of that size must be up when the command starts."""
    nodes = [dict(node.get("Resources", {})) for node in ray.nodes() if node.get("Alive")]
    need = {"CPU": spec.cpus_per_run, "GPU": spec.gpus_per_run}
    if any(all(node.get(name, 0.0) >= amount for name, amount in need.items() if amount > 0) for node in nodes):
        return nodes
    most_gpus = max((node.get("GPU", 0.0) for node in nodes), default=0.0)
    flag = (f"--gpus-per-run {spec.gpus_per_run:g}" if spec.gpus_per_run > most_gpus
            else f"--cpus-per-run {spec.cpus_per_run:g}")
    have = "; ".join(f"{node.get('CPU', 0.0):g} CPU, {node.get('GPU', 0.0):g} GPU" for node in nodes) or "none alive"
    raise ConfigError(f"{flag}: no node of {where} can hold one run ({spec.cpus_per_run:g} CPU, "
                      f"{spec.gpus_per_run:g} GPU; its nodes: {have}), so no run could start")


def _sizes(nodes: list[dict[str, float]]) -> str:
    cpus = sum(node.get("CPU", 0.0) for node in nodes)
    gpus = sum(node.get("GPU", 0.0) for node in nodes)
    count = f"{len(nodes)} nodes, " if len(nodes) != 1 else ""
    return f"{count}{cpus:g} CPU, {gpus:g} GPU"

__all__ = [
    "ENGINES", "EngineSpec", "RaySession", "Session", "StoreWriter", "WriterTracker",
    "check_cluster_store", "check_reachable", "check_resources", "import_ray", "is_local_store", "open_session",
    "ray_instance", "task_device",
]
