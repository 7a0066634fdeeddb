"""Studies: a killed study resumes exactly, bad storages are refused in one line,
a NaN prunes instead of crashing, MLflow gets a parent run and a nested run per trial."""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

import optuna
import pytest
from optuna.trial import TrialState

from recurbench.errors import ConfigError
from recurbench.tracking import MemoryTracker
from recurbench.tuning.study import Objective, StudySpec, load_study, run_study


@dataclass
class Quadratic(Objective):
    """(x - 2)^2 reported over a few steps; x > 4 diverges (NaN)."""

    sleep: float = 0.0
    suite = "toy"

    def __call__(self, trial, run):
        x = trial.suggest_float("x", -5, 6)
        for step in range(3):
            time.sleep(self.sleep)
            value = math.nan if x > 4 else (x - 2) ** 2 + 1.0 / (step + 1)
            self.report(trial, run, value, step)
        return (x - 2) ** 2


def _states(spec):
    trials = load_study(spec, "minimize").get_trials(deepcopy=False)
    return {s: [t for t in trials if t.state == s] for s in TrialState}


def test_a_study_runs_to_n_finished_trials_prunes_nan_and_tracks_each_trial(tmp_path):
    tracker = MemoryTracker()
    spec = StudySpec("quad", 12, storage=f"sqlite:///{tmp_path / 'o.db'}", seed=1)
    result = run_study(spec, Quadratic(), tracker)
    states = _states(spec)
    assert len(states[TrialState.COMPLETE]) + len(states[TrialState.PRUNED]) == 12
    assert not states[TrialState.FAIL]
    diverged = [t for t in states[TrialState.PRUNED] if t.params["x"] > 4]
    assert all(t.state == TrialState.PRUNED for t in diverged)
    assert result.best_value == min(t.value for t in states[TrialState.COMPLETE])
    parent, *trials = tracker.runs
    assert parent.tags["role"] == "study" and len(trials) == 12
    assert all(t.parent_id == parent.run_id and t.status == "FINISHED" for t in trials)
    assert {t.tags["state"] for t in trials} <= {"COMPLETE", "PRUNED"}
    assert "best_trial.json" in parent.artifacts
    assert "optuna/optimization_history.png" in parent.artifacts
    # Running the same study again adds nothing: it already holds 12 finished trials.
    again = run_study(spec, Quadratic(), MemoryTracker())
    assert sum(again.counts[s] for s in ("complete", "pruned")) == 12


@dataclass
class KilledAt(Quadratic):
    """Quadratic whose process is killed outright (SIGKILL) in trial ``at``, after drawing x."""

    at: int = -1

    def __call__(self, trial, run):
        x = trial.suggest_float("x", -5, 6)
        if trial.number == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        return (x - 2) ** 2


@pytest.mark.parametrize(("storage", "optuna_beats"), [("journal", True), ("sqlite", True), ("sqlite", False)])
def test_a_killed_study_resumes_exactly(tmp_path, storage, optuna_beats):
    """SIGKILL in trial 2 of 6, then the same study again at once: it ends with exactly 6 finished
    trials, none RUNNING, the killed trial FAILED and retried with its parameters, the trials finished
    before the kill kept, and no two finished trials with the same parameters (a seeded sampler
    started again must not replay its start-up proposals). Nothing here depends on timing: the kill
    happens inside trial 2, and the rerun waits for the heartbeat (sqlite) itself.

    ``optuna_beats=False``: Optuna's heartbeat thread records nothing, as when the kill comes before
    the thread's first beat (seen under load in CI: a trial with no beat is never stale to Optuna, and
    the rerun refused the study as still running); the beat each trial records itself recovers it."""
    path = tmp_path / ("journal.log" if storage == "journal" else "optuna.db")
    url = f"journal:{path}" if storage == "journal" else f"sqlite:///{path}"
    spec = StudySpec("killed", 6, storage=url, seed=3, heartbeat_interval=1, grace_period=2)
    silence = "" if optuna_beats else (
        "import optuna.storages._heartbeat as beat; "
        "beat.HeartbeatThread._record_heartbeat = staticmethod(lambda *args: None)")
    script = textwrap.dedent(
        f"""
        import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})
        {silence}
        from test_study import KilledAt
        from recurbench.tracking import MemoryTracker
        from recurbench.tuning.study import StudySpec, run_study
        spec = StudySpec("killed", 6, storage={url!r}, seed=3, heartbeat_interval=1, grace_period=2)
        run_study(spec, KilledAt(at=2), MemoryTracker())
        """
    )
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    before = _states(spec)
    finished_before = {t.number: t.value for t in before[TrialState.COMPLETE]}
    assert sorted(finished_before) == [0, 1]
    (stale,) = before[TrialState.RUNNING]

    result = run_study(spec, KilledAt(), MemoryTracker())
    after = _states(spec)
    assert result.recovered == [stale.number] and result.counts["running"] == 0
    assert [t.number for t in after[TrialState.FAIL]] == [stale.number]
    finished = after[TrialState.COMPLETE] + after[TrialState.PRUNED]
    assert len(finished) == 6 and after[TrialState.RUNNING] == [] and after[TrialState.WAITING] == []
    assert {t.number: t.value for t in finished if t.number in finished_before} == finished_before
    retried = [t for t in finished if t.system_attrs.get("failed_trial") == stale.number]
    assert len(retried) == 1 and retried[0].params == stale.params
    assert len({t.params["x"] for t in finished}) == 6


