"""Which Ray instance ``--engine ray`` uses (issues 48 and 45): its own local one, whatever other heads,
marker files or ``$RAY_ADDRESS`` the machine has, on loopback with token authentication; a cluster only
when ``--address`` names it; requests that cannot be met refused in one line before any task waits.

Another head runs beside the tests, started with ``ray start --head`` on loopback in a folder of its own
(``$RAY_TMPDIR``: Ray's marker file and sessions live there, out of the way of any other Ray on the
machine), and is stopped by its process ids at the end (``ray stop`` would stop every Ray of the user).
Nothing waits on a clock for correctness; deadlines only bound a hang."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from recurbench.engine import EngineSpec, open_session, ray_instance  # noqa: E402
from recurbench.errors import ConfigError  # noqa: E402
from recurbench.tracking import MlflowTracker  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(address: str) -> bool:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError:
        return False
    return True


def _process_tree(marker: str) -> set[int]:
    """The processes whose command line names ``marker`` (the head's folder), and their descendants."""
    parents: dict[int, int] = {}
    roots: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                roots.add(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    tree, grew = set(roots), True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= children
        grew = bool(children)
    return tree


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@dataclass(frozen=True)
class Head:
    folder: str
    """Its ``$RAY_TMPDIR``: Ray's marker file ``ray/ray_current_cluster`` points at it."""
    address: str
    client_address: str
    pids: frozenset[int]
    token_path: str

    @property
    def marker(self) -> Path:
        return Path(self.folder, "ray", "ray_current_cluster")

    def untouched(self) -> bool:
        return all(_alive(pid) for pid in self.pids) and _answers(self.address) and \
            self.marker.read_text().strip() == self.address


def _short_folder(prefix: str) -> str:
    """A folder for Ray's sessions with a short path: its socket paths must fit in 107 bytes."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


@pytest.fixture(scope="module")
def other_head():
    """A head as a Ray user keeps one (``ray start --head``), on loopback, with Ray's client server."""
    folder = _short_folder("rbhead-")
    port, client_port = _free_port(), _free_port()
    token = Path(folder, "auth_token")
    token.write_text(uuid.uuid4().hex)
    env = dict(os.environ, RAY_TMPDIR=folder, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN_PATH=str(token))  # as Ray 2.61 starts every head, with a token of its own
    for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN"):
        env.pop(name, None)
    started = subprocess.run(
        [str(Path(sys.executable).with_name("ray")), "start", "--head", "--node-ip-address=127.0.0.1",
         f"--port={port}", f"--ray-client-server-port={client_port}", "--num-cpus=1", "--num-gpus=0",
         "--include-dashboard=false", "--disable-usage-stats"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    pids = _process_tree(folder)
    head = Head(folder, f"127.0.0.1:{port}", f"ray://127.0.0.1:{client_port}", frozenset(pids), str(token))
    try:
        if started.returncode != 0:
            pytest.fail(f"ray start --head failed ({started.returncode}): {started.stderr[-2000:]}")
        deadline = time.monotonic() + 120  # bounds a hang only: the client server starts after the head
        while not (_answers(head.address) and _answers(head.client_address)):
            if time.monotonic() > deadline:
                pytest.fail("the other head did not answer")
            time.sleep(0.2)
        yield head
    finally:
        for pid in _process_tree(folder) | pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def loopback_driver(monkeypatch):
    """This process as a driver on loopback, like the other head: Ray would otherwise rewrite the
    address 127.0.0.1 to the machine's network address, where a loopback head does not listen (Ray does
    this on macOS and Windows by default)."""
    import ray._private.ray_constants as ray_constants

    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@contextmanager
def ray_auth(**env: str):
    """Ray's token settings of this process for a while (Ray reads them into its config and caches the
    token): the user's for the cluster they attach to."""
    from ray._raylet import AuthenticationTokenLoader, Config

    names = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")
    saved = {name: os.environ.pop(name, None) for name in names}
    os.environ.update(env)
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
    try:
        yield
    finally:
        for name in names:
            os.environ.pop(name, None)
        os.environ.update({name: value for name, value in saved.items() if value is not None})
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def where_am_i() -> dict[str, str]:
    """Run as a task: the instance it ran on, and the token authentication it was started with."""
    from ray._raylet import get_authentication_mode  # noqa: PLC0415 - inside a Ray task

    return {"gcs": ray.get_runtime_context().gcs_address, "auth": str(get_authentication_mode())}


@pytest.fixture(autouse=True)
def _by_value():
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests


def _run_one(tmp_path, spec: EngineSpec) -> dict[str, str]:
    done: list[dict[str, str]] = []
    with open_session(spec, MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}")) as session:
        assert session.kind == "ray"
        session.map(where_am_i, [()], lambda _, result: done.append(result),
                    lambda _, reason: pytest.fail(reason))
    return done[0]


@pytest.mark.parametrize("marker", ["live", "stale"])
def test_a_local_instance_of_its_own_beside_another_head_its_marker_and_ray_address(
        marker, other_head, tmp_path, monkeypatch, capfd, request):
    """The issue 48 case: a head (running, or killed and leaving its marker file) and ``$RAY_ADDRESS``.
    The command starts and stops an instance of its own, says so, and the other head is untouched."""
    folder = other_head.folder
    if marker == "stale":  # a marker left by a head that is gone: nothing listens at its address
        folder = _short_folder("rbstale-")
        request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))
        Path(folder, "ray").mkdir()
        Path(folder, "ray", "ray_current_cluster").write_text(f"127.0.0.1:{_free_port()}")
    monkeypatch.setenv("RAY_TMPDIR", folder)
    monkeypatch.setenv("RAY_ADDRESS", other_head.address)
    where = _run_one(tmp_path, EngineSpec("ray", workers=1))
    line = capfd.readouterr().err
    assert where["gcs"].startswith("127.0.0.1:") and where["gcs"] != other_head.address
    assert f"Ray: a local instance of this command's own at {where['gcs']}" in line
    assert f"$RAY_ADDRESS ({other_head.address}) is not used: --address {other_head.address} attaches to it" in line
    assert not ray.is_initialized()  # stopped with the command
    assert os.environ["RAY_ADDRESS"] == other_head.address  # the user's environment, as it was
    assert other_head.untouched()


def test_the_local_instance_takes_a_token_and_listens_on_loopback(tmp_path, monkeypatch, capfd):
    """Authentication through Ray's own API: the driver's and a task's mode, and Ray's GCS client in
    another process, refused with a wrong token and let in with the one in Ray's token file. The
    user's ``RAY_AUTH_MODE=disabled`` (for their clusters) does not open the command's own instance."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    with open_session(EngineSpec("ray", workers=1), MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}")) as session:
        from ray._raylet import AuthenticationMode, get_authentication_mode

        assert get_authentication_mode() == AuthenticationMode.TOKEN
        done: list[dict[str, str]] = []
        session.map(where_am_i, [()], lambda _, result: done.append(result), lambda _, reason: pytest.fail(reason))
        gcs = ray.get_runtime_context().gcs_address
        assert done == [{"gcs": gcs, "auth": str(AuthenticationMode.TOKEN)}]
        assert gcs.startswith("127.0.0.1:")
        assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
        probe = subprocess.run([sys.executable, "-c", _TOKEN_PROBE, gcs, token_file.read_text().strip()],
                               env=dict(os.environ, RAY_AUTH_MODE="token", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"),
                               capture_output=True, text=True, timeout=120)
        assert probe.stdout.split() == ["wrong-token:refused", "token-file:accepted"], probe.stderr[-2000:]
    assert os.environ["RAY_AUTH_MODE"] == "disabled"
    assert "loopback only, token authentication" in capfd.readouterr().err


def test_a_run_wider_than_this_machine_is_refused_before_ray_starts(tmp_path, monkeypatch):
    # --cpus-per-run 5 on a 2-core machine started an instance of 5 "CPUs" and trained with 5 threads.
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"^--cpus-per-run 5: this machine has 2 CPUs, fewer than one run would "
                                          r"reserve .*; give --cpus-per-run 2 or less, or --address for a cluster$"):
        with open_session(EngineSpec("ray", workers=1, cpus_per_run=5), MlflowTracker(f"sqlite:///{tmp_path}/m.db")):
            pass
    assert not ray.is_initialized()
    assert list(tmp_path.iterdir()) == []  # refused before the store was opened


@pytest.mark.parametrize("gpus,asked,message", [
    (0, 1, r"^--gpus-per-run 1: PyTorch sees 0 GPUs on this machine, fewer than one run would reserve; leave "
           r"--gpus-per-run out, or --address for a cluster$"),
    (2, 3, r"^--gpus-per-run 3: PyTorch sees 2 GPUs on this machine, fewer than one run would reserve; give "
           r"--gpus-per-run 2 or less, or --address for a cluster$"),
])
def test_gpus_this_machine_lacks_are_refused_before_the_store_or_ray(tmp_path, monkeypatch, gpus, asked, message):
    """The local instance refused ``--gpus-per-run 1`` on a machine without a GPU only once started (18 s),
    an empty store already created."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(ConfigError, match=message):
        with open_session(EngineSpec("ray", workers=1, gpus_per_run=asked), MlflowTracker(f"sqlite:///{tmp_path}/m.db")):
            pass
    assert not ray.is_initialized()
    assert list(tmp_path.iterdir()) == []


def memory_monitor_setting() -> str | None:
    """Run as a task: the memory monitor's setting its worker (and so its raylet) was started with."""
    return os.environ.get("RAY_memory_monitor_refresh_ms")


def test_the_store_writer_survives_its_process_and_no_memory_monitor_kills_for_others(tmp_path, monkeypatch):
    """Seen in a real session: another process filled the machine (20 of 24 GB), Ray's memory monitor
    killed this instance's training task and its store writer, and the driver ended with a traceback,
    its runs left RUNNING. The command's own instance now runs without the monitor, and a writer whose
    process dies is restarted, the write that met it retried."""
    monkeypatch.delenv("RAY_memory_monitor_refresh_ms", raising=False)
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with open_session(EngineSpec("ray", workers=1), MlflowTracker(uri)) as session:
        settings: list[str | None] = []
        session.map(memory_monitor_setting, [()], lambda _, result: settings.append(result),
                    lambda _, reason: pytest.fail(reason))
        assert settings == ["0"]
        # Output to a file (pytest captures it): the workers' lines without colour codes.
        assert os.environ["RAY_COLOR_PREFIX"] == "0"
        tracker = session.tracker
        with tracker.run("survivor", experiment="recurbench-writer", tags={"role": "test"}) as run:
            run.log_metrics({"loss": 1.0}, step=0)
            ray.kill(tracker.writer, no_restart=False)  # as an OOM kill: the actor's process dies
            run.log_metrics({"loss": 0.5}, step=1)
            run.set_tags({"after": "restart"})
    assert "RAY_memory_monitor_refresh_ms" not in os.environ  # the user's environment, as it was
    assert "RAY_COLOR_PREFIX" not in os.environ
    from mlflow.tracking import MlflowClient  # noqa: PLC0415 - as the other tests read the store

    client = MlflowClient(uri)
    (stored,) = client.search_runs([client.get_experiment_by_name("recurbench-writer").experiment_id])
    assert stored.info.status == "FINISHED" and stored.data.tags["after"] == "restart"
    assert [m.value for m in client.get_metric_history(stored.info.run_id, "loss")] == [1.0, 0.5]


_TOKEN_PROBE = """
import os, sys
from ray._raylet import AuthenticationTokenLoader, GcsClient
from ray.exceptions import AuthenticationError

def attempt(token):
    os.environ["RAY_AUTH_TOKEN"] = token
    AuthenticationTokenLoader.instance().reset_cache()
    try:
        GcsClient(address=sys.argv[1]).internal_kv_get(b"probe", None, timeout=30)
    except AuthenticationError:
        return "refused"
    return "accepted"

print("wrong-token:" + attempt("0" * 32))
print("token-file:" + attempt(sys.argv[2]))
"""


@pytest.mark.parametrize("which", ["gcs", "client"])
def test_attaching_is_by_address_only_and_leaves_the_cluster_running(which, other_head, loopback_driver, capfd):
    """``--address HOST:PORT`` and ``--address ray://HOST:PORT`` (Ray's client: in the ray extra)."""
    address = other_head.address if which == "gcs" else other_head.client_address
    with ray_auth(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=other_head.token_path):
        try:
            with ray_instance(ray, EngineSpec("ray", workers=1, address=address)) as line:
                assert ray.get(ray.remote(where_am_i).remote())["gcs"] == other_head.address
        except ConfigError as exc:  # the head's client-server logs say why
            logs = sorted(Path(other_head.folder).glob("ray/session_2*/logs/ray_client_server*"))
            pytest.fail(f"{exc}\n" + "\n".join(f"== {log}\n{log.read_text(errors='replace')[-3000:]}" for log in logs))
    assert line == f"Ray: attached to the Ray cluster at {address} (--address: 1 CPU, 0 GPU); it is left running"
    assert line in capfd.readouterr().err
    assert not ray.is_initialized()
    assert other_head.untouched()


class _ClientThatFails:
    """A stand-in for the ``ray`` module whose client init fails ``failures`` times as Ray's client
    does when its server cannot start the client's own server; then it attaches."""

    exceptions = ray.exceptions

    def __init__(self, failures: int, message: str) -> None:
        self.failures, self.message, self.calls = failures, message, []

    def init(self, address: str, **kwargs) -> None:
        self.calls.append("init")
        if self.failures:
            self.failures -= 1
            raise ConnectionAbortedError(self.message)

    def shutdown(self) -> None:
        self.calls.append("shutdown")


SERVER_TRACEBACK = ("Initialization failure from server:\nTraceback (most recent call last):\n"
                    '  File "proxier.py", line 780, in Datapath\n'
                    "RuntimeError: Proxy failed to Connect to backend! Check `ray_client_server.err`")


def test_a_client_server_that_cannot_start_the_clients_server_is_tried_again_then_named():
    """The ray:// attach failed once in CI with "Initialization failure from server" (a loaded head);
    it is tried up to three times, each try after a shutdown, and the refusal names the server's reason."""
    from recurbench import engine

    flaky = _ClientThatFails(2, SERVER_TRACEBACK)
    engine._init_client_retrying(flaky, "ray://127.0.0.1:10001")
    assert flaky.calls == ["init", "shutdown", "init", "shutdown", "init"]

    with socket.socket() as server:  # something answers, as a client server would
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"ray://127.0.0.1:{server.getsockname()[1]}"
        broken = _ClientThatFails(3, SERVER_TRACEBACK)
        with pytest.raises(ConfigError, match=rf"^cannot attach to the Ray cluster at {address} \(--address\): "
                                              r"Initialization failure from server: RuntimeError: Proxy failed "):
            engine._attach(broken, EngineSpec("ray", address=address), address)
    assert broken.calls == ["init", "shutdown", "init", "shutdown", "init"]

    other = _ClientThatFails(1, "Connection reset")  # not the server's start: said at once
    with pytest.raises(ConnectionAbortedError):
        engine._init_client_retrying(other, "ray://127.0.0.1:10001")
    assert other.calls == ["init"]


def test_gpus_that_no_node_has_are_refused_before_any_task(other_head, loopback_driver):
    """Issue 45: ``--gpus-per-run 1`` without a GPU waited forever. Checked on the command's own
    instance (stopped again) and on a cluster (left running)."""
    with pytest.raises(ConfigError, match=r"^--gpus-per-run 64: no node of the local Ray instance at 127\.0\.0\.1:\d+ "
                                          r"can hold one run \(1 CPU, 64 GPU; its nodes: \d+ CPU, \d+ GPU\), so no run could start$"):
        with ray_instance(ray, EngineSpec("ray", workers=1, gpus_per_run=64)):
            pytest.fail("the instance was used")
    assert not ray.is_initialized()
    with pytest.raises(ConfigError, match=rf"^--gpus-per-run 1: no node of the Ray cluster at {other_head.address} "
                                          r"can hold one run \(1 CPU, 1 GPU; its nodes: 1 CPU, 0 GPU\)"):
        with ray_auth(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=other_head.token_path):
            with ray_instance(ray, EngineSpec("ray", workers=1, gpus_per_run=1, address=other_head.address)):
                pytest.fail("the cluster was used")
    assert not ray.is_initialized() and other_head.untouched()


@pytest.mark.parametrize("auth", [{}, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 32}],
                         ids=["no-token", "wrong-token"])
def test_a_cluster_that_refuses_the_token_is_said_at_once(auth, other_head, loopback_driver):
    """Ray's own ray.init would retry for 20 s and end with "Failed to connect"."""
    with ray_auth(**auth), pytest.raises(ConfigError, match=rf"^the Ray cluster at {other_head.address} \(--address\) "
                                                           r"refused this command's token .*set RAY_AUTH_MODE=token"):
        with ray_instance(ray, EngineSpec("ray", workers=1, address=other_head.address)):
            pytest.fail("attached")
    assert not ray.is_initialized() and other_head.untouched()


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_address_where_nothing_answers_is_refused_naming_it(scheme):
    """Issue 45: ``--address 127.0.0.1:9`` retried for minutes and named the machine's other address."""
    address = f"{scheme}127.0.0.1:{_free_port()}"
    with pytest.raises(ConfigError, match=rf"^no Ray cluster answers at {address} \(--address\): Connection refused$"):
        with ray_instance(ray, EngineSpec("ray", address=address)):
            pytest.fail("attached")
    assert not ray.is_initialized()


def test_a_client_address_without_rays_client_names_the_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "grpc" else real(name, *a))
    with pytest.raises(ConfigError, match=r"uses Ray's client, which is not installed here: pip install 'ray\[client\]'"):
        with ray_instance(ray, EngineSpec("ray", address="ray://head:10001")):
            pytest.fail("attached")


@pytest.mark.parametrize(("address", "message"), [
    ("auto", r"--address auto: name the cluster to attach to"),
    ("head", r"--address 'head': expected HOST:PORT"),
])
def test_an_address_that_names_no_cluster_is_refused(address, message):
    with pytest.raises(ConfigError, match=message):
        with ray_instance(ray, EngineSpec("ray", address=address)):
            pytest.fail("attached")
