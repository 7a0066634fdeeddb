"""Tracking: nested runs, standard tags, and a crash ends the run FAILED with the error as a tag."""

from __future__ import annotations

import os
import re
import signal
import threading

import pytest

from recurbench.errors import ConfigError
from recurbench.records import flatten
from recurbench.tracking import MemoryTracker, MlflowTracker, check_store, standard_tags


def test_flatten_nested_params():
    assert flatten({"model": {"d_model": 64, "heads": {"k": [1, 2]}}, "lr": 1e-4}) == {
        "model.d_model": 64,
        "model.heads.k": [1, 2],
        "lr": 1e-4,
    }


def test_standard_tags_add_version_and_drop_none():
    tags = standard_tags(suite="ltsf", model=None, seed=3, device="cpu")
    assert tags["suite"] == "ltsf" and tags["seed"] == "3" and "model" not in tags
    assert tags["device"] == "cpu"  # what the caller trains on, not whether a GPU exists
    assert "recurbench_version" in tags and "device" not in standard_tags(suite="ltsf")


def test_memory_tracker_marks_a_raising_run_failed_and_keeps_the_parent_alive():
    tracker = MemoryTracker()
    with tracker.run("parent", experiment="e") as parent:
        with pytest.raises(ValueError, match="boom"):
            with tracker.run("child", experiment="e", parent=parent) as child:
                child.log_metrics({"loss": 1.0}, step=0)
                raise ValueError("boom")
        with tracker.run("ok", experiment="e", parent=parent) as ok:
            ok.log_params({"a": {"b": 1}})
    runs = {r.name: r for r in tracker.runs}
    assert runs["child"].status == "FAILED" and runs["child"].tags["error"] == "ValueError: boom"
    assert runs["child"].metrics["loss"] == [(0, 1.0)]  # logged before the crash, kept
    assert runs["ok"].status == "FINISHED" and runs["ok"].params == {"a.b": 1}
    assert runs["parent"].status == "FINISHED"
    assert [r.name for r in tracker.children(parent)] == ["child", "ok"]


def test_mlflow_tracker_records_nested_runs_and_failures(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri)
    with tracker.run("parent", experiment="recurbench-test", tags={"suite": "test"}) as parent:
        with tracker.run("child", experiment="recurbench-test", parent=parent) as child:
            child.log_params({"model": {"d_model": 8}})
            child.log_metrics({"val_loss": 0.5}, step=1)
            child.log_dict({"k": [1, 2]}, "rem/params.json")
        with pytest.raises(RuntimeError):
            with tracker.run("crash", experiment="recurbench-test", parent=parent):
                raise RuntimeError("diverged")
    client = tracker.client
    runs = {r.info.run_name: r for r in client.search_runs([tracker.experiment_id("recurbench-test")])}
    assert runs["child"].info.status == "FINISHED"
    assert runs["child"].data.params == {"model.d_model": "8"}
    assert runs["child"].data.metrics == {"val_loss": 0.5}
    assert runs["child"].data.tags["mlflow.parentRunId"] == runs["parent"].info.run_id
    assert runs["crash"].info.status == "FAILED"
    assert runs["crash"].data.tags["error"] == "RuntimeError: diverged"
    assert [a.path for a in client.list_artifacts(runs["child"].info.run_id, "rem")] == ["rem/params.json"]


