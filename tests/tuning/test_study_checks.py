"""What `tune` checks about a study and its stores, and what it says: a study of other settings is
never resumed by name, a storage URL is a journal only where it says so, an MLflow store passed as
the Optuna storage is refused untouched, a complete study opens no new parent run, a timeout's stop
is said, the best configuration's file mode follows the umask, and figures that need several trials
are not drawn from one."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from optuna.trial import TrialState
from test_study import KilledAt, Quadratic

from recurbench.engine import EngineSpec
from recurbench.errors import ConfigError
from recurbench.tracking import MemoryTracker
from recurbench.tuning.study import (
    PURPOSE_ATTR,
    StudySpec,
    is_journal,
    load_study,
    make_storage,
    run_study,
)
from recurbench.tuning.tune import TuneRequest, study_spec

QUICK = ("training.max_train_batches=10", "training.max_val_batches=2", "training.test_stride=16")


def _spec(storage, model="rsa_informer", horizon=24, overrides=(), trials=1, config=None):
    """The spec `tune ltsf --study-name s1` makes (its purpose as the command records it)."""
    request = TuneRequest("ltsf", model, trials, dataset="ETTh1", horizon=horizon, storage=storage, study_name="s1",
                          overrides=tuple(overrides), config=config)
    return study_spec(request, EngineSpec(), SimpleNamespace(device="cpu"), {"dataset": "ETTh1", "horizon": str(horizon)})


def test_an_explicit_study_name_of_other_settings_is_refused_before_anything_runs(tmp_path):
    """`--study-name s1` of a study of rsa_informer at horizon 24 (with --set items), asked for rsa_xl at
    horizon 48: refused in one line naming the study and each difference, with no trial added and no
    MLflow run. Before, it resumed the study and --best-out wrote rsa_informer's trial as rsa_xl's."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    first = _spec(url, overrides=QUICK)
    run_study(first, Quadratic(), MemoryTracker())
    assert load_study(first, "minimize").user_attrs[PURPOSE_ATTR] == first.purpose
    tracker = MemoryTracker()
    with pytest.raises(ConfigError, match=(
            rf"^study s1 in {url} is a study of other settings \(model rsa_informer there, rsa_xl here; horizon 24 "
            r"there, 48 here; settings --set training.max_train_batches=10 --set training.max_val_batches=2 "
            r"--set training.test_stride=16 there, the profile as shipped here\); give another --study-name")):
        run_study(_spec(url, "rsa_xl", 48, trials=4), Quadratic(), tracker)
    assert tracker.runs == []
    assert len(load_study(first, "minimize").get_trials()) == 1
    # Only a --set changed: refused too, naming the settings alone.
    with pytest.raises(ConfigError, match=(
            r"is a study of other settings \(settings --set training.max_train_batches=10 --set "
            r"training.max_val_batches=2 --set training.test_stride=16 there, --set training.max_train_batches=20 "
            r"here\); ")):
        run_study(_spec(url, overrides=("training.max_train_batches=20",), trials=2), Quadratic(), MemoryTracker())
    # The same settings resume it.
    again = run_study(_spec(url, overrides=QUICK, trials=2), Quadratic(), MemoryTracker())
    assert again.counts["complete"] + again.counts["pruned"] == 2


def test_a_config_file_whose_content_changed_is_named_with_its_digests(tmp_path):
    url = f"sqlite:///{tmp_path / 'o.db'}"
    config = tmp_path / "ltsf.yaml"
    config.write_text("suite: ltsf\n")
    load_study(_spec(url, config=str(config)), "minimize")
    config.write_text("suite: ltsf  # edited\n")
    with pytest.raises(ConfigError, match=rf"\(settings --config {config} \(set\w{{8}}\) there, --config {config} "
                                          r"\(set\w{8}\) here\)"):
        load_study(_spec(url, config=str(config)), "minimize")


def test_a_study_that_records_no_settings_is_resumed_with_one_line_and_checked_from_then_on(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'o.db'}"
    load_study(StudySpec("s1", 1, storage=url), "minimize")  # as an older recurbench created it
    capsys.readouterr()
    load_study(_spec(url), "minimize")
    err = capsys.readouterr().err
    assert err == ("study s1 records no settings (created by an older recurbench): resumed unchecked, and recorded "
                   "as this invocation's from now on\n")
    load_study(_spec(url), "minimize")
    assert capsys.readouterr().err == ""
    with pytest.raises(ConfigError, match=r"\(model rsa_informer there, rsa_xl here\)"):
        load_study(_spec(url, "rsa_xl"), "minimize")