def test_a_killed_drivers_mlflow_runs_end_failed_and_new_trials_nest_under_a_live_parent(tmp_path):
    """SIGKILL in trial 2 of 5 leaves the driver's parent run and trial 2's run RUNNING in MLflow; the
    next invocation ends both FAILED, naming why (their owner process is gone), and nests the trials it
    runs under its own parent, which ends FINISHED: no run stays RUNNING. (Before, both stayed RUNNING
    and the new trials nested under the dead parent, the new parent ending with no children.)"""
    from recurbench.tracking import MlflowTracker

    url, uri = f"journal:{tmp_path / 'journal.log'}", f"sqlite:///{tmp_path / 'mlflow.db'}"
    script = textwrap.dedent(
        f"""
        import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_study import KilledAt
        from recurbench.tracking import MlflowTracker
        from recurbench.tuning.study import StudySpec, run_study
        run_study(StudySpec("dead", 5, storage={url!r}, seed=3), KilledAt(at=2), MlflowTracker({uri!r}))
        """
    )
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]

    tracker = MlflowTracker(uri)
    result = run_study(StudySpec("dead", 5, storage=url, seed=3), KilledAt(), tracker)
    runs = {status: tracker.stored_runs("recurbench-toy", {"study": "dead"}, status)
            for status in ("RUNNING", "FINISHED", "FAILED")}
    assert runs["RUNNING"] == []
    failed = {r.tags["role"]: r for r in runs["FAILED"]}
    assert len(runs["FAILED"]) == 2 and sorted(failed) == ["study", "trial"] and failed["trial"].tags["trial"] == "2"
    assert failed["trial"].parent_id == failed["study"].run_id
    assert all("driver that is gone" in r.tags["error"] for r in failed.values())
    new_parent = next(r for r in runs["FINISHED"] if r.tags["role"] == "study")
    assert new_parent.run_id == result.parent_run_id
    new_trials = [r for r in runs["FINISHED"] if r.tags["role"] == "trial" and int(r.tags["trial"]) > 2]
    assert len(new_trials) == 3 and all(r.parent_id == result.parent_run_id for r in new_trials)
    assert load_study(StudySpec("dead", 5, storage=url), "minimize").user_attrs["mlflow_parent_run_id"] == result.parent_run_id


@dataclass
class StoppedAt(Quadratic):
    """Quadratic stopped in trial ``at``, after drawing x, as Ctrl-C or SIGTERM stops it
    (:func:`recurbench.runtime.handle_termination` raises KeyboardInterrupt)."""

    at: int = -1

    def __call__(self, trial, run):
        x = trial.suggest_float("x", -5, 6)
        if trial.number == self.at:
            raise KeyboardInterrupt("terminated by signal 15")
        return (x - 2) ** 2