@pytest.mark.parametrize("engine", ["serial", "ray"])
def test_sigterm_ends_the_runs_in_progress_killed(tmp_path, engine):
    """A scheduler's stop (SIGTERM) must not leave runs RUNNING: the CLI unwinds and ends them KILLED
    (under Ray too, whose own SIGTERM handler would exit instead: the driver cancels its tasks)."""
    if engine == "ray":
        pytest.importorskip("ray")
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = [sys.executable, "-c", "from recurbench.cli import main; main()", "run", "minigrid", "--profile", "quick",
           "--envs", "GoToObject", "--models", "lstm", "--total-timesteps", "100000000", "--tracking-uri", uri,
           "--engine", engine]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        child = None
        db = tmp_path / "mlflow.db"
        while child is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1)
            if not db.exists():
                continue
            # Read-only: an MLflow client here would run schema migrations against the child's new store.
            try:
                con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
                try:
                    child = con.execute("select status from runs where name = 'GoToObject-lstm-s0'").fetchone()
                finally:
                    con.close()
            except sqlite3.OperationalError:  # tables not created yet
                continue
        assert child is not None, f"no nested run appeared; stderr: {proc.stderr.read() if proc.poll() is not None else ''}"
        time.sleep(2)  # inside training now
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The shell's convention (128 + 15) and one line saying so, as the last thing the command printed.
    assert proc.returncode == 143
    assert proc.stderr.read().strip().splitlines()[-1] == (
        "stopped by SIGTERM: any runs in progress were ended KILLED")
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    status = {r.info.run_name: (r.info.status, r.data.tags.get("error")) for r in runs}
    error = (f"KeyboardInterrupt: terminated by signal {signal.SIGTERM.value}" if engine == "serial" else
             "KeyboardInterrupt: the driver was stopped (KeyboardInterrupt) and cancelled its Ray tasks")
    assert status["GoToObject-lstm-s0"] == ("KILLED", error)
    assert status["minigrid-quick"][0] == "KILLED" and status["minigrid-quick"][1].startswith("KeyboardInterrupt")