def test_a_new_study_says_nothing_and_a_library_spec_without_purpose_is_not_checked(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'o.db'}"
    load_study(_spec(url), "minimize")
    load_study(StudySpec("s1", 1, storage=url), "minimize")
    assert capsys.readouterr().err == ""


def test_a_sqlite_url_ending_in_log_is_a_database_not_a_journal(tmp_path, monkeypatch):
    """`--storage sqlite:///x.log` was opened as a journal file at the path "sqlite:///x.log" (a folder
    named "sqlite:" in the working folder)."""
    monkeypatch.chdir(tmp_path)
    assert is_journal("journal:o.db") and is_journal("o.log") and is_journal("runs/o.log")
    assert not is_journal(f"sqlite:///{tmp_path}/o.log") and not is_journal("postgresql://h/db.log")
    make_storage(f"sqlite:///{tmp_path}/o.log")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.log"]
    with sqlite3.connect(tmp_path / "o.log") as db:
        assert {"studies", "trials"} <= {r[0] for r in db.execute("SELECT name FROM sqlite_master")}


def _mlflow_like(path):
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE experiments (experiment_id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("CREATE TABLE runs (run_uuid TEXT PRIMARY KEY, experiment_id INTEGER)")
        db.execute("INSERT INTO experiments VALUES (0, 'Default')")
    db.close()


def test_an_mlflow_store_passed_as_the_optuna_storage_is_refused_untouched(tmp_path):
    """Before, Optuna added its tables to the MLflow database, then failed on a "schema" it named."""
    path = tmp_path / "mlflow.db"
    _mlflow_like(path)
    before = path.read_bytes()
    url = f"sqlite:///{path}"
    message = (rf"^Optuna storage {url}: {path} is an MLflow tracking store, not an Optuna storage \(pass it as "
               r"--tracking-uri\)$")
    with pytest.raises(ConfigError, match=message):
        make_storage(url)
    with pytest.raises(ConfigError, match=message):
        run_study(StudySpec("s", 1, storage=url), Quadratic(), MemoryTracker())
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


def test_a_study_that_holds_its_trials_opens_no_new_parent_run(tmp_path):
    """Before, each rerun opened an empty parent run and logged best_trial.json and the figures again."""
    spec = StudySpec("done", 2, storage=f"sqlite:///{tmp_path / 'o.db'}", seed=1)
    tracker = MemoryTracker()
    first = run_study(spec, Quadratic(), tracker)
    runs = len(tracker.runs)
    assert first.notes == []
    again = run_study(spec, Quadratic(), tracker)
    assert len(tracker.runs) == runs and again.parent_run_id == first.parent_run_id
    assert (again.best_trial, again.best_value, again.counts) == (first.best_trial, first.best_value, first.counts)
    assert again.notes == ["nothing was run: study done holds 2 finished trials already (--trials 2); pass a larger "
                           "--trials to run more"]
    elsewhere = run_study(spec, Quadratic(), MemoryTracker())  # a tracking store without its parent run
    assert elsewhere.parent_run_id is None


def test_a_stop_at_the_timeout_is_said_and_running_again_continues(tmp_path):
    """`--trials 5 --timeout 1` ran fewer trials and said nothing."""
    spec = StudySpec("slow", 5, storage=f"sqlite:///{tmp_path / 'o.db'}", seed=1, timeout=1, pruner="none")
    result = run_study(spec, Quadratic(sleep=0.4), MemoryTracker())  # a trial takes 1.2 s, or 0.4 s when pruned
    finished = result.counts["complete"] + result.counts["pruned"]
    assert 1 <= finished < 5
    assert result.notes == [f"stopped at --timeout 1 s after {finished} of 5 trials; run again to continue"]
    rest = run_study(StudySpec("slow", 5, storage=spec.storage, seed=1, pruner="none"), Quadratic(), MemoryTracker())
    assert rest.counts["complete"] + rest.counts["pruned"] == 5 and rest.notes == []


def test_the_best_configuration_file_follows_the_umask(tmp_path):
    from test_tune import _best

    from recurbench.tuning.objectives import MinigridObjective, write_best_profile

    old = os.umask(0o027)
    try:
        write_best_profile(MinigridObjective("lstm", "Memory"), _best(), str(tmp_path / "best.yaml"))
    finally:
        os.umask(old)
    assert (tmp_path / "best.yaml").stat().st_mode & 0o777 == 0o640  # mkstemp's 0600 before


def test_param_importances_are_not_drawn_from_one_completed_trial(tmp_path):
    tracker = MemoryTracker()
    spec = StudySpec("one", 1, storage=f"sqlite:///{tmp_path / 'o.db'}", seed=0, pruner="none")
    run_study(spec, KilledAt(), tracker)  # (x - 2)^2: completes
    assert [t.state for t in load_study(spec, "minimize").get_trials()] == [TrialState.COMPLETE]
    parent = tracker.runs[0]
    assert "optuna/param_importances.png" not in parent.artifacts
    assert "optuna/optimization_history.png" in parent.artifacts
    assert parent.tags["figure_skipped.param_importances.png"] == "1 completed trial; it needs at least 2"


@dataclass
class BlockedAt(Quadratic):
    """Quadratic that, in trial ``at``, writes ``started`` and waits for ``release`` (then fails)."""

    at: int = -1
    started: str = ""
    release: threading.Event | None = None

    def __call__(self, trial, run):
        x = trial.suggest_float("x", -5, 6)
        if trial.number == self.at:
            open(self.started, "w").close()
            self.release.wait(300)
            raise RuntimeError("released")
        return (x - 2) ** 2


class ForceCancelled:
    """A session whose ``map`` runs the jobs in a thread and, once trial ``at`` is inside the objective,
    raises KeyboardInterrupt here, leaving that thread as it is: what Ctrl-C of a Ray driver leaves, the
    engine cancelling its tasks by force (their own handlers never run)."""

    def __init__(self, tracker, started):
        self.tracker, self.started, self.threads = tracker, started, []

    def map(self, fn, jobs, on_done, on_crash, on_start=None):
        def quietly(job):
            try:
                fn(*job)
            except BaseException:  # noqa: BLE001 - the "cancelled" worker's own end is not looked at
                pass

        for job in jobs:
            self.threads.append(thread := threading.Thread(target=quietly, args=(job,), daemon=True))
            thread.start()
        deadline = time.monotonic() + 300  # bounds a hang only
        while not os.path.exists(self.started):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        raise KeyboardInterrupt


def test_a_stopped_ray_driver_kills_its_workers_runs_and_fails_their_trials(tmp_path, monkeypatch):
    """Ctrl-C of `tune --engine ray` left the running trial RUNNING in Optuna and its MLflow run RUNNING
    (the task, cancelled by force, never ran its handler) while the command said the runs were ended
    KILLED. The driver now ends that run KILLED and fails that trial, its parameters enqueued again."""
    from contextlib import contextmanager

    from recurbench.tuning import study as study_module

    started, release, tracker = str(tmp_path / "started"), threading.Event(), MemoryTracker()
    session = ForceCancelled(tracker, started)

    @contextmanager
    def open_session(engine, tracker):
        yield session

    monkeypatch.setattr(study_module, "open_session", open_session)
    spec = StudySpec("stop", 3, storage=f"journal:{tmp_path / 'o.log'}", seed=1, pruner="none")
    try:
        with pytest.raises(KeyboardInterrupt):
            run_study(spec, BlockedAt(at=1, started=started, release=release), tracker, EngineSpec("ray", workers=1))
        trials = load_study(spec, "minimize").get_trials()
        assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.WAITING]
        assert trials[2].system_attrs["failed_trial"] == 1 and trials[2].params == trials[1].params
        runs = {r.name: r for r in tracker.runs}
        assert runs["trial-1"].status == "KILLED" and runs["stop"].status == "KILLED"
        assert runs["trial-1"].tags["error"] == ("KeyboardInterrupt: the driver was stopped (KeyboardInterrupt) and "
                                                 "cancelled its Ray tasks")
        assert runs["trial-0"].status == "FINISHED"
    finally:
        release.set()
        for thread in session.threads:
            thread.join(60)