@pytest.mark.parametrize("storage", ["journal", "sqlite"])
def test_a_stopped_study_continues_exactly_without_optunas_traceback(tmp_path, storage):
    """SIGTERM (KeyboardInterrupt) in trial 2 of 5: the trial ends FAIL and its run KILLED, Optuna's
    warning with a traceback ("Trial 2 failed with parameters ...", to Optuna's handler on its "optuna"
    logger) is not printed, and the same study started again evaluates the stopped trial's parameters
    (as it does a killed trial's). Before, they were never tried again."""
    path = tmp_path / ("journal.log" if storage == "journal" else "optuna.db")
    url = f"journal:{path}" if storage == "journal" else f"sqlite:///{path}"
    spec = StudySpec("stopped", 5, storage=url, seed=3)
    tracker, said = MemoryTracker(), logging.Handler()
    said.emit = (records := []).append  # beside Optuna's own handler, which prints to stderr
    logging.getLogger("optuna").addHandler(said)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_study(spec, StoppedAt(at=2), tracker)
    finally:
        logging.getLogger("optuna").removeHandler(said)
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
    (stopped,) = _states(spec)[TrialState.FAIL]
    assert stopped.number == 2
    assert next(r for r in tracker.runs if r.name == "trial-2").status == "KILLED"

    run_study(spec, StoppedAt(), MemoryTracker())
    after = _states(spec)
    finished = after[TrialState.COMPLETE] + after[TrialState.PRUNED]
    assert len(finished) == 5 and after[TrialState.WAITING] == [] and after[TrialState.RUNNING] == []
    retried = [t for t in finished if t.system_attrs.get("failed_trial") == stopped.number]
    assert len(retried) == 1 and retried[0].params == stopped.params


@dataclass
class HeldOpen(Quadratic):
    """Quadratic whose trial 0 writes ``started`` and then waits until ``release`` exists."""

    started: str = ""
    release: str = ""

    def __call__(self, trial, run):
        x = trial.suggest_float("x", -5, 6)
        if trial.number == 0:
            open(self.started, "w").close()
            while not os.path.exists(self.release):
                time.sleep(0.05)
        return (x - 2) ** 2


