"""Tracking: nested runs, standard tags, and a crash ends the run FAILED with the error as a tag."""

from __future__ import annotations

import pytest

from recurbench.tracking import MemoryTracker, MlflowTracker, flatten, standard_tags


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


def test_sigterm_ends_the_runs_in_progress_killed(tmp_path):
    """A scheduler's stop (SIGTERM) must not leave runs RUNNING: the CLI unwinds and ends them KILLED."""
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = [sys.executable, "-c", "from recurbench.cli import main; main()", "run", "minigrid", "--profile", "quick",
           "--envs", "GoToObject", "--models", "lstm", "--total-timesteps", "100000000", "--tracking-uri", uri]
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
    assert proc.returncode != 0
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    status = {r.info.run_name: (r.info.status, r.data.tags.get("error")) for r in runs}
    assert status["GoToObject-lstm-s0"] == ("KILLED", f"KeyboardInterrupt: terminated by signal {signal.SIGTERM.value}")
    assert status["minigrid-quick"][0] == "KILLED"


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



_KILLED_MID_RUN = """
import json, os, signal, sys
from recurbench.tracking import MlflowTracker
tracker = MlflowTracker(sys.argv[1])
with tracker.run("parent", experiment="recurbench-test", tags={"role": "parent"}) as parent:
    with tracker.run(sys.argv[2], experiment="recurbench-test", parent=parent) as run:
        run.log_metrics({"train_loss": 1.0}, step=1)
        if sys.argv[2] == "killed":
            os.kill(os.getpid(), signal.SIGKILL)  # no code runs after this: the runs stay RUNNING
        print(json.dumps(sorted(tracker.lost_runs)), flush=True)
        sys.stdin.readline()  # alive until the test closes stdin
"""