def test_a_tracking_uri_mlflow_cannot_serve_is_a_config_error_with_the_password_hidden():
    from recurbench.errors import ConfigError
    from recurbench.tracking import MlflowTracker, mlflow_client, redact_uri

    with pytest.raises(ConfigError, match=r"^tracking URI 'foo://bar': .*unsupported URI 'foo://bar'"):
        MlflowTracker("foo://bar").experiment_id("x")
    assert redact_uri("postgresql://user:secret@db:5432/mlflow") == "postgresql://user:***@db:5432/mlflow"
    assert redact_uri("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    with pytest.raises(ConfigError) as info:
        mlflow_client("foo://user:secret@host/x")
    assert "secret" not in str(info.value) and "foo://user:***@host/x" in str(info.value)



def test_stored_runs_refuses_a_status_mlflow_does_not_have(tmp_path):
    with pytest.raises(ValueError, match=r"^unknown run status 'DONE'; expected one of RUNNING, SCHEDULED, FINISHED"):
        MlflowTracker(f"sqlite:///{tmp_path / 'x.db'}").stored_runs("recurbench-ltsf", {}, "DONE")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("kind", ["memory", "mlflow"])
def test_end_stale_ends_only_the_running_runs_with_those_tags_and_parent(tmp_path, kind):
    tracker = MemoryTracker() if kind == "memory" else MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    with tracker.run("parent", experiment="recurbench-test", tags={"role": "parent"}) as parent:
        stale = tracker._start("recurbench-test", "stale", {"plan_key": "a"}, parent.run_id)
        other_key = tracker._start("recurbench-test", "other", {"plan_key": "b"}, parent.run_id)
        elsewhere = tracker._start("recurbench-test", "elsewhere", {"plan_key": "a"}, None)
        with tracker.run("done", experiment="recurbench-test", tags={"plan_key": "a"}, parent=parent):
            pass
        ended = tracker.end_stale("recurbench-test", {"plan_key": "a"}, "its worker died", parent_id=parent.run_id)
    assert ended == [stale.run_id]
    failed = tracker.stored_runs("recurbench-test", {}, "FAILED")
    assert [(r.run_id, r.tags["error"]) for r in failed] == [(stale.run_id, "its worker died")]
    assert {r.run_id for r in tracker.stored_runs("recurbench-test", {}, "RUNNING")} == {other_key.run_id, elsewhere.run_id}
    assert [r.name for r in tracker.stored_runs("recurbench-test", {}, "FINISHED")] == ["done"]


@pytest.mark.parametrize("kind", ["memory", "mlflow"])
def test_a_claim_is_taken_once_and_kept_out_of_the_experiment_list(tmp_path, kind):
    """Of two takers of one claim, the first keeps it and the second is told who has it (MLflow: a
    unique experiment name); the next generation is free; a taken claim is listed nowhere."""
    if kind == "memory":
        a = b = MemoryTracker()
    else:
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        a, b = MlflowTracker(uri), MlflowTracker(uri)  # two drivers' clients
    assert a.last_claim("k") is None
    assert a.take_claim("k", 0, {"run_id": "r1"}) == {"run_id": "r1"}
    assert b.take_claim("k", 0, {"run_id": "r2"}) == {"run_id": "r1"}
    assert a.take_claim("k", 0, {"run_id": "r1"}) == {"run_id": "r1"}  # a retried request of the taker's own
    assert b.last_claim("k") == (0, {"run_id": "r1"}) and b.last_claim("k2") is None
    assert b.take_claim("k", 1, {"run_id": "r2"}) == {"run_id": "r2"}
    assert a.last_claim("k") == (1, {"run_id": "r2"})
    if kind == "mlflow":
        assert [e.name for e in a.client.search_experiments()] == ["Default"]


def _read_only_folder(tmp_path):
    """A folder this process cannot create files in: a chmod-ed one, or for root (whom permission bits
    do not stop) a read-only system folder; None where neither exists."""
    import os
    import tempfile

    folder = tmp_path / "ro"
    folder.mkdir()
    os.chmod(folder, 0o555)
    for candidate in (folder, "/sys/kernel"):
        try:
            fd, name = tempfile.mkstemp(dir=candidate)
        except OSError:
            return candidate
        os.close(fd)
        os.unlink(name)
    return None


_KILLED_MID_WRITE = """
import os, signal, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("CREATE TABLE t (x)")
db.execute("INSERT INTO t VALUES (0)")
db.execute("PRAGMA cache_size = 1")  # the pages spill into the file before the commit
db.execute("BEGIN")
for _ in range(2000):
    db.execute("INSERT INTO t VALUES (?)", ("x" * 500,))
os.kill(os.getpid(), signal.SIGKILL)  # killed in the middle of the write: a hot journal is left
"""


@pytest.mark.parametrize("write", [True, False])
def test_a_store_left_by_a_process_killed_mid_write_is_recovered_not_refused(tmp_path, write):
    """A driver or store writer killed during a write leaves a journal beside the database. The store
    check opened it read-only, which cannot roll that journal back: every later command refused the
    store as "not a readable SQLite database". SQLite rolls it back on a read-write open."""
    import sqlite3
    import subprocess
    import sys

    from recurbench.tracking import check_store

    path = tmp_path / "mlflow.db"
    subprocess.run([sys.executable, "-c", _KILLED_MID_WRITE, str(path)], check=False, timeout=120)
    assert (tmp_path / "mlflow.db-journal").stat().st_size > 0
    check_store(f"sqlite:///{path}", write=write)
    with sqlite3.connect(path) as db:  # the killed write is undone, the committed one kept
        assert db.execute("SELECT count(*) FROM t").fetchone() == (1,)


def test_store_failures_are_one_line_naming_the_store(tmp_path):
    """An unreachable server, a corrupt database and a read-only folder each fail at once, naming the
    store, before anything is written (MLflow itself retries for minutes or prints a traceback)."""
    import socket

    from recurbench.errors import ConfigError
    from recurbench.tracking import check_store

    with socket.socket() as sock:  # a port with nothing listening: bind it, never listen
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"^tracking store http://127.0.0.1:{port}: no MLflow server answers .*mlflow server"):
            MlflowTracker(f"http://127.0.0.1:{port}").open()
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database" * 100)
    for write in (True, False):
        with pytest.raises(ConfigError, match=rf"^tracking store: {corrupt} is not a readable SQLite database"):
            check_store(f"sqlite:///{corrupt}", write=write)
    with pytest.raises(ConfigError, match=r"is not a readable SQLite database"):
        MlflowTracker(f"sqlite:///{corrupt}").experiment_id("x")
    folder = _read_only_folder(tmp_path)
    if folder is None:
        pytest.skip("no folder here refuses this process's writes")
    with pytest.raises(ConfigError, match=rf"^tracking store: cannot write in the folder {folder} "):
        MlflowTracker(f"sqlite:///{folder}/mlflow.db").open()
    check_store(f"sqlite:///{tmp_path}/new/mlflow.db")  # a folder yet to be made under a writable one is fine
    assert not (tmp_path / "new").exists()


