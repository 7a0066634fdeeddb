"""Resuming memory-suite runs through the runner and the command line: a run killed after a checkpoint
(its driver gone, or stopped) is continued by the next ``--skip-finished`` driver, tagged
``resumed_from`` / ``resumed_at``, and ends with the uninterrupted run's results and history as the one
FINISHED run of its plan; so is a run whose cap was raised, from the run at the lower cap; a corrupt or
incompatible checkpoint is passed over or refused with one line naming the run and why."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest
import torch
import yaml
from typer.testing import CliRunner

from owners import dead_owner
from recurbench.cli import app
from recurbench.memory.training import TrainingState
from recurbench.suites import checkpoints
from recurbench.suites.base import SuiteResult
from recurbench.suites.runner import SuiteFailed, describe_dry_run, plan_key, run_suite
from recurbench.tracking import MemoryTracker

# Copy 2 of 4 symbols over a delay of 3; evaluations every 25 updates at a threshold no run reaches
# (the run goes to its cap, 200), a checkpoint every 40: at 40 (slot 0), 80 (slot 1), 120 (slot 0), 160.
TINY = {
    "tasks": ["copy"], "lengths": [3], "models": ["lstm"], "seeds": 1,
    "task": {"copy_length": 2, "labels": 4},
    "model": {"hidden_size": 32},
    "training": {"updates": 200, "batch_size": 32, "learning_rate": 0.03, "log_every": 50, "eval_batches": 4,
                 "eval_every": 25, "solve_threshold": 1.0, "checkpoint_every": 40},
}
HISTORY = ("loss", "train_accuracy", "eval_accuracy")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _write(tmp_path, profile: dict = TINY, name: str = "memory.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"suite": "memory", "profiles": {"tiny": profile}}))
    return str(path)


class Died(Exception):
    """Stands for a kill right after the checkpoint at ``DIE_AT`` was written."""


DIE_AT = 120


def _dying_after(monkeypatch, step: int = DIE_AT) -> None:
    save = checkpoints.CheckpointWriter.save

    def save_then_die(self, at, data):
        save(self, at, data)
        if at == step:
            raise Died(f"killed after the checkpoint at {at}")

    monkeypatch.setattr(checkpoints.CheckpointWriter, "save", save_then_die)


def _killed_run(tracker, config, monkeypatch):
    """A first driver's run, dead right after its checkpoint at DIE_AT (the run and its parent)."""
    with monkeypatch.context() as m:
        _dying_after(m)
        with pytest.raises(SuiteFailed):
            run_suite("memory", "tiny", tracker, config_path=config)
    (run,) = [r for r in tracker.runs if r.parent_id is not None and r.status == "FAILED"]
    return run


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same run never interrupted: its outcome and its recorded run."""
    tracker = MemoryTracker()
    result = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path_factory.mktemp("reference")))
    (run,) = [r for r in tracker.runs if r.parent_id is not None]
    return result.outcomes[0], run


def _same_as_reference(outcome, run, reference):
    ref_outcome, ref_run = reference
    assert outcome.status == "FINISHED"
    differ = {k for k in ref_outcome.metrics if outcome.metrics[k] != ref_outcome.metrics[k]}
    assert differ <= {"updates_per_second", "solved_at"}  # a clock, and NaN (never solved) != NaN
    assert outcome.metrics["updates"] == 200
    for key in HISTORY:  # every logged value at its step, the part before the checkpoint logged again
        assert run.metrics[key] == ref_run.metrics[key], key
    curve = [(p["update"], p["loss"], p["accuracy"]) for p in json.loads(run.artifacts["loss_curve.json"])]
    assert curve == [(p["update"], p["loss"], p["accuracy"]) for p in json.loads(ref_run.artifacts["loss_curve.json"])]
    assert run.artifacts["gradient_norms.json"] == ref_run.artifacts["gradient_norms.json"]


@pytest.mark.parametrize("how", ["driver gone", "KILLED"])
def test_a_killed_run_is_resumed_by_the_next_skip_finished_driver(tmp_path, monkeypatch, reference, how):
    tracker = MemoryTracker()
    config = _write(tmp_path)
    dead = _killed_run(tracker, config, monkeypatch)
    if how == "driver gone":  # SIGKILL: nothing ended the runs; their owner no longer exists
        for r in (dead, next(r for r in tracker.runs if r.run_id == dead.parent_id)):
            r.status = "RUNNING"
            r.tags.update(dead_owner())
            r.tags.pop("error", None)
    else:  # Ctrl-C or SIGTERM: the runner ended it KILLED
        dead.status = "KILLED"
    result = run_suite("memory", "tiny", tracker, config_path=config, skip_finished=True)
    assert result.stale == ([dead.run_id] if how == "driver gone" else [])
    (outcome,) = result.outcomes
    assert (outcome.resumed_from, outcome.resumed_at, outcome.notes) == (dead.run_id, DIE_AT, [])
    run = next(r for r in tracker.runs if r.run_id == outcome.run_id)
    assert (run.tags["resumed_from"], run.tags["resumed_at"]) == (dead.run_id, str(DIE_AT))
    assert run.params["checkpoint_every"] == 40
    _same_as_reference(outcome, run, reference)
    key = plan_key("memory", "tiny", outcome.plan)
    assert [r.run_id for r in tracker.runs if r.tags.get("plan_key") == key and r.status == "FINISHED"] == [run.run_id]
    # It checkpointed on its own (at 160, into its first slot); the next driver reuses it.
    assert json.loads(run.artifacts["checkpoints/slot-0.json"])["step"] == 160
    again = run_suite("memory", "tiny", tracker, config_path=config, skip_finished=True)
    assert again.outcomes[0].reused and again.outcomes[0].run_id == run.run_id


def test_without_skip_finished_a_run_starts_from_zero(tmp_path, monkeypatch, reference):
    tracker = MemoryTracker()
    config = _write(tmp_path)
    _killed_run(tracker, config, monkeypatch)
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=config).outcomes
    run = next(r for r in tracker.runs if r.run_id == outcome.run_id)
    assert outcome.resumed_from is None and "resumed_from" not in run.tags
    _same_as_reference(outcome, run, reference)


def test_the_checkpoint_interval_is_no_setting_of_the_plan(tmp_path, monkeypatch, reference):
    # Killed at one interval, resumed at another: the same plan, the same result; and a run finished at
    # one interval is reused at another (it changes how much a kill costs, nothing else).
    tracker = MemoryTracker()
    _killed_run(tracker, _write(tmp_path), monkeypatch)
    other = _write(tmp_path, {**TINY, "training": {**TINY["training"], "checkpoint_every": 30}}, "other.yaml")
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=other, skip_finished=True).outcomes
    assert outcome.resumed_at == DIE_AT
    _same_as_reference(outcome, next(r for r in tracker.runs if r.run_id == outcome.run_id), reference)
    assert run_suite("memory", "tiny", tracker, config_path=_write(tmp_path), skip_finished=True).outcomes[0].reused


def test_a_corrupt_checkpoint_is_passed_over_for_the_one_before(tmp_path, monkeypatch, reference, capsys):
    tracker = MemoryTracker()
    config = _write(tmp_path)
    dead = _killed_run(tracker, config, monkeypatch)
    # The write of slot 0 (update 120) cut short: its manifest is the new one, its data half there.
    dead.artifacts["checkpoints/slot-0.ckpt"] = dead.artifacts["checkpoints/slot-0.ckpt"][:1000]
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=config, skip_finished=True).outcomes
    assert (outcome.resumed_from, outcome.resumed_at) == (dead.run_id, 80)
    assert outcome.notes == [
        f"copy-T3-lstm-s0: the checkpoint of run {dead.run_id} at step 120 was passed over: its data (slot-0.ckpt, "
        "1,000 bytes) is not what its manifest says (" + format(json.loads(dead.artifacts["checkpoints/slot-0.json"])["bytes"], ",")
        + " bytes, another sha256): a write cut short, or corrupted since"]
    run = next(r for r in tracker.runs if r.run_id == outcome.run_id)
    assert run.tags["resume_notes"] == outcome.notes[0]
    _same_as_reference(outcome, run, reference)


def test_with_no_intact_checkpoint_left_the_run_starts_from_zero_and_says_why(tmp_path, monkeypatch, reference):
    tracker = MemoryTracker()
    config = _write(tmp_path)
    dead = _killed_run(tracker, config, monkeypatch)
    dead.artifacts["checkpoints/slot-0.json"] = b'{"step": 12'  # a manifest cut short
    del dead.artifacts["checkpoints/slot-1.ckpt"]
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=config, skip_finished=True).outcomes
    assert outcome.resumed_from is None
    assert [n.split(": ", 1)[1] for n in outcome.notes] == [
        f"run {dead.run_id}'s checkpoint manifest slot-0.json does not read (JSONDecodeError: Expecting ',' "
        "delimiter: line 1 column 12 (char 11)): passed over",
        f"the checkpoint of run {dead.run_id} at step 80 was passed over: its data (slot-1.ckpt) is missing",
        "no intact checkpoint left to resume from; started from the beginning"]
    _same_as_reference(outcome, next(r for r in tracker.runs if r.run_id == outcome.run_id), reference)


def test_a_checkpoint_of_another_network_is_refused_and_the_run_starts_from_zero(tmp_path, monkeypatch, reference):
    # A dead run of this plan whose checkpoint another network wrote (its plan key copied over): the
    # settings it carries are compared, not trusted to the key.
    tracker = MemoryTracker()
    config = _write(tmp_path)
    narrow = _write(tmp_path, {**TINY, "model": {"hidden_size": 16}}, "narrow.yaml")
    dead = _killed_run(tracker, narrow, monkeypatch)
    plan = run_suite("memory", "tiny", MemoryTracker(), config_path=config, dry_run=True).outcomes[0].plan
    dead.tags["plan_key"] = plan_key("memory", "tiny", plan)
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=config, skip_finished=True).outcomes
    note = (f"copy-T3-lstm-s0: the checkpoint of run {dead.run_id} at step 120 was not used: written at other "
            "settings: network.hidden_size 16 there, 32 here; started from the beginning")
    assert outcome.resumed_from is None and outcome.notes == [note]
    run = next(r for r in tracker.runs if r.run_id == outcome.run_id)
    assert run.tags["resume_refused"] == note and "resumed_from" not in run.tags
    _same_as_reference(outcome, run, reference)



def _capped(tmp_path, updates: int, name: str = "capped.yaml", **training) -> str:
    """TINY with another cap (and any other training settings)."""
    return _write(tmp_path, {**TINY, "training": {**TINY["training"], "updates": updates, **training}}, name)


def test_a_run_whose_cap_is_raised_goes_on_from_the_lower_caps_run(tmp_path, reference):
    # The run at 100 updates finished (checkpoints at 40 and 80: none at the cap). Raised to 200, the
    # plan goes on from its checkpoint at 80 and ends as the run that went to 200 from the start.
    tracker = MemoryTracker()
    (short,) = run_suite("memory", "tiny", tracker, config_path=_capped(tmp_path, 100)).outcomes
    assert short.status == "FINISHED" and short.metrics["updates"] == 100
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path), skip_finished=True).outcomes
    assert (outcome.resumed_from, outcome.resumed_at, outcome.notes) == (short.run_id, 80, [])
    run = next(r for r in tracker.runs if r.run_id == outcome.run_id)
    assert (run.tags["resumed_from"], run.params["training.updates"]) == (short.run_id, 200)
    _same_as_reference(outcome, run, reference)
    assert next(r for r in tracker.runs if r.run_id == short.run_id).status == "FINISHED"  # left as it was


def test_a_dry_run_says_where_each_run_would_start(tmp_path, monkeypatch):
    # A plan at 100 updates finished; dry runs at 200 (raised) and at 300 (another plan, killed at 120).
    tracker = MemoryTracker()
    (short,) = run_suite("memory", "tiny", tracker, config_path=_capped(tmp_path, 100)).outcomes
    (planned,) = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path), skip_finished=True,
                           dry_run=True).outcomes
    assert (planned.status, planned.resumed_from, planned.resumed_at) == ("PLANNED", short.run_id, 80)
    rows, _ = describe_dry_run(SuiteResult("memory", "tiny", None, [planned]), tracker)
    assert rows == [["copy-T3-lstm-s0", "0", f"to run, from run {short.run_id}'s checkpoint at step 80"]]
    # Without --skip-finished every run starts from update 0, and the dry run says nothing of checkpoints.
    (fresh,) = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path), dry_run=True).outcomes
    assert (fresh.status, fresh.resumed_from) == ("PLANNED", None)
    dead = _killed_run(tracker, _capped(tmp_path, 300, name="long.yaml"), monkeypatch)
    (planned,) = run_suite("memory", "tiny", tracker, config_path=_capped(tmp_path, 300, name="long.yaml"),
                           skip_finished=True, dry_run=True).outcomes
    assert (planned.resumed_from, planned.resumed_at) == (dead.run_id, DIE_AT)
    assert len(tracker.runs) == 4  # the runs above (the killed one and its parent): the dry runs wrote nothing


def test_a_lower_cap_takes_only_a_longer_runs_checkpoints_before_it(tmp_path, monkeypatch):
    # A run at 200 updates killed after its checkpoint at 120 holds 80 and 120: the plan at 100 takes
    # 80 (at 120 that run is past this plan's end) and ends as the run that went to 100 from the start.
    tracker = MemoryTracker()
    dead = _killed_run(tracker, _write(tmp_path), monkeypatch)
    short = _capped(tmp_path, 100)
    fresh = MemoryTracker()
    (want,) = run_suite("memory", "tiny", fresh, config_path=short).outcomes
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=short, skip_finished=True).outcomes
    assert (outcome.resumed_from, outcome.resumed_at, outcome.notes) == (dead.run_id, 80, [])
    differ = {k for k in want.metrics if outcome.metrics[k] != want.metrics[k]}
    assert differ <= {"updates_per_second", "solved_at"} and outcome.metrics["updates"] == 100
    run = next(r for r in tracker.runs if r.run_id == outcome.run_id)
    want_run = next(r for r in fresh.runs if r.run_id == want.run_id)
    for key in HISTORY:
        assert run.metrics[key] == want_run.metrics[key], key


def test_a_longer_finished_run_past_the_cap_is_no_start_for_a_lower_cap(tmp_path, reference):
    # Its checkpoints (120, 160) lie past the plan's cap of 100: nothing to continue, no note.
    tracker = MemoryTracker()
    run_suite("memory", "tiny", tracker, config_path=_write(tmp_path))
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=_capped(tmp_path, 100), skip_finished=True).outcomes
    assert (outcome.status, outcome.resumed_from, outcome.notes, outcome.metrics["updates"]) == ("FINISHED", None, [], 100)


def test_a_run_at_other_settings_than_the_cap_is_not_continued(tmp_path, reference):
    # Another learning rate as well as another cap: not this plan's run at a lower cap.
    tracker = MemoryTracker()
    run_suite("memory", "tiny", tracker, config_path=_capped(tmp_path, 100, learning_rate=0.01))
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path), skip_finished=True).outcomes
    assert (outcome.resumed_from, outcome.notes) == (None, [])
    _same_as_reference(outcome, next(r for r in tracker.runs if r.run_id == outcome.run_id), reference)

def _as_before_gate_init(dead) -> None:
    """``dead`` as a version without ``model.gate_init`` left it: no ``network.gate_init`` param, and
    checkpoints whose settings lack it (each manifest rewritten to fit its data)."""
    del dead.params["network.gate_init"]
    for slot in (0, 1):
        state = TrainingState.from_bytes(dead.artifacts[f"checkpoints/slot-{slot}.ckpt"])
        del state.settings["network"]["gate_init"]
        data = state.to_bytes()
        manifest = json.loads(dead.artifacts[f"checkpoints/slot-{slot}.json"])
        manifest.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        dead.artifacts[f"checkpoints/slot-{slot}.ckpt"] = data
        dead.artifacts[f"checkpoints/slot-{slot}.json"] = json.dumps(manifest).encode()


def test_a_run_stored_before_gate_init_is_resumed_at_its_default(tmp_path, monkeypatch, reference):
    # Its LSTM started at pytorch, this version's default: the plan at pytorch finds it by its key (the
    # key of the plan an older version logged) and continues from its checkpoint, as if never stopped.
    tracker = MemoryTracker()
    config = _write(tmp_path)
    dead = _killed_run(tracker, config, monkeypatch)
    dead.status = "KILLED"
    _as_before_gate_init(dead)
    plan = run_suite("memory", "tiny", MemoryTracker(), config_path=config, dry_run=True).outcomes[0].plan
    network = {k: v for k, v in plan.params["network"].items() if k != "gate_init"}
    older = replace(plan, params={**plan.params, "network": network})
    xavier = replace(plan, params={**plan.params, "network": {**network, "gate_init": "xavier"}})
    assert plan_key("memory", "tiny", plan) == plan_key("memory", "tiny", older) != plan_key("memory", "tiny", xavier)
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=config, skip_finished=True).outcomes
    assert (outcome.resumed_from, outcome.resumed_at, outcome.notes) == (dead.run_id, DIE_AT, [])
    _same_as_reference(outcome, next(r for r in tracker.runs if r.run_id == outcome.run_id), reference)


def test_a_checkpoint_from_before_gate_init_is_refused_at_xavier(tmp_path, monkeypatch):
    # Its key copied over, so that only the settings it carries can tell: read at pytorch, not xavier.
    tracker = MemoryTracker()
    dead = _killed_run(tracker, _write(tmp_path), monkeypatch)
    dead.status = "KILLED"
    _as_before_gate_init(dead)
    xavier = _write(tmp_path, {**TINY, "model": {**TINY["model"], "gate_init": "xavier"}}, "xavier.yaml")
    plan = run_suite("memory", "tiny", MemoryTracker(), config_path=xavier, dry_run=True).outcomes[0].plan
    dead.tags["plan_key"] = plan_key("memory", "tiny", plan)
    (outcome,) = run_suite("memory", "tiny", tracker, config_path=xavier, skip_finished=True).outcomes
    assert outcome.resumed_from is None and outcome.notes == [
        f"copy-T3-lstm-s0: the checkpoint of run {dead.run_id} at step 120 was not used: written at other "
        "settings: network.gate_init pytorch there, xavier here; started from the beginning"]


def test_the_command_line_resumes_a_killed_run_in_an_mlflow_store(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    store = tmp_path / "mlflow.db"
    args = ["run", "memory", "--profile", "tiny", "--config", _write(tmp_path), "--tracking-uri", f"sqlite:///{store}"]
    cli = CliRunner()
    with monkeypatch.context() as m:
        _dying_after(m)
        first = cli.invoke(app, args)
    assert first.exit_code == 1 and "Died: killed after the checkpoint at 120" in str(first.exception)
    again = cli.invoke(app, [*args, "--skip-finished"])
    assert again.exit_code == 0, again.output
    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("recurbench-memory").experiment_id
    runs = {r.info.status: r for r in client.search_runs([experiment]) if r.data.tags.get("role") != "parent"}
    assert sorted(runs) == ["FAILED", "FINISHED"]
    dead, done = runs["FAILED"], runs["FINISHED"]
    assert (done.data.tags["resumed_from"], done.data.tags["resumed_at"]) == (dead.info.run_id, "120")
    assert " ".join(again.output.split()).count(
        f"(run {done.info.run_id}: from run {dead.info.run_id} at step 120)") == 1
    assert [m.step for m in client.get_metric_history(done.info.run_id, "loss")] == [50, 100, 150, 200]
    assert [m.step for m in client.get_metric_history(done.info.run_id, "eval_accuracy")] == list(range(25, 201, 25))
    assert done.data.metrics["updates"] == 200


@pytest.mark.slow
def test_a_ray_task_resumes_through_the_store_writer(tmp_path, monkeypatch):
    # Under Ray an embedded store is written (and read) by one writer actor: the task finds the dead
    # run's checkpoint through it.
    pytest.importorskip("ray")
    from recurbench.engine import EngineSpec
    from recurbench.tracking import MlflowTracker

    monkeypatch.setenv("RAY_memory_monitor_refresh_ms", "0")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = _write(tmp_path)
    with monkeypatch.context() as m:
        _dying_after(m)
        with pytest.raises(SuiteFailed):
            run_suite("memory", "tiny", MlflowTracker(uri), config_path=config)
    result = run_suite("memory", "tiny", MlflowTracker(uri), config_path=config, skip_finished=True,
                       engine=EngineSpec("ray", workers=1))
    (outcome,) = result.outcomes
    assert outcome.status == "FINISHED" and outcome.resumed_at == DIE_AT and outcome.notes == []
    assert outcome.metrics["updates"] == 200
