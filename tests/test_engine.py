"""The Ray engine: runs as tasks on a local Ray instance, retries of dead workers, failures,
cancellation, concurrent writers on one sqlite store, and a real MLflow server for cluster mode.

Nothing here waits on a clock for correctness: a test waits for a condition (a marker file, a
server answering) with a generous deadline that only bounds a hang."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from mlflow.tracking import MlflowClient  # noqa: E402

import ray_toys  # noqa: E402
from recurbench.engine import EngineSpec  # noqa: E402
from recurbench.suites import registry  # noqa: E402
from recurbench.suites.runner import run_suite  # noqa: E402
from recurbench.tracking import MlflowTracker  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.cloudpickle.register_pickle_by_value(ray_toys)
    # Ray's memory monitor kills workers when the *machine* is nearly full, whoever fills it: with
    # other work beside the tests that would fail them, so it is off for this instance. Its workers run
    # at normal priority, as the engine's own instances do.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_memory_monitor_refresh_ms", "0")
        env.setenv("RAY_worker_niceness", "0")
        # address="local": this instance, whatever other heads or marker files the machine has.
        ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


@pytest.fixture
def toy(tmp_path, monkeypatch, local_ray):
    monkeypatch.setitem(registry.SUITES, "raytoy", ray_toys.RayToySuite)
    path = tmp_path / "raytoy.yaml"
    path.write_text(textwrap.dedent("""\
        suite: raytoy
        profiles:
          quick: {models: [good], seeds: 1}
        """))
    markers = tmp_path / "markers"
    markers.mkdir()
    return path, str(markers), f"sqlite:///{tmp_path / 'mlflow.db'}"


def _runs(uri):
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("recurbench-raytoy")
    return client, client.search_runs([experiment.experiment_id], max_results=1000)


def _nested(runs):
    return [r for r in runs if r.data.tags.get("role") != "parent"]


def test_four_workers_on_one_sqlite_store_lose_nothing(toy):
    config, markers, uri = toy
    result = run_suite("raytoy", "quick", MlflowTracker(uri), config_path=config, data_dir=markers,
                       selection={"seeds": 8}, engine=EngineSpec("ray", workers=4))
    assert [o.status for o in result.outcomes] == ["FINISHED"] * 8
    client, runs = _runs(uri)
    nested = _nested(runs)
    assert sorted(r.info.run_name for r in nested) == sorted(f"good-s{s}" for s in range(8))
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags["mlflow.parentRunId"] for r in nested} == {result.parent_run_id}
    for r in nested:
        assert [m.step for m in client.get_metric_history(r.info.run_id, "loss")] == list(range(ray_toys.STEPS))
        assert r.data.metrics["score"] == float(r.data.tags["seed"])
    # Each run trained in a task of its own process, not the driver.
    pids = {Path(markers, f"good-s{s}.attempts").read_text().split()[0] for s in range(8)}
    assert str(os.getpid()) not in pids


def test_a_killed_worker_is_retried_and_each_plan_finishes_once(toy):
    config, markers, uri = toy
    result = run_suite("raytoy", "quick", MlflowTracker(uri), config_path=config, data_dir=markers,
                       selection={"models": ["die_once"], "seeds": 2}, engine=EngineSpec("ray", workers=2))
    assert [o.status for o in result.outcomes] == ["FINISHED", "FINISHED"]
    _, runs = _runs(uri)
    by_status = sorted((r.info.run_name, r.info.status) for r in _nested(runs))
    assert by_status == [("die_once-s0", "FAILED"), ("die_once-s0", "FINISHED"),
                         ("die_once-s1", "FAILED"), ("die_once-s1", "FINISHED")]
    failed = [r for r in _nested(runs) if r.info.status == "FAILED"]
    assert all("its worker died" in r.data.tags["error"] for r in failed)


@pytest.mark.parametrize("skip_finished", [False, True])
def test_a_killed_workers_retry_continues_from_its_checkpoint(toy, monkeypatch, skip_finished):
    # A resumable suite: the retry goes on from the checkpoint its dead attempt wrote at step 10, with
    # --skip-finished or without, and logs only the steps after it.
    monkeypatch.setitem(registry.SUITES, "raytoy", ray_toys.RayToyResumableSuite)
    config, markers, uri = toy
    result = run_suite("raytoy", "quick", MlflowTracker(uri), config_path=config, data_dir=markers,
                       selection={"models": ["die_mid"]}, engine=EngineSpec("ray", workers=1),
                       skip_finished=skip_finished)
    [outcome] = result.outcomes
    assert outcome.status == "FINISHED"
    assert len(Path(markers, "die_mid-s0.attempts").read_text().split()) == 2
    client, runs = _runs(uri)
    [dead] = [r for r in _nested(runs) if r.info.status == "FAILED"]
    [done] = [r for r in _nested(runs) if r.info.status == "FINISHED"]
    assert (outcome.resumed_from, outcome.resumed_at) == (dead.info.run_id, ray_toys.STEPS // 2)
    assert done.data.tags["resumed_from"] == dead.info.run_id
    assert done.data.metrics["score"] == ray_toys.STEPS // 2
    steps = [m.step for m in client.get_metric_history(done.info.run_id, "loss")]
    assert steps == list(range(ray_toys.STEPS // 2, ray_toys.STEPS))


def test_when_the_retries_run_out_the_run_ends_failed_with_the_reason(toy):
    config, markers, uri = toy
    result = run_suite("raytoy", "quick", MlflowTracker(uri), config_path=config, data_dir=markers,
                       selection={"models": ["die_always", "good"]},
                       engine=EngineSpec("ray", workers=2, max_retries=1))
    assert [o.status for o in result.outcomes] == ["FAILED", "FINISHED"]
    assert "its worker died and Ray's retries ran out" in result.outcomes[0].error
    assert len(Path(markers, "die_always-s0.attempts").read_text().split()) == 2  # the first try and one retry
    _, runs = _runs(uri)
    assert sorted(r.info.status for r in _nested(runs) if r.info.run_name == "die_always-s0") == ["FAILED", "FAILED"]


def test_an_exception_in_training_is_not_retried(toy):
    config, markers, uri = toy
    result = run_suite("raytoy", "quick", MlflowTracker(uri), config_path=config, data_dir=markers,
                       selection={"models": ["raise", "good"]}, engine=EngineSpec("ray", workers=2))
    assert [(o.status, o.error) for o in result.outcomes] == [("FAILED", "RuntimeError: loss is NaN"), ("FINISHED", None)]
    assert len(Path(markers, "raise-s0.attempts").read_text().split()) == 1
    _, runs = _runs(uri)
    failed = [r for r in _nested(runs) if r.info.status == "FAILED"]
    assert [r.data.tags["error"] for r in failed] == ["RuntimeError: loss is NaN"]


def test_ctrl_c_cancels_the_tasks_and_ends_their_runs_killed(toy):
    config, markers, uri = toy
    started = [Path(markers, f"block-s{s}.started") for s in range(2)]

    def interrupt_when_both_run():
        deadline = time.monotonic() + 300  # bounds a hang only
        while not all(p.exists() for p in started) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    # Ctrl-C as a terminal sends it. A process started in the background by a non-interactive shell
    # inherits SIGINT ignored (Python then installs no handler), so the test sets Python's own.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_when_both_run, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            run_suite("raytoy", "quick", MlflowTracker(uri), config_path=config, data_dir=markers,
                      selection={"models": ["block"], "seeds": 2}, engine=EngineSpec("ray", workers=2))
    finally:
        signal.signal(signal.SIGINT, previous)
    _, runs = _runs(uri)
    assert sorted((r.info.run_name, r.info.status) for r in runs) == [
        ("block-s0", "KILLED"), ("block-s1", "KILLED"), ("raytoy-quick", "KILLED")]
    assert all("driver was stopped" in r.data.tags["error"] for r in _nested(runs))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination", str(tmp_path / "art")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300  # bounds a hang only: the test waits for the server to answer
    while True:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"mlflow server did not start (exit code {proc.poll()})")
            time.sleep(0.2)
    yield uri
    proc.terminate()
    proc.wait(timeout=60)


def test_with_a_cluster_address_tasks_write_to_an_mlflow_server(toy, mlflow_server):
    """A local Ray instance stands in for the cluster: its address is given, so the sqlite store is
    refused, and a tracking server is what the tasks write to."""
    from recurbench.errors import ConfigError

    config, markers, uri = toy
    address = ray.get_runtime_context().gcs_address
    cluster = EngineSpec("ray", workers=2, address=address)
    with pytest.raises(ConfigError, match=r"is a file on this machine, which workers on other machines"):
        run_suite("raytoy", "quick", MlflowTracker(uri), config_path=config, data_dir=markers, engine=cluster)
    result = run_suite("raytoy", "quick", MlflowTracker(mlflow_server), config_path=config, data_dir=markers,
                       selection={"seeds": 2}, engine=cluster)
    assert [o.status for o in result.outcomes] == ["FINISHED", "FINISHED"]
    client, runs = _runs(mlflow_server)
    assert sorted((r.info.run_name, r.info.status) for r in runs) == [
        ("good-s0", "FINISHED"), ("good-s1", "FINISHED"), ("raytoy-quick", "FINISHED")]
    assert all(len(client.get_metric_history(r.info.run_id, "loss")) == ray_toys.STEPS for r in _nested(runs))


def test_tune_on_ray_workers_shares_one_study(toy, tmp_path):
    import optuna

    from recurbench.tuning.study import StudySpec, run_study

    _, _, uri = toy
    spec = StudySpec("ray-study", n_trials=6, storage=f"sqlite:///{tmp_path / 'optuna.db'}", seed=0)
    meeting = tmp_path / "rendezvous"
    meeting.mkdir()
    # Each worker's trials wait until both worker processes have started one: under load one worker
    # could otherwise finish all six before the other starts.
    objective = ray_toys.ToyQuadratic(rendezvous=str(meeting), workers=2)
    result = run_study(spec, objective, MlflowTracker(uri), EngineSpec("ray", workers=2))
    study = optuna.load_study(study_name="ray-study", storage=spec.storage)
    finished = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    assert 6 <= len(finished) <= 7  # MaxTrialsCallback counts running trials: at most workers - 1 over
    assert result.counts["running"] == 0
    client, runs = _runs(uri)
    trials = [r for r in runs if r.data.tags.get("role") == "trial"]
    assert len(trials) == len(finished) and {r.data.tags["mlflow.parentRunId"] for r in trials} == {result.parent_run_id}
    assert {r.data.tags["worker"] for r in trials} == {"0", "1"}