def _serve(handler_cls):
    """An HTTP server on a free local port, answering from a thread; (server, url)."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_server_that_answers_but_is_not_mlflow_is_one_line(tmp_path):
    """A web server that is not MLflow (a static file server, say) is refused in one line naming it,
    where MLflow's client printed a 24-frame traceback."""
    import http.server

    from recurbench.errors import ConfigError

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args):
            pass

    server, url = _serve(Quiet)
    try:
        with pytest.raises(ConfigError, match=rf"^tracking store {url}: the server answers \(HTTP 404\) but is not an "
                                              "MLflow tracking server"):
            MlflowTracker(url).open()
    finally:
        server.shutdown()


def test_a_tracking_server_that_stops_answering_fails_fast_and_once(monkeypatch):
    """A server gone mid-run: the write that finds it gone raises StoreUnreachable naming the server,
    within MLflow's capped retries; every later write raises at once, and ending the run does not
    mask the error or wait again (the run is left RUNNING, its owner being this dying process)."""
    import socket

    from mlflow.tracking import MlflowClient

    from recurbench.tracking import ServerClient, StoreUnreachable

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")  # the capped default (3) is measured in the guide
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    with socket.socket() as sock:  # nothing listens here
        sock.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{sock.getsockname()[1]}"
        tracker = MlflowTracker(uri)
        tracker.__dict__["client"] = client = ServerClient(MlflowClient(uri), uri)
        with pytest.raises(StoreUnreachable, match=rf"^tracking server {uri} stopped answering \(.*\); the runs in "
                                                   "progress are left RUNNING"):
            client.get_experiment_by_name("x")
        assert ServerClient.lost[-1].startswith(f"tracking server {uri} stopped answering")

        class NoMoreRequests:  # every later call must fail without asking the server again
            def __getattr__(self, name):
                def request(*args, **kwargs):
                    raise AssertionError(f"a request ({name}) after the server was found gone")

                return request

        client._client = NoMoreRequests()
        handle = tracker._resume("some-run")
        with pytest.raises(StoreUnreachable), tracker.run("r", experiment="e", run_id="some-run"):
            handle.log_metrics({"loss": 1.0})


def test_the_stop_line_says_runs_were_left_running_when_the_server_was_gone(monkeypatch, capsys):
    from recurbench import cli
    from recurbench.tracking import ServerClient

    monkeypatch.setattr(ServerClient, "lost", ["tracking server http://h:5000 stopped answering (x); the runs in "
                                               "progress are left RUNNING, and the next `recurbench run` on this "
                                               "host ends them"])
    with pytest.raises(SystemExit) as stop:
        cli._stopped(15)
    assert stop.value.code == 143
    assert "stopped by SIGTERM: tracking server http://h:5000 stopped answering (x); the runs in progress are left " \
           "RUNNING" in " ".join(capsys.readouterr().err.split())


def test_a_crash_while_creating_a_store_leaves_no_half_created_store(tmp_path, monkeypatch):
    """The schema of a new sqlite store is built in a file aside and moved into place when complete:
    a creation that dies mid-migration leaves no store (the next command makes it afresh), where it
    used to leave `_alembic_tmp_*` tables that broke every later command. One that fails or is stopped
    (Ctrl-C) leaves no file aside either; one killed outright does, and the next creation replaces it."""
    import mlflow.store.db.utils as db_utils

    def failed(engine):
        raise RuntimeError("failed mid-migration")

    def stopped(engine):
        raise KeyboardInterrupt

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    for breaks, error in ((failed, RuntimeError), (stopped, KeyboardInterrupt)):
        with monkeypatch.context() as m:
            m.setattr(db_utils, "_upgrade_db", breaks)
            with pytest.raises(error):
                MlflowTracker(uri).open()
        assert list(tmp_path.iterdir()) == [tmp_path / "mlflow.db.lock"]
    (tmp_path / ".mlflow.db.creating").write_bytes(b"half a store: its creator was killed outright")
    tracker = MlflowTracker(uri)
    tracker.experiment_id("recurbench-x")  # made afresh, the leftover replaced
    assert (tmp_path / "mlflow.db").exists() and not (tmp_path / ".mlflow.db.creating").exists()


