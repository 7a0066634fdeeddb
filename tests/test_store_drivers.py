"""Several drivers on one store, as real processes started together (issue 45): a new store is
created once and stays usable, and ``--skip-finished`` drivers end with exactly one FINISHED run per
configuration and seed, whatever the order they reach each configuration in, none ended by another."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

from store_drivers import SUITE_YAML

HERE = Path(__file__).parent
PLANS = {f"{m}-s{s}" for m in "ab" for s in range(3)}


def run_drivers(root: Path, n: int, iterations: int, uri_template: str | None = None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "drivers.yaml").write_text(SUITE_YAML)
    cmd = [sys.executable, str(HERE / "store_drivers.py")]
    procs = [subprocess.Popen([*cmd, str(i), str(n), str(root), str(iterations), *([uri_template] if uri_template else [])],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(n)]
    errors = []
    for p in procs:
        _, err = p.communicate(timeout=900)
        if p.returncode:
            errors.append(err[-3000:])
    assert not errors, "\n---\n".join(errors)


def nested_runs(db: Path) -> list[tuple[str, str, str]]:
    """(run name, status, lifecycle) of every nested run in the sqlite store ``db``, read without MLflow."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
        assert not [t for t in tables if t.startswith("_alembic_tmp")], "a half-migrated store"
        return con.execute(
            "select name, status, lifecycle_stage from runs where run_uuid not in "
            "(select run_uuid from tags where key = 'role' and value = 'parent')").fetchall()
    finally:
        con.close()


def check_iteration(folder: Path, n: int, runs: list[tuple[str, str, str]]) -> None:
    active = [(name, status) for name, status, stage in runs if stage == "active"]
    assert Counter(name for name, status in active if status == "FINISHED") == Counter(PLANS), active
    assert [r for r in active if r[1] != "FINISHED"] == []  # none ended FAILED, none left RUNNING
    for i in range(n):  # every driver saw each plan finished (run or reused) or left to another driver
        outcomes = json.loads((folder / f"done-{i}").read_text())
        assert set(outcomes) == PLANS and {status for status, *_ in outcomes.values()} <= {"FINISHED", "RUNNING"}


def test_four_drivers_start_together_on_a_new_sqlite_store(tmp_path):
    """4 drivers, 10 new sqlite stores: each store is created once (under its lock, built aside) and
    stays usable, and holds exactly one FINISHED run per configuration and seed."""
    from mlflow.tracking import MlflowClient

    n, iterations = 4, 10
    run_drivers(tmp_path, n, iterations)
    for k in range(iterations):
        folder = tmp_path / f"it{k}"
        check_iteration(folder, n, nested_runs(folder / "mlflow.db"))
        assert not list(folder.glob(".mlflow.db.creating"))
    client = MlflowClient(f"sqlite:///{tmp_path / 'it0' / 'mlflow.db'}")  # usable by MLflow itself
    assert [e.name for e in client.search_experiments()] == ["recurbench-drivers", "Default"]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_four_drivers_on_an_mlflow_server(tmp_path, monkeypatch):
    """The same with an MLflow server (started here): no lock to share, so each driver opens its run,
    then takes the configuration's next claim, which the server grants once (a unique experiment
    name); a driver that did not get it deletes its run and leaves the configuration to the holder."""
    import os
    import signal
    import time
    import urllib.request

    from mlflow.tracking import MlflowClient

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}", "--default-artifact-root", str(tmp_path / "art")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:  # wait for the server to answer (a condition, not a clock: the deadline only bounds it)
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=5).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "mlflow server did not start"
                time.sleep(0.2)
        n, iterations = 4, 3
        # A loaded machine's server may take longer than the 10 s default to answer: not what this tests.
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "300")
        run_drivers(tmp_path / "drivers", n, iterations, uri_template=uri)
        client = MlflowClient(uri)
        (experiment,) = [e for e in client.search_experiments() if e.name == "recurbench-drivers"]
        for k in range(iterations):
            runs = client.search_runs([experiment.experiment_id], f"tags.profile = 'p{k}'")  # active runs only
            nested = [(r.info.run_name, r.info.status) for r in runs if r.data.tags.get("role") != "parent"]
            check_iteration(tmp_path / "drivers" / f"it{k}", n, [(name, status, "active") for name, status in nested])
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