def test_runs_left_running_by_a_killed_process_are_marked_failed_by_the_next_tracker(tmp_path):
    """SIGKILL (or the OOM killer) runs no handler; the next process tracking to that experiment
    marks those runs FAILED, and leaves a live process's runs alone."""
    import json
    import signal
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    from recurbench.reporting.runs import load_runs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    killed = subprocess.run([sys.executable, "-c", _KILLED_MID_RUN, uri, "killed"], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name("recurbench-test").experiment_id

    def status() -> dict[str, str]:
        return {r.info.run_name: r.info.status for r in client.search_runs([experiment_id])
                if r.info.run_name != "parent"}

    # Reading shows the lost run as LOST, with the reason, and writes nothing.
    unfinished = load_runs("test", ("model",), tracking_uri=uri).unfinished
    assert [(r.name, r.status) for r in unfinished] == [("killed", "LOST")]
    assert unfinished[0].tags["error"].startswith(f"lost: its process (pid {unfinished[0].tags['pid']} on ")
    assert status() == {"killed": "RUNNING"}

    # The next process to track there marks the run and its parent FAILED, and says which.
    alive = subprocess.Popen([sys.executable, "-c", _KILLED_MID_RUN, uri, "alive"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(alive.stdout.readline()) == ["killed", "parent"]
        killed_run = next(r for r in client.search_runs([experiment_id]) if r.info.run_name == "killed")
        assert killed_run.info.status == "FAILED"
        assert killed_run.data.tags["error"].startswith("lost: its process (pid ")
        # A live process's runs are left alone, by trackers and by readers.
        tracker = MlflowTracker(uri)
        with tracker.run("next", experiment="recurbench-test"):
            pass
        assert tracker.lost_runs == []
        assert status() == {"killed": "FAILED", "alive": "RUNNING", "next": "FINISHED"}
        assert [(r.name, r.status) for r in load_runs("test", ("model",), tracking_uri=uri).unfinished] == [
            ("alive", "RUNNING"), ("killed", "FAILED")]
    finally:
        alive.stdin.close()
        alive.wait(timeout=60)
    assert alive.returncode == 0
    assert status()["alive"] == "FINISHED"


def test_stored_runs_refuses_a_status_mlflow_does_not_have(tmp_path):
    with pytest.raises(ValueError, match=r"^unknown run status 'DONE'; expected one of RUNNING, SCHEDULED, FINISHED"):
        MlflowTracker(f"sqlite:///{tmp_path / 'x.db'}").stored_runs("recurbench-ltsf", {}, "DONE")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("kind", ["memory", "mlflow"])
def test_a_withdrawn_run_leaves_the_store_and_the_exception_goes_on(tmp_path, kind):
    from recurbench.tracking import RunWithdrawn

    tracker = MemoryTracker() if kind == "memory" else MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    with tracker.run("kept", experiment="recurbench-test", tags={"suite": "test"}) as kept:
        kept.log_metrics({"score": 1.0})
    with pytest.raises(RunWithdrawn, match=f"withdrawn in favour of run {kept.run_id}"):
        with tracker.run("yielded", experiment="recurbench-test", tags={"suite": "test"}) as run:
            run.log_params({"a": 1})
            raise RunWithdrawn(kept.run_id)
    for status in ("FINISHED", "RUNNING", "KILLED", "FAILED"):
        names = [r.name for r in tracker.stored_runs("recurbench-test", {"suite": "test"}, status)]
        assert names == (["kept"] if status == "FINISHED" else []), status


def _open_store(kind, uri, barrier, out):
    from recurbench.tracking import MlflowTracker
    from recurbench.tuning.study import make_storage

    barrier.wait()
    try:
        MlflowTracker(uri).open() if kind == "mlflow" else make_storage(uri)
        out.put("ok")
    except Exception as exc:  # reported to the test
        out.put(f"{type(exc).__name__}: {exc}"[:300])


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("kind", ["mlflow", "optuna"])
def test_processes_opening_a_new_sqlite_store_at_once_all_succeed(tmp_path, kind):
    """MLflow and Optuna create their tables when they first open a store; processes doing that at
    once used to fail with "table ... already exists" (N shells starting `run --skip-finished`, or
    `tune`, together)."""
    import multiprocessing as mp

    import optuna  # noqa: F401 - imported before the fork, as MLflow is by this module

    ctx = mp.get_context("fork")
    for attempt in range(3):
        uri = f"sqlite:///{tmp_path / f'{kind}{attempt}.db'}"
        barrier, out = ctx.Barrier(3), ctx.Queue()
        procs = [ctx.Process(target=_open_store, args=(kind, uri, barrier, out)) for _ in range(3)]
        for p in procs:
            p.start()
        said = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        assert said == ["ok"] * 3, said


def test_an_open_run_beats_until_it_ends(monkeypatch):
    import threading
    import time

    from recurbench import processes

    monkeypatch.setattr(processes, "HEARTBEAT_S", 0.05)
    tracker = MemoryTracker()
    with tracker.run("beating", experiment="e") as run:
        first = int(run.tags["heartbeat"])  # written when the run opens
        time.sleep(0.3)
        assert int(run.tags["heartbeat"]) > first
    last = run.tags["heartbeat"]
    time.sleep(0.2)
    assert run.tags["heartbeat"] == last and run.status == "FINISHED"
    assert not [t for t in threading.enumerate() if t.name.startswith("heartbeat-")]


def test_a_run_of_another_machine_whose_heartbeat_stopped_reads_as_lost(tmp_path):
    import time

    from recurbench.processes import HEARTBEAT_STALE_S, process_tags
    from recurbench.reporting.runs import load_runs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri)
    now = int(time.time() * 1000)
    elsewhere = {**process_tags(), "host": "another-machine", "suite": "test"}
    for name, beat in (("silent", now - int(HEARTBEAT_STALE_S * 1000) - 1000), ("beating", now - 5000)):
        tracker.client.create_run(tracker.experiment_id("recurbench-test"), run_name=name,
                                  tags={**elsewhere, "heartbeat": str(beat)})
    assert [r.name for r in tracker.stored_runs("recurbench-test", {"suite": "test"}, "RUNNING")] == ["beating"]
    unfinished = {r.name: r for r in load_runs("test", ("model",), tracking_uri=uri).unfinished}
    assert {k: r.status for k, r in unfinished.items()} == {"silent": "LOST", "beating": "RUNNING"}
    assert unfinished["silent"].tags["error"].startswith("lost: no heartbeat from its process (pid ")
    # Only read so: the store still has it RUNNING (its process may only be paused), even after a
    # tracker on this machine opened the experiment.
    MlflowTracker(uri).experiment_id("recurbench-test")
    statuses = {r.info.run_name: r.info.status for r in tracker.client.search_runs([tracker.experiment_id("recurbench-test")])}
    assert statuses == {"silent": "RUNNING", "beating": "RUNNING"}