def test_a_retried_store_writer_call_writes_nothing_twice(tmp_path):
    """Ray retries a call to the store writer whose process died; if it died after the write and
    before answering, the retry repeats the write. A second ``start`` of the same request returns the
    run the first created, and a metric point written again with its time stamp is stored once."""
    from mlflow.tracking import MlflowClient  # noqa: PLC0415 - as the other tests read the store

    from recurbench.engine import REQUEST_TAG, StoreWriter  # noqa: PLC0415 - the writer of Ray sessions

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    writer = StoreWriter(uri)
    tags = {"role": "test", REQUEST_TAG: "a" * 32}
    first = writer.start("recurbench-writer", "once", tags, None)
    again = StoreWriter(uri).start("recurbench-writer", "once", tags, None)  # as the restarted writer
    other = writer.start("recurbench-writer", "once", {**tags, REQUEST_TAG: "b" * 32}, None)
    assert again == first and other != first  # another request is another run
    for _ in range(2):
        writer.call(first, "log_metrics", {"loss": 0.5}, 3, 1_700_000_000_000)
    writer.end(first, "FINISHED")
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("recurbench-writer").experiment_id])
    assert sorted(r.info.run_id for r in runs) == sorted([first, other])
    assert [(m.step, m.value) for m in client.get_metric_history(first, "loss")] == [(3, 0.5)]


class _StoppedWhileEnding(MemoryTracker):
    """A second Ctrl-C that arrives while a run is being ended in the store."""

    def _end(self, run, status):
        os.kill(os.getpid(), signal.SIGINT)  # delivered to this thread before kill returns, unless held
        super()._end(run, status)


@pytest.mark.parametrize("raised", [KeyboardInterrupt, ValueError, None])
def test_a_second_stop_while_a_run_is_being_ended_comes_after_it_is_ended(raised):
    """Three Ctrl-C 50 ms apart left runs RUNNING (2 tries in 12) while the command said they were
    ended KILLED: the next one cut the closing short. The closing now holds a stop back until the run
    is ended, then lets it through."""
    tracker = _StoppedWhileEnding()
    # Ctrl-C's own handler, and SIGINT not blocked in this thread (which the other thread inherits): an
    # earlier test in this process may have left either otherwise.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    done = threading.Event()
    other = threading.Thread(target=done.wait)  # as MLflow's and Ray's threads: any thread may get the signal
    other.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            with tracker.run("r", experiment="e"):
                if raised is not None:
                    raise raised("first")
    finally:
        done.set()
        other.join()
        signal.signal(signal.SIGINT, before)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    (run,) = tracker.runs
    assert run.status == {KeyboardInterrupt: "KILLED", ValueError: "FAILED", None: "FINISHED"}[raised]


def test_an_optuna_storage_given_as_the_tracking_store_is_refused_unchanged(tmp_path):
    """MLflow opened an Optuna database as a store: a 140-line traceback, after adding its own tables to
    the file (reading included). It is refused in one line, the file left as it was."""
    import optuna

    from recurbench.errors import ConfigError
    from recurbench.reporting.runs import open_client

    path = tmp_path / "optuna.db"
    optuna.create_study(storage=f"sqlite:///{path}", study_name="s")
    before = path.read_bytes()
    message = f"tracking store: {path} is an Optuna storage, not an MLflow tracking store (pass it as --storage)"
    for write in (False, True):
        with pytest.raises(ConfigError) as refused:
            check_store(f"sqlite:///{path}", write=write)
        assert str(refused.value) == message
    with pytest.raises(ConfigError, match=re.escape(message)):
        open_client(f"sqlite:///{path}")  # what compare and report read through
    assert path.read_bytes() == before
    MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}").experiment_id("recurbench-x")
    check_store(f"sqlite:///{tmp_path / 'mlflow.db'}")  # an MLflow store passes


@pytest.mark.parametrize("path", ["store.db", "runs/mlflow.sqlite", "/abs/x.SQLITE3"])
def test_a_plain_path_to_an_sqlite_file_is_refused_with_the_uri_meant(tmp_path, monkeypatch, path):
    # MLflow read it as a folder store and answered with a paragraph on that store's maintenance mode.
    monkeypatch.chdir(tmp_path)
    for write in (True, False):
        with pytest.raises(ConfigError) as info:
            check_store(path, write=write)
        assert str(info.value) == f"tracking URI {path!r}: a path without a scheme is not an SQLite file; write sqlite:///{path}"
    assert list(tmp_path.iterdir()) == []