def test_two_drivers_share_one_study_without_failing_each_others_trials(tmp_path):
    """Driver B holds trial 0 open (its heartbeat alive) while driver A runs the same study to 3
    trials. A leaves B's trial alone (not failed, not counted as stale), runs the other two, reports
    B's as running elsewhere and returns without waiting for it; B then finishes its trial and stops:
    3 finished trials, none failed. (Before, A waited for B's trial and refused the study.) Nothing here
    depends on timing but B's heartbeat thread beating within the 10 s grace period."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    started, release = tmp_path / "started", tmp_path / "release"
    beats = {"heartbeat_interval": 1, "grace_period": 10}  # both drivers
    script = textwrap.dedent(
        f"""
        import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_study import HeldOpen
        from recurbench.tracking import MemoryTracker
        from recurbench.tuning.study import StudySpec, run_study
        spec = StudySpec("shared", 3, storage={url!r}, seed=5, **{beats!r})
        result = run_study(spec, HeldOpen(started={str(started)!r}, release={str(release)!r}), MemoryTracker())
        print("B", result.recovered, result.counts)
        """
    )
    driver_b = subprocess.Popen([sys.executable, "-W", "ignore", "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not started.exists():  # B is inside trial 0
            assert driver_b.poll() is None and time.monotonic() < deadline, driver_b.communicate()[1][-3000:]
            time.sleep(0.05)
        spec = StudySpec("shared", 3, storage=url, seed=1, **beats)
        result = run_study(spec, Quadratic(), MemoryTracker())
        assert result.recovered == [] and result.running_elsewhere == [0]
        assert result.counts["complete"] + result.counts["pruned"] == 2 and result.counts["fail"] == 0
    finally:
        release.touch()
        out, err = driver_b.communicate(timeout=300)
    assert driver_b.returncode == 0, err[-3000:]
    assert out.splitlines()[-1].startswith("B []"), out  # B failed nothing either
    states = _states(spec)
    assert len(states[TrialState.COMPLETE]) + len(states[TrialState.PRUNED]) == 3
    assert states[TrialState.FAIL] == [] and states[TrialState.RUNNING] == []


def test_an_optuna_storage_that_cannot_serve_is_one_line_naming_it(tmp_path):
    from test_tracking import _read_only_folder

    # SQLAlchemy's "Could not parse SQLAlchemy URL from given URL string".
    with pytest.raises(ConfigError, match=rf"^--storage '{tmp_path}/o\.db': a path without a scheme is not an SQLite "
                                          rf"file; write sqlite:///{tmp_path}/o\.db$"):
        run_study(StudySpec("s", 1, storage=f"{tmp_path}/o.db"), Quadratic(), MemoryTracker())
    assert list(tmp_path.iterdir()) == []
    corrupt = tmp_path / "optuna.db"
    corrupt.write_bytes(b"not a database" * 100)
    with pytest.raises(ConfigError, match=rf"^Optuna storage sqlite:///{corrupt}: {corrupt} is not a readable SQLite database"):
        run_study(StudySpec("s", 1, storage=f"sqlite:///{corrupt}"), Quadratic(), MemoryTracker())
    folder = _read_only_folder(tmp_path)
    if folder is None:
        pytest.skip("no folder here refuses this process's writes")
    for url in (f"sqlite:///{folder}/optuna.db", f"journal:{folder}/optuna.log"):
        with pytest.raises(ConfigError, match=rf"^Optuna storage {url}: cannot write in the folder {folder} "):
            run_study(StudySpec("s", 1, storage=url), Quadratic(), MemoryTracker())


def test_bad_specs_are_refused():
    from recurbench.errors import ConfigError

    with pytest.raises(ConfigError, match="--trials must be at least 1"):
        StudySpec("s", 0)
    with pytest.raises(ConfigError, match="unknown pruner 'fast'"):
        StudySpec("s", 3, pruner="fast")
    with pytest.raises(ConfigError, match="cannot open Optuna storage"):
        run_study(StudySpec("s", 1, storage="postgresql://nobody@127.0.0.1:1/none"), Quadratic(), MemoryTracker())




def test_minigrid_objective_tunes_memory_sizes_on_the_training_env_only(tmp_path, monkeypatch):
    from recurbench.tuning import objectives
    from recurbench.tuning.objectives import MinigridObjective

    evaluated = []
    real = objectives.evaluate

    def spy(model, env_id, n_episodes, **kw):
        evaluated.append(env_id)
        return real(model, env_id, n_episodes, **kw)

    monkeypatch.setattr(objectives, "evaluate", spy)  # the name the objective calls
    tracker = MemoryTracker()
    objective = MinigridObjective("rellstm", "GoToObject", total_timesteps=1024)
    spec = StudySpec("mg", 2, storage=f"sqlite:///{tmp_path / 'o.db'}", pruner="none")
    result = run_study(spec, objective, tracker)
    assert result.counts["complete"] == 2 and 0.0 <= result.best_value <= 1.0
    assert set(evaluated) == {"MiniGrid-GoToObject-6x6-N2-v0"}  # the test env is never touched
    assert 1 <= result.best_params["nu"] <= 16 and 0 <= result.best_params["rho"] <= 16
    assert result.best_params["bptt_len"] in (8, 16, 32)
    trial_runs = [r for r in tracker.runs if r.tags.get("role") == "trial"]
    assert all("rollout_reward" in r.metrics for r in trial_runs)  # intermediate values, for the pruner

    # The best configuration as a suite file that `recurbench run minigrid` accepts.
    from recurbench.suites.registry import load_profile
    from recurbench.tuning.objectives import write_best_profile

    best = load_study(spec, "maximize").best_trial
    write_best_profile(objective, best, str(tmp_path / "tuned.yaml"))
    definition, profile = load_profile("minigrid", "tuned", tmp_path / "tuned.yaml")
    (plan,) = definition.plan(profile, {}, data_dir=None)
    _pair, core, tuned = plan.payload
    assert core == "rellstm" and tuned.envs == ["GoToObject"]
    assert (tuned.core.nu, tuned.core.rho, tuned.ppo.seq_len) == (best.params["nu"], best.params["rho"], best.params["bptt_len"])
    assert tuned.ppo.learning_rate == best.params["learning_rate"]


def test_the_best_ltsf_configuration_is_a_suite_file_run_accepts(tmp_path, data_dir):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from recurbench.suites.registry import load_profile
    from recurbench.tuning.objectives import LTSFObjective, write_best_profile

    objective = LTSFObjective("rsa_informer", "ETTh1", 24, "quick", str(data_dir))
    params = {"cyclical_pairs": 2, "dilated_regular_fraction": 0.0, "dilated_pairs_fraction": 0.5,
              "dilation_0": 24, "dilation_1": 2, "gate_init": 2.0}
    dists = {"cyclical_pairs": IntDistribution(0, 4), "dilated_regular_fraction": FloatDistribution(0, 1),
             "dilated_pairs_fraction": FloatDistribution(0, 1), "dilation_0": CategoricalDistribution([2, 4, 24]),
             "dilation_1": CategoricalDistribution([2, 4, 24]), "gate_init": FloatDistribution(-3, 3)}
    best = optuna.trial.create_trial(params=params, distributions=dists, value=1.0,
                                     user_attrs={"k": [4, 1, 1, 0, 1, 1], "dilations": [24, 2]})
    write_best_profile(objective, best, str(tmp_path / "tuned.yaml"))
    definition, profile = load_profile("ltsf", "tuned", tmp_path / "tuned.yaml")
    (plan,) = definition.plan(profile, {}, data_dir=str(data_dir))
    rsa = plan.payload.network.rsa
    assert (rsa.k, rsa.dilations, rsa.gate_init) == ((4, 1, 1, 0, 1, 1), (24, 2), 2.0)
    assert plan.tags == {"model": "rsa_informer", "dataset": "ETTh1", "horizon": "24"}


def test_tune_lr_writes_the_learning_rate_and_rsa_lr_factor_the_suite_then_trains_with(tmp_path, data_dir):
    from optuna.distributions import FloatDistribution, IntDistribution

    from recurbench.suites.registry import load_profile
    from recurbench.tuning.objectives import LTSFObjective, write_best_profile

    objective = LTSFObjective("rsa_informer", "ETTh1", 24, "quick", str(data_dir), tune_lr=True)
    baseline = objective.paper_params()
    assert baseline is not None and (baseline["learning_rate"], baseline["rsa_lr_factor"]) == (1e-4, 1000.0)
    params = {"cyclical_pairs": 0, "dilated_regular_fraction": 0.0, "gate_init": 1.0,
              "learning_rate": 3e-4, "rsa_lr_factor": 50.0}
    dists = {"cyclical_pairs": IntDistribution(0, 4), "dilated_regular_fraction": FloatDistribution(0, 1),
             "gate_init": FloatDistribution(-3, 3), "learning_rate": FloatDistribution(1e-5, 1e-3, log=True),
             "rsa_lr_factor": FloatDistribution(1.0, 1000.0, log=True)}
    best = optuna.trial.create_trial(params=params, distributions=dists, value=1.0,
                                     user_attrs={"k": [8, 0, 0, 0, 0, 0], "dilations": []})
    write_best_profile(objective, best, str(tmp_path / "tuned.yaml"))
    definition, profile = load_profile("ltsf", "tuned", tmp_path / "tuned.yaml")
    (plan,) = definition.plan(profile, {}, data_dir=str(data_dir))
    training = plan.payload.training
    assert (training.learning_rate, training.rsa_lr_factor) == (3e-4, 50.0)


def test_set_overrides_reach_every_trial_and_the_written_best_profile(tmp_path, data_dir):
    from optuna.distributions import FloatDistribution, IntDistribution

    from recurbench.suites.registry import load_profile
    from recurbench.tuning.objectives import LTSFObjective, write_best_profile

    sets = ("training.epochs=1", "model.keep_positional=true")
    objective = LTSFObjective("rsa_informer", "ETTh1", 24, "quick", str(data_dir), overrides=sets)
    assert objective.job.training.epochs == 1 and objective.job.network.rsa.keep_positional
    assert objective.describe()["overrides"] == list(sets)
    best = optuna.trial.create_trial(
        params={"cyclical_pairs": 0, "dilated_regular_fraction": 0.0, "gate_init": 1.0},
        distributions={"cyclical_pairs": IntDistribution(0, 4), "dilated_regular_fraction": FloatDistribution(0, 1),
                       "gate_init": FloatDistribution(-3, 3)},
        value=1.0, user_attrs={"k": [8, 0, 0, 0, 0, 0], "dilations": []},
    )
    write_best_profile(objective, best, str(tmp_path / "tuned.yaml"))
    definition, profile = load_profile("ltsf", "tuned", tmp_path / "tuned.yaml")
    (plan,) = definition.plan(profile, {}, data_dir=str(data_dir))
    assert plan.payload.training.epochs == 1 and plan.payload.network.rsa.keep_positional


def test_a_bad_set_override_fails_before_any_trial(data_dir):
    from recurbench.tuning.objectives import LTSFObjective

    objective = LTSFObjective("rsa_informer", "ETTh1", 24, "quick", str(data_dir), overrides=("training.epochs=0",))
    with pytest.raises(ConfigError, match=r"^--set training\.epochs=0: Input should be greater than 0 \(got 0\)$"):
        objective.job  # noqa: B018


def test_default_study_names_keep_other_settings_apart(tmp_path):
    from recurbench.tuning.study import settings_digest

    assert settings_digest(None, ()) == ""
    one, two = settings_digest(None, ["training.epochs=1"]), settings_digest(None, ["training.epochs=2"])
    assert one != two and one == settings_digest(None, ["training.epochs=1"])
    suite = tmp_path / "ltsf.yaml"
    suite.write_text("suite: ltsf\n")
    before = settings_digest(str(suite), ())
    suite.write_text("suite: ltsf  # edited\n")
    assert settings_digest(str(suite), ()) != before


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_a_storage_in_a_new_folder_is_created_with_its_folder(tmp_path, kind):
    from recurbench.tuning.study import make_storage

    path = tmp_path / "new" / "deeper" / ("journal.log" if kind == "journal" else "optuna.db")
    storage = make_storage(f"journal:{path}" if kind == "journal" else f"sqlite:///{path}")
    optuna.create_study(storage=storage, study_name="s").optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert path.is_file()


def test_with_checks_within_epochs_the_pruner_sees_every_check(tmp_path, data_dir):
    from recurbench.tuning.objectives import LTSFObjective

    sets = ("training.epochs=1", "training.max_train_batches=4", "training.val_checks_per_epoch=2",
            "model.d_model=16", "model.d_ff=16")
    objective = LTSFObjective("rsa_informer", "ETTh1", 24, "quick", str(data_dir), overrides=sets)
    spec = StudySpec("checks", n_trials=1, storage=f"sqlite:///{tmp_path / 'o.db'}")
    tracker = MemoryTracker()
    run_study(spec, objective, tracker)
    (trial,) = load_study(spec, "minimize").get_trials(deepcopy=False)
    assert trial.state == TrialState.COMPLETE
    assert sorted(trial.intermediate_values) == [2, 4]  # after 2 and 4 of the epoch's 4 batches
    assert trial.value == min(trial.intermediate_values.values())  # the best check's weights are kept
    (run,) = [r for r in tracker.runs if r.tags.get("role") == "trial"]
    assert run.tags["data_path"] == str(data_dir / "ETTh1.csv") and run.tags["data_registry"] == "match"


def test_a_bad_optuna_storage_is_refused_before_the_tracking_store_is_created(tmp_path):
    """`tune` with a storage Optuna cannot open writes nothing: no empty mlflow.db is left behind."""
    from recurbench.engine import EngineSpec
    from recurbench.tracking import MlflowTracker
    from recurbench.tuning.tune import TuneRequest, tune

    request = TuneRequest("minigrid", "lstm", trials=1, env="GoToObject", storage="foo://bad")
    with pytest.raises(ConfigError, match=r"^cannot open Optuna storage 'foo://bad'"):
        tune(request, MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db"), EngineSpec())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # Accepted before: 0 trials ran, "best trial None", exit 0, and both stores were created.
        ({"timeout": 0}, r"^--timeout must be a positive number of seconds, got 0$"),
        ({"timeout": -5}, r"^--timeout must be a positive number of seconds, got -5$"),
        # Refused only after every trial had trained, with a FileExistsError traceback.
        ({"best_out": "{tmp}/afile/best.yaml"}, r"^--best-out: .*/afile is not a folder$"),
        ({"best_out": "{tmp}"}, r"^--best-out: .* is a folder, not a file$"),
        # The run command's option was named (--datasets.0); tune's is --dataset.
        ({"dataset": "FOO"}, r"^--dataset: unknown dataset 'FOO'; known: ETTh1"),
        # Numpy's "Seed must be between 0 and 2**32 - 1" traceback, after an empty study and MLflow store.
        ({"seed": -1}, r"^--seed must be at least 0, got -1$"),
        # The minigrid suite's option was ignored (the study ran).
        ({"env": "Memory"}, r"^--env applies to tune minigrid, not 'ltsf'$"),
    ],
)
def test_a_bad_tune_request_is_refused_before_any_store_or_trial(tmp_path, data_dir, changes, message):
    from recurbench.engine import EngineSpec
    from recurbench.errors import RecurbenchError
    from recurbench.tracking import MlflowTracker
    from recurbench.tuning.tune import TuneRequest, tune

    (tmp_path / "afile").write_text("")
    fields = {"dataset": "ETTh1", "horizon": 24, "data_dir": str(data_dir),
              "storage": f"sqlite:///{tmp_path}/optuna.db",
              **{k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in changes.items()}}
    request = TuneRequest("ltsf", "rsa_informer", trials=1, **fields)
    with pytest.raises(RecurbenchError, match=message):
        tune(request, MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db"), EngineSpec())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")  # ask/tell by hand
def test_the_papers_trial_is_enqueued_once_into_a_study_other_drivers_began(tmp_path, data_dir):
    """--enqueue-paper on a study that already holds another driver's trial still enqueues the profile's
    layout (before: only into a study with no trials, so a driver that started second never did);
    asked again, while it waits or after it ran, it is not enqueued twice."""
    from recurbench.tuning.objectives import LTSFObjective
    from recurbench.tuning.tune import enqueue_paper_trial

    objective = LTSFObjective("rsa_informer", "ETTh1", 24, "quick", str(data_dir))
    spec = StudySpec("paper", 4, storage=f"sqlite:///{tmp_path / 'o.db'}")
    study = load_study(spec, "minimize")
    other = study.ask()  # another driver's trial, begun first
    other.suggest_int("cyclical_pairs", 0, 4)
    study.tell(other, 1.0)
    assert enqueue_paper_trial(spec, objective) == []
    assert enqueue_paper_trial(spec, objective) == []  # while it waits
    waiting = _states(spec)[TrialState.WAITING]
    assert [t.system_attrs["fixed_params"] for t in waiting] == [objective.paper_params()]
    assert waiting[0].user_attrs["paper_configuration"] is True
    trial = study.ask()  # a driver takes it and runs it
    assert trial.user_attrs["paper_configuration"] is True
    study.tell(trial, 0.5)
    assert enqueue_paper_trial(spec, objective) == []  # after it ran
    assert _states(spec)[TrialState.WAITING] == []


def test_optunas_remarks_while_drawing_a_studys_figures_do_not_reach_the_user(tmp_path, monkeypatch):
    """Optuna warns about small studies while drawing (on Python 3.12+ attributed to the caller, so a
    filter on Optuna's modules misses them, as it did on the GPU machine); nothing escapes, the figure is
    still logged, and warnings outside the drawing are untouched."""
    import warnings

    from optuna.visualization import matplotlib as ovm

    from recurbench.tuning import study as study_module

    real = ovm.plot_param_importances

    def remarking(study, **kwargs):
        warnings.warn("Some regimes for parameter `x` have less than 2 trials.", UserWarning, stacklevel=2)
        return real(study, **kwargs)

    monkeypatch.setattr(ovm, "plot_param_importances", remarking)
    spec = StudySpec("figs", 3, storage=f"sqlite:///{tmp_path / 'o.db'}", seed=1, pruner="none")
    run_study(spec, Quadratic(), MemoryTracker())
    tracker = MemoryTracker()
    with tracker.run("figures", experiment="toy") as run, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        study_module._log_figures(load_study(spec, "minimize"), run)
        warnings.warn("after drawing", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["after drawing"]
    assert "optuna/param_importances.png" in tracker.runs[0].artifacts


def test_creating_a_study_says_nothing_to_the_user(tmp_path):
    """Optuna logs "A new study created in RDB with name: ..." at INFO where a study is created: `tune`
    keeps its output to its table and notes (before, `tune ltsf --enqueue-paper` printed that line,
    creating the study before the study run quieted Optuna)."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("optuna")  # Optuna's own handler does not propagate: listen on its logger
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    logger.addHandler(handler)
    try:
        load_study(StudySpec("quiet", 1, storage=f"sqlite:///{tmp_path / 'o.db'}"), "minimize")
    finally:
        logger.removeHandler(handler)
        optuna.logging.set_verbosity(before)
    assert [r.getMessage() for r in records] == []


def test_the_parallel_coordinate_figure_of_many_parameters_draws_the_most_important_few():
    """With about 11 parameters (an RSA study) the figure's axis labels ran into each other: it draws at
    most PARALLEL_PARAMS, those that matter most, and says so in its title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    from recurbench.tuning.study import PARALLEL_PARAMS, _parallel_coordinate

    drawn: list[list[str]] = []

    def recording(study, params):
        drawn.append(list(params))
        return ovm.plot_parallel_coordinate(study, params=params)

    def objective(trial):  # two parameters decide the value; six barely move it
        value = 10 * trial.suggest_float("big_a", 0, 1) + 10 * trial.suggest_float("big_b", 0, 1)
        return value + sum(1e-3 * trial.suggest_float(f"small_{i}", 0, 1) for i in range(6))

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=30)
    ax = _parallel_coordinate(recording, study)
    assert len(drawn[0]) == PARALLEL_PARAMS and {"big_a", "big_b"} <= set(drawn[0])
    assert ax.get_title() == f"Parallel coordinates: the {PARALLEL_PARAMS} most important of 8 parameters"
    plt.close(ax.figure)
    # A study of few parameters is drawn whole, under Optuna's own title.
    few = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    few.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_float("y", 0, 1), n_trials=5)
    ax = _parallel_coordinate(recording, few)
    assert drawn[1] == ["x", "y"] and ax.get_title() == "Parallel Coordinate Plot"
    plt.close(ax.figure)

    # Parameters only some trials have (an RSA study's dilations) are never ranked by fANOVA: the figure
    # drew the 3 ranked ones and called them "the 3 most important of 7". It fills its axes with them.
    def conditional(trial):
        value = 10 * trial.suggest_float("big_a", 0, 1) + sum(1e-3 * trial.suggest_float(f"small_{i}", 0, 1) for i in range(2))
        if trial.suggest_categorical("dilated", [0, 1]):
            value += sum(trial.suggest_float(f"dilation_{i}", 0, 1) for i in range(3))
        return value

    mixed = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    mixed.optimize(conditional, n_trials=30)
    ax = _parallel_coordinate(recording, mixed)
    assert len(drawn[2]) == PARALLEL_PARAMS and set(drawn[2][:4]) == {"big_a", "small_0", "small_1", "dilated"}
    assert drawn[2][4:] == ["dilation_0"]
    assert ax.get_title() == ("Parallel coordinates: the 4 most important of 7 parameters\n"
                              "and 1 not every trial has (not ranked)")
    plt.close(ax.figure)


def test_a_studys_figures_name_what_the_trials_value_is(tmp_path):
    """The figures' value axes say what was optimised (an ltsf study's best validation MSE), not
    Optuna's "Objective Value"; the history counts trials in whole numbers."""
    from recurbench.tuning import study as study_module

    spec = StudySpec("named", 3, storage=f"sqlite:///{tmp_path / 'o.db'}", seed=1, pruner="none")
    run_study(spec, Quadratic(), MemoryTracker())
    tracker = MemoryTracker()
    texts: dict[str, set[str]] = {}
    ticks: list[float] = []

    def log_figure(fig, name):
        texts[name] = {t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_text()}
        if name.endswith("history.png"):
            ticks.extend(fig.axes[0].get_xticks())

    with tracker.run("figures", experiment="toy") as run:
        run.log_figure = log_figure  # type: ignore[method-assign]
        study_module._log_figures(load_study(spec, "minimize"), run, "best validation MSE")
    assert set(texts) == {"optuna/optimization_history.png", "optuna/param_importances.png",
                          "optuna/parallel_coordinate.png"}
    for name, found in texts.items():
        assert not any("Objective Value" in t for t in found), (name, found)
    assert "best validation MSE" in texts["optuna/optimization_history.png"]
    assert "best validation MSE" in texts["optuna/parallel_coordinate.png"]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks  # trials 0, 1, 2: no 0.25 steps
    from recurbench.tuning.objectives import LTSFObjective, MinigridObjective

    assert LTSFObjective.target_name == "best validation MSE" and MinigridObjective.target_name == "mean return, training env"


def test_a_studys_figures_rank_its_parameters_with_one_fanova_fit(monkeypatch):
    """The importance figure and the parallel-coordinate figure (a study of more than PARALLEL_PARAMS
    parameters) each fitted fANOVA: two fits of the same trials. One fit serves both now, and both
    figures are still drawn from it."""
    from recurbench.tuning import study as study_module

    fits: list[list[str] | None] = []
    real = optuna.importance.FanovaImportanceEvaluator.evaluate

    def counting(self, study, params=None, *, target=None):
        fits.append(params)
        return real(self, study, params=params, target=target)

    monkeypatch.setattr(optuna.importance.FanovaImportanceEvaluator, "evaluate", counting)

    def objective(trial):
        return 10 * trial.suggest_float("big", 0, 1) + sum(1e-3 * trial.suggest_float(f"small_{i}", 0, 1) for i in range(6))

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=12)
    tracker = MemoryTracker()
    with tracker.run("figures", experiment="toy") as run:
        study_module._log_figures(study, run)
    assert len(fits) == 1, fits
    assert {"optuna/param_importances.png", "optuna/parallel_coordinate.png"} <= set(tracker.runs[0].artifacts)
