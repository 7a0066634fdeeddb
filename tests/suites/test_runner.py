"""The suite runner: YAML validation with paths, nested runs per plan, failures kept and reported."""

from __future__ import annotations

import textwrap

import pytest

from owners import dead_owner
from recurbench.config import StrictModel, check_names, known_name
from recurbench.errors import ConfigError
from recurbench.suites import registry, runner
from recurbench.suites.base import RunPlan, SuiteDefinition
from recurbench.suites.runner import SuiteFailed, run_suite
from recurbench.tracking import MemoryTracker, MlflowRun, MlflowTracker

KNOWN = {"good": 1, "crash": 2}
DEVICES: list = []  # what the runner handed to ToySuite.execute


class ToyProfile(StrictModel):
    models: list[known_name(KNOWN, "model")]
    seeds: int = 1
    scale: float = 1.0


class ToySuite(SuiteDefinition):
    name = "toy"
    profile_model = ToyProfile
    headline_metrics = ("score",)

    def plan(self, profile, selection, *, data_dir):
        models = selection.get("models", profile.models)
        check_names(models, KNOWN, "model", "models")
        seeds = selection.get("seeds", profile.seeds)
        return [
            RunPlan(f"{m}-s{s}", s, {"model": m}, {"scale": profile.scale}, payload=m)
            for m in models
            for s in range(seeds)
        ]

    def execute(self, plan, run, progress, *, data_dir, device):
        import torch

        DEVICES.append(device)
        if plan.payload == "crash":
            raise RuntimeError("loss is NaN")
        value = float(torch.rand(()))  # seeded by the runner
        run.log_metrics({"score": value})
        return {"score": value}


def register_toy(monkeypatch, cls=ToySuite):
    """SUITES is a PluginRegistry (a read-only mapping): the toy suite goes into its loaded entries."""
    from recurbench.plugins import PluginSource

    monkeypatch.setitem(registry.SUITES._loaded(), "toy", cls)
    monkeypatch.setitem(registry.SUITES._sources, "toy", PluginSource("tests", ""))


@pytest.fixture
def toy(tmp_path, monkeypatch):
    register_toy(monkeypatch)
    path = tmp_path / "toy.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            suite: toy
            description: a toy suite
            profiles:
              base: &base
                models: [good]
                seeds: 2
              both:
                <<: *base
                models: [good, crash]
            """
        )
    )
    return path


def test_runs_are_nested_tagged_and_seeded(toy):
    tracker = MemoryTracker()
    result = run_suite("toy", "base", tracker, config_path=toy)
    parent, *children = tracker.runs
    assert parent.tags["role"] == "parent" and parent.tags["suite"] == "toy" and parent.tags["profile"] == "base"
    assert [c.name for c in children] == ["good-s0", "good-s1"]
    assert all(c.parent_id == parent.run_id and c.status == "FINISHED" for c in children)
    assert children[0].tags["seed"] == "0" and children[0].tags["model"] == "good"
    assert children[0].params == {"scale": 1.0, "seed": 0}
    assert "wall_time_s" in children[0].metrics
    # Same seed, same result; different seed, different result.
    again = run_suite("toy", "base", MemoryTracker(), config_path=toy)
    assert [o.metrics for o in again.outcomes] == [o.metrics for o in result.outcomes]
    assert result.outcomes[0].metrics != result.outcomes[1].metrics


def test_a_crashing_run_is_failed_the_others_still_run(toy):
    tracker = MemoryTracker()
    result = run_suite("toy", "both", tracker, config_path=toy, selection={"seeds": 1})
    statuses = {o.plan.name: o.status for o in result.outcomes}
    assert statuses == {"good-s0": "FINISHED", "crash-s0": "FAILED"}
    crash = next(r for r in tracker.runs if r.name == "crash-s0")
    assert crash.status == "FAILED" and crash.tags["error"] == "RuntimeError: loss is NaN"
    assert tracker.runs[0].status == "FINISHED"
    assert tracker.runs[0].metrics["runs_failed"] == [(None, 1.0)]


def test_when_every_run_fails_the_parent_is_failed_too(toy):
    tracker = MemoryTracker()
    with pytest.raises(SuiteFailed, match="that this invocation ran failed:\n  - crash-s0: RuntimeError: loss is NaN"):
        run_suite("toy", "both", tracker, config_path=toy, selection={"models": ["crash"], "seeds": 1})
    assert tracker.runs[0].status == "FAILED"


@pytest.mark.parametrize(
    "profile_yaml, message",
    [
        ("models: [good]\n    colour: red", r"profiles\.p\.colour: unknown key \(got 'red'\)"),
        ("models: [good]\n    seeds: two", r"profiles\.p\.seeds: Input should be a valid integer \(got 'two'\)"),
        ("models: [good, nope]", r"profiles\.p\.models\.1: unknown model 'nope'; known: good, crash \(got 'nope'\)"),
        # PyYAML kept the last of the two silently: the run had one seed where the file said two.
        ("seeds: 2\n    models: [good]\n    seeds: 1",
         r"invalid YAML: line 6, column 5: duplicate key 'seeds' \(first given on line 4\)$"),
    ],
)
def test_bad_suite_files_are_reported_with_their_path(tmp_path, monkeypatch, profile_yaml, message):
    register_toy(monkeypatch)
    path = tmp_path / "bad.yaml"
    path.write_text(f"suite: toy\nprofiles:\n  p:\n    {profile_yaml}\n")
    with pytest.raises(ConfigError, match=message) as info:
        run_suite("toy", "p", MemoryTracker(), config_path=path)
    assert str(info.value).startswith(f"{path}: ")


def test_unknown_names_selected_on_the_command_line_are_refused(toy):
    with pytest.raises(ConfigError, match=r"models\.0: unknown model 'bad'"):
        run_suite("toy", "base", MemoryTracker(), config_path=toy, selection={"models": ["bad"]})


def test_an_option_given_empty_is_refused_not_read_as_the_profiles_own(toy):
    with pytest.raises(ConfigError, match=r"^--models: no name given \(an empty list\); leave the option out"):
        run_suite("toy", "base", MemoryTracker(), config_path=toy, selection={"models": []}, dry_run=True)


def test_unknown_profile_and_suite(toy):
    with pytest.raises(ConfigError, match="no profile 'huge'; available: base, both"):
        run_suite("toy", "huge", MemoryTracker(), config_path=toy)
    with pytest.raises(ConfigError, match="unknown suite 'nope'"):
        run_suite("nope", "quick", MemoryTracker())


def test_set_overrides_one_profile_setting_and_leaves_the_others():
    from recurbench.suites.registry import load_profile

    sets = ["training.rsa_lr_factor=100", "model.keep_positional=true", "training.learning_rate=3e-4",
            "horizons.ETTh1=[24]"]
    _, paper = load_profile("ltsf", "paper", overrides=sets)
    assert paper.training.rsa_lr_factor == 100.0 and paper.model.keep_positional is True
    assert paper.training.learning_rate == 3e-4 and paper.horizons["ETTh1"] == [24]
    assert paper.training.batch_size == 32 and paper.horizons["ETTh2"] == [24, 48, 168, 336]  # untouched
    # The shipped profiles share YAML anchors; an override must not leak into another profile.
    _, paper_again = load_profile("ltsf", "paper")
    assert paper_again.training.rsa_lr_factor == {"rsa_informer": 1000.0, "rsa_logsparse": 1.0, "rsa_xl": 1.0}
    assert paper_again.model.keep_positional is False


def test_set_reaches_settings_under_integer_keys():
    # The YAML file keys horizons by integer (48:); the command line can only write "48".
    from recurbench.suites.registry import load_profile

    sets = ["rem_heads.ETTh1.48.rsa_informer.k=[2,1,1,0,2,2]", "windows.ETTh1.720.seq_len=336",
            "windows.ETTh1.720.label_len=168", "windows.ETTh1.720.e_layers=2", "windows.ETTh1.720.d_layers=1"]
    _, paper = load_profile("ltsf", "paper", overrides=sets)
    heads = paper.rem_heads["ETTh1"][48]
    assert list(heads["rsa_informer"].k) == [2, 1, 1, 0, 2, 2]
    assert list(heads["rsa_informer"].dilations) == [24, 24, 24, 24]  # the rest of the entry is kept
    assert list(heads["rsa_xl"].k) == [4, 0, 0, 4, 0, 0]
    assert sorted(paper.windows["ETTh1"]) == [24, 48, 168, 336, 720]  # a new key joins as an integer
    assert paper.windows["ETTh1"][720].seq_len == 336


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        # A key the --set gave is named as that --set (it named the shipped file, the --set after).
        (["training.rsa_lr_factr=100"], r"^--set training\.rsa_lr_factr=100: unknown key \(got 100\)$"),
        (["training.rsa_lr_factor=-1"], r"^--set training\.rsa_lr_factor=-1: .*greater than 0"),
        # Several keys at fault: each line named by the item that gave it.
        (["training.epochs=0", "model.d_model=0"],
         r"^--set training\.epochs=0: Input should be greater than 0 \(got 0\)\n"
         r"--set model\.d_model=0: Input should be greater than 0 \(got 0\)$|"
         r"^--set model\.d_model=0: Input should be greater than 0 \(got 0\)\n"
         r"--set training\.epochs=0: Input should be greater than 0 \(got 0\)$"),
        (["training.rsa_lr_factor"], r"--set 'training.rsa_lr_factor': expected KEY=VALUE"),
        (["training..lr=1"], r"--set 'training..lr=1': expected KEY=VALUE"),
        (["training=1", "training.epochs=2"], r"--set 'training.epochs=2': training was already set to a value"),
        (["model.d_model=[1"], r"--set 'model.d_model=\[1': cannot read the value as YAML"),
    ],
)
def test_bad_set_overrides_name_the_culprit(sets, message):
    from recurbench.suites.registry import load_profile

    with pytest.raises(ConfigError, match=message):
        load_profile("ltsf", "paper", overrides=sets)


def test_set_overrides_reach_the_run_params_and_the_parent(toy):
    tracker = MemoryTracker()
    run_suite("toy", "base", tracker, config_path=toy, overrides=["scale=2.5", "seeds=1"])
    parent, *children = tracker.runs
    assert parent.params["overrides"] == ["scale=2.5", "seeds=1"]
    assert [(c.name, c.params["scale"]) for c in children] == [("good-s0", 2.5)]


def test_the_runner_resolves_the_device_once_hands_it_to_every_run_and_tags_it(toy, monkeypatch):
    import torch

    DEVICES.clear()
    tracker = MemoryTracker()
    run_suite("toy", "base", tracker, config_path=toy, device="CPU")
    assert DEVICES == [torch.device("cpu")] * 2
    assert [r.tags["device"] for r in tracker.runs] == ["cpu"] * 3  # the parent and both seeds
    # Without --device the suite's default applies, and a default this machine lacks is refused up front.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(ToySuite, "default_device", "cuda")
    tracker = MemoryTracker()
    with pytest.raises(ConfigError, match=r"^--device: 'cuda' asks for a GPU, but "):
        run_suite("toy", "base", tracker, config_path=toy)
    assert tracker.runs == [] and len(DEVICES) == 2


def test_skip_finished_reuses_a_finished_run_of_the_same_settings_and_seed(toy):
    tracker = MemoryTracker()
    first = run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 1})
    (stored,) = [r for r in tracker.runs if r.parent_id is not None]
    announced = []

    def progress_factory(plan):
        return lambda done, total, text="": announced.append((plan.name, done, total, text))

    second = run_suite("toy", "base", tracker, config_path=toy, skip_finished=True, progress_factory=progress_factory)
    reused, ran = second.outcomes
    assert (reused.plan.name, reused.reused, reused.run_id) == ("good-s0", True, stored.run_id)
    assert reused.metrics == first.outcomes[0].metrics and reused.seconds == stored.last("wall_time_s")
    assert (ran.plan.name, ran.reused, ran.status) == ("good-s1", False, "FINISHED")
    assert second.reused == [reused]
    assert announced[0] == ("good-s0", 1, 1, f"already finished as run {stored.run_id}: not run again")
    # This invocation opened one parent and one nested run (seed 1) and says how many it skipped.
    parent, child = tracker.runs[2:]
    assert parent.run_id == second.parent_run_id and child.name == "good-s1" and child.parent_id == parent.run_id
    assert parent.params["n_runs"] == 1 and parent.params["skip_finished"] is True
    assert parent.last("runs_skipped") == 1 and parent.last("runs_finished") == 1
    # With everything finished, nothing is run and no parent run is opened.
    third = run_suite("toy", "base", tracker, config_path=toy, skip_finished=True)
    assert len(tracker.runs) == 4 and third.parent_run_id is None
    assert [(o.plan.name, o.run_id) for o in third.outcomes] == [("good-s0", stored.run_id), ("good-s1", child.run_id)]
    # Without the flag the same invocation runs both seeds again.
    run_suite("toy", "base", tracker, config_path=toy)
    assert len(tracker.runs) == 7


def test_the_typical_time_of_a_plan_is_the_median_wall_time_of_its_configuration_at_its_settings(toy):
    import statistics

    from recurbench.suites.runner import typical_seconds
    from recurbench.tracking import standard_tags

    tracker = MemoryTracker()
    run_suite("toy", "both", tracker, config_path=toy, selection={"seeds": 1})  # good-s0 finishes, crash-s0 fails
    (first,) = [r for r in tracker.runs if r.name == "good-s0"]
    params = {k: v for k, v in first.params.items() if k != "seed"}
    # Other seeds count; another profile, or other settings (a run ten times longer), do not.
    for seed, wall, profile, changed in ((5, 10.0, "both", {}), (6, 30.0, "both", {}), (7, 999.0, "base", {}),
                                         (8, 777.0, "both", {"scale": 2.0})):
        extra = tracker._start("recurbench-toy", f"good-s{seed}", standard_tags(suite="toy", profile=profile, seed=seed,
                                                                               model="good"), None)
        extra.log_params({**params, **changed, "seed": str(seed)})
        extra.log_metrics({"wall_time_s": wall})
        extra.status = "FINISHED"
    plans = [o.plan for o in run_suite("toy", "both", tracker, config_path=toy, dry_run=True).outcomes]
    assert [p.name for p in plans] == ["good-s0", "good-s1", "crash-s0", "crash-s1"]
    expected = statistics.median([first.metrics["wall_time_s"][-1][1], 10.0, 30.0])
    # Every seed of model good at its settings; nothing for crash, whose only run failed.
    assert typical_seconds("toy", "both", tracker, plans) == {0: expected, 1: expected}
    assert typical_seconds("toy", "both", MemoryTracker(), plans) == {}
    # At other settings the only finished run of model good to go by is the one ten times longer.
    other = [o.plan for o in run_suite("toy", "both", tracker, config_path=toy, dry_run=True,
                                       overrides=["scale=2.0"]).outcomes]
    assert typical_seconds("toy", "both", tracker, other) == {0: 777.0, 1: 777.0}


def test_skip_finished_runs_again_what_differs_failed_or_lacks_its_results(toy):
    tracker = MemoryTracker()
    run_suite("toy", "both", tracker, config_path=toy, selection={"seeds": 1})  # good-s0 finishes, crash-s0 fails
    # Other settings (a --set), another profile's runs and a FAILED run are not reused.
    changed = run_suite("toy", "base", tracker, config_path=toy, overrides=["scale=2.5"], selection={"seeds": 1},
                        skip_finished=True)
    assert [o.reused for o in changed.outcomes] == [False]
    # Only the crash runs again, and fails: every run this invocation made failed, so its parent did too.
    with pytest.raises(SuiteFailed, match="every run of suite 'toy' that this invocation ran failed") as info:
        run_suite("toy", "both", tracker, config_path=toy, selection={"seeds": 1}, skip_finished=True)
    assert [(o.plan.name, o.reused, o.status) for o in info.value.result.outcomes] == [
        ("good-s0", True, "FINISHED"), ("crash-s0", False, "FAILED")]
    assert tracker.runs[-2].status == "FAILED" and tracker.runs[-1].name == "crash-s0"
    # A finished run without its headline metrics (say, from a version that did not log them) runs again.
    for run in tracker.runs:
        run.metrics.pop("score", None)
    assert [o.reused for o in run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 1},
                                        skip_finished=True).outcomes] == [False]


def test_a_dry_run_plans_reads_the_store_and_writes_nothing(toy):
    tracker = MemoryTracker()
    run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 1})
    before = list(tracker.runs)
    dry = run_suite("toy", "base", tracker, config_path=toy, skip_finished=True, dry_run=True)
    assert [(o.plan.name, o.status, o.reused) for o in dry.outcomes] == [
        ("good-s0", "FINISHED", True), ("good-s1", "PLANNED", False)]
    assert dry.failed == [] and dry.parent_run_id is None and tracker.runs == before
    assert [o.status for o in run_suite("toy", "base", tracker, config_path=toy, dry_run=True).outcomes] == [
        "PLANNED", "PLANNED"]  # without --skip-finished the store is not read
    # Validation still happens: a bad selection is refused as it would be by a real run.
    with pytest.raises(ConfigError, match=r"models\.0: unknown model 'bad'"):
        run_suite("toy", "base", tracker, config_path=toy, selection={"models": ["bad"]}, dry_run=True)


def test_a_run_whose_driver_is_provably_gone_is_ended_failed_then_run_again(toy):
    """A RUNNING run of a configuration about to run is ended FAILED only when its owner is provably
    gone (same host, process dead): a live driver's run, an older version's (no owner) stay RUNNING."""
    from recurbench.tracking import owner_tags, standard_tags

    tracker = MemoryTracker()
    first = run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 1})
    plan = first.outcomes[0].plan
    key = runner.plan_key("toy", "base", plan)
    tags = standard_tags(suite="toy", profile="base", seed=0, model="good", plan_key=key)
    dead = dead_owner()
    orphan_parent = tracker._start("recurbench-toy", "toy-base", {"role": "parent", **dead}, None)
    stale = tracker._start("recurbench-toy", "good-s0", {**tags, **dead}, orphan_parent.run_id)
    live_parent = tracker._start("recurbench-toy", "toy-base", {"role": "parent", **owner_tags()}, None)
    live = tracker._start("recurbench-toy", "good-s0", {**tags, **owner_tags()}, live_parent.run_id)
    legacy = tracker._start("recurbench-toy", "good-s0", dict(tags), orphan_parent.run_id)
    # A dead driver's parent with no run under it (killed between its runs), of another profile too.
    lonely_parent = tracker._start("recurbench-toy", "toy-other", standard_tags(suite="toy", profile="other",
                                                                                 role="parent", **dead), None)
    result = run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 1})
    assert result.stale == [stale.run_id]
    assert stale.status == "FAILED" and "left RUNNING by a driver that is gone" in stale.tags["error"]
    assert orphan_parent.status == "FAILED"  # the dead driver's parent run ends with it
    assert lonely_parent.status == "FAILED" and "left RUNNING by a driver that is gone" in lonely_parent.tags["error"]
    assert live.status == live_parent.status == legacy.status == "RUNNING"
    assert [o.status for o in result.outcomes] == ["FINISHED"]
    assert sum(r.status == "FINISHED" and r.tags.get("plan_key") == key for r in tracker.runs) == 2
    # --end-run: the user names a run whose driver this machine cannot check; nothing else changes.
    with pytest.raises(ConfigError, match=r"^--end-run: run nope is not in this store; run run-0 is FINISHED"):
        run_suite("toy", "base", tracker, config_path=toy, end_runs=["nope", "run-0", legacy.run_id])
    assert legacy.status == "RUNNING"
    with pytest.raises(ConfigError, match="does not go with --dry-run"):
        run_suite("toy", "base", tracker, config_path=toy, end_runs=[legacy.run_id], dry_run=True)
    run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 1}, skip_finished=True,
              end_runs=[legacy.run_id])
    assert legacy.status == "FAILED" and legacy.tags["error"].startswith("ended by the user (recurbench run --end-run)")
    assert live.status == "RUNNING"


def test_owner_gone_needs_proof(monkeypatch):
    """Gone: same host and the pid is dead or another process's. Not gone: this process, another
    host, a run without owner tags."""
    from recurbench.tracking import OWNER_BOOT, OWNER_HOST, OWNER_START, owner_gone, owner_tags

    assert not owner_gone(owner_tags())
    assert owner_gone(dead_owner())
    assert owner_gone({**owner_tags(), OWNER_START: "1"})  # this pid, another start: the pid was reused
    assert not owner_gone({**dead_owner(), OWNER_HOST: "another-host"})
    assert owner_gone({**owner_tags(), OWNER_BOOT: "an-earlier-boot"})
    assert not owner_gone({"host": "x"})


def test_skip_finished_leaves_a_live_drivers_run_to_it_and_the_dry_run_shows_it(toy):
    """--skip-finished: a configuration another live driver is RUNNING is not run again (left to it,
    named with host, pid and since), neither ended; the dry run lists it as running elsewhere."""
    from recurbench.tracking import owner_tags, standard_tags

    tracker = MemoryTracker()
    plan = run_suite("toy", "base", tracker, config_path=toy, dry_run=True).outcomes[1].plan
    tags = standard_tags(suite="toy", profile="base", seed=1, model="good", plan_key=runner.plan_key("toy", "base", plan))
    other_parent = tracker._start("recurbench-toy", "toy-base", {"role": "parent", **owner_tags()}, None)
    other = tracker._start("recurbench-toy", "good-s1", {**tags, **owner_tags()}, other_parent.run_id)
    dry = run_suite("toy", "base", tracker, config_path=toy, skip_finished=True, dry_run=True)
    assert [(o.status, o.run_id) for o in dry.outcomes] == [("PLANNED", None), ("RUNNING", other.run_id)]
    rows, lines = runner.describe_dry_run(dry, tracker)
    assert rows[1][2].startswith(f"running elsewhere: run {other.run_id} (host ") and ", pid " in rows[1][2]
    assert lines[0].startswith("1 run(s) to run, 0 already finished, 1 running in another driver")
    result = run_suite("toy", "base", tracker, config_path=toy, skip_finished=True)
    assert [o.status for o in result.outcomes] == ["FINISHED", "RUNNING"] and result.failed == []
    assert result.elsewhere[0].owner.startswith("host ") and other.status == "RUNNING"
    # Once the other driver finished it, the next --skip-finished reuses its run.
    other.log_params({**plan.params, "seed": 1})
    other.metrics["score"] = [(None, 0.5)]
    other.status = "FINISHED"
    again = run_suite("toy", "base", tracker, config_path=toy, skip_finished=True)
    assert again.parent_run_id is None and [o.run_id for o in again.reused][1] == other.run_id


class Driver(MlflowTracker):
    """One driver's client of a store without a lock (a server's): ``before[method]`` runs once just
    before that call (where another driver's steps land), and with ``clock_behind`` its runs are stamped
    earlier than every run already in the store (its clock lags, or its request took longer)."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.before: dict = {}
        self.clock_behind = False

    def _step(self, method: str) -> None:
        if (step := self.before.pop(method, None)) is not None:
            step()

    def _start(self, experiment, name, tags, parent_id):
        self._step("_start")
        if not self.clock_behind:
            return super()._start(experiment, name, tags, parent_id)
        eid = self.experiment_id(experiment)
        earliest = min(r.info.start_time for r in self.client.search_runs([eid]))
        run = self.client.create_run(eid, start_time=earliest - 1000, run_name=name,
                                     tags={**tags, "mlflow.parentRunId": parent_id})
        return MlflowRun(self.client, run.info.run_id)

    def last_claim(self, key):
        self._step("last_claim")
        return super().last_claim(key)

    def take_claim(self, key, generation, holder):
        self._step("take_claim")
        return super().take_claim(key, generation, holder)


@pytest.mark.parametrize("interleaving", ["late_run_stamped_earlier", "both_take_one_generation"])
def test_two_drivers_racing_for_a_plan_on_a_server_store_leave_one_finished_run(toy, tmp_path, interleaving):
    """No lock (a server): B checks the store and finds nothing, then A claims the plan, then B goes on.
    ``late_run_stamped_earlier``: A's whole claim lands before B's run, which is stamped earlier than
    A's; the earliest-run tie-break let both keep the plan (A saw only its own run, B saw its own as the
    earliest). ``both_take_one_generation``: A and B have both opened runs and both read that no claim
    exists, then both take the first. Either way exactly one takes the claim (MLflow's unique experiment
    name, in the same database a server uses), the other withdraws naming its run, and the store ends
    with one FINISHED run of the plan."""
    import threading

    from mlflow.entities import ViewType

    from recurbench.tracking import owner_tags

    uri = f"sqlite:///{tmp_path / 'server.db'}"
    a, b = Driver(uri), Driver(uri)
    plan = run_suite("toy", "base", a, config_path=toy, dry_run=True, selection={"seeds": 1}).outcomes[0].plan
    parents = {d: d._start("recurbench-toy", "toy-base", {"role": "parent", **owner_tags()}, None).run_id
               for d in (a, b)}
    claims = {}

    def claim(driver, name):
        claims[name] = runner.claim(driver, runner.nullcontext(), ToySuite(), "toy", "base", plan, parents[driver],
                                    check=True, stale=[])

    if interleaving == "late_run_stamped_earlier":
        b.before["_start"] = lambda: claim(a, "a")
        b.clock_behind = True
    else:  # A runs in a thread, held at its read of the claims until B has read them too
        a_reads, b_read = threading.Event(), threading.Event()
        a_thread = threading.Thread(target=claim, args=(a, "a"))
        a.before["last_claim"] = lambda: (a_reads.set(), b_read.wait(60))
        b.before["_start"] = lambda: (a_thread.start(), a_reads.wait(60))
        b.before["take_claim"] = lambda: (b_read.set(), a_thread.join(60))
    claim(b, "b")
    assert claims["a"].run_id is not None and claims["a"].outcome is None  # A's claim reached the store first
    assert claims["b"].run_id is None and claims["b"].outcome.status == "RUNNING"
    assert claims["b"].outcome.run_id == claims["a"].run_id
    if interleaving == "late_run_stamped_earlier":  # the race as it was: B's run is the earlier one
        (b_run,) = [r for r in b.client.search_runs([b.experiment_id("recurbench-toy")], run_view_type=ViewType.ALL)
                    if r.data.tags.get("mlflow.parentRunId") == parents[b]]
        assert b_run.info.start_time < a.client.get_run(claims["a"].run_id).info.start_time
    for driver, name in ((a, "a"), (b, "b")):
        runner.execute_plan(ToySuite(), "toy", "base", plan, driver, parents[driver], None, None,
                            claimed=claims[name])
    key = runner.plan_key("toy", "base", plan)
    assert [r.run_id for r in a.stored_runs("recurbench-toy", {"plan_key": key})] == [claims["a"].run_id]
    assert a.stored_runs("recurbench-toy", {"plan_key": key}, "RUNNING") == []  # B's run withdrawn (deleted)
    assert a.last_claim(key)[0] == 0
    # A third driver with --skip-finished reuses the finished run.
    third = run_suite("toy", "base", Driver(uri), config_path=toy, selection={"seeds": 1}, skip_finished=True)
    assert [o.run_id for o in third.reused] == [claims["a"].run_id]


def test_a_claim_whose_runs_ended_unfinished_is_taken_again_one_generation_on(toy):
    """A new claim of a plan is possible after its holder's run FAILED, after its driver is provably
    gone, and after the user ended it (--end-run); while it runs on a host this one cannot check, it
    stands."""
    from recurbench.tracking import OWNER_HOST, owner_tags

    tracker = MemoryTracker()
    plan = run_suite("toy", "base", tracker, config_path=toy, dry_run=True, selection={"seeds": 1}).outcomes[0].plan
    key = runner.plan_key("toy", "base", plan)

    def claim(stale=None):
        parent = tracker._start("recurbench-toy", "toy-base", {"role": "parent", **owner_tags()}, None)
        return runner.claim(tracker, runner.nullcontext(), ToySuite(), "toy", "base", plan, parent.run_id,
                            check=True, stale=[] if stale is None else stale)

    first = claim()
    assert first.run_id is not None and tracker.last_claim(key) == (0, {"run_id": first.run_id, "parent_id": "run-0"})
    tracker.end_runs([first.run_id], "RuntimeError: loss is NaN")
    second = claim()
    assert second.run_id is not None and tracker.last_claim(key)[0] == 1
    tracker._resume(second.run_id).tags.update(dead_owner())  # its driver killed outright
    stale: list[str] = []
    third = claim(stale)
    assert third.run_id is not None and tracker.last_claim(key)[0] == 2 and stale[0] == second.run_id
    tracker._resume(third.run_id).tags[OWNER_HOST] = "another-host"
    left = claim()
    assert left.outcome.status == "RUNNING" and left.outcome.run_id == third.run_id
    assert tracker.last_claim(key)[0] == 2 and tracker.run_status(third.run_id) == "RUNNING"
    runner.end_named_runs(tracker, [third.run_id])
    fourth = claim()
    assert fourth.run_id is not None and tracker.last_claim(key)[0] == 3


def test_the_serial_engine_refuses_the_ray_options():
    from recurbench.engine import EngineSpec

    with pytest.raises(ConfigError, match=r"^--workers, --address need --engine ray"):
        EngineSpec("serial", workers=2, address="ray://x:10001")
    with pytest.raises(ConfigError, match=r"^--engine must be one of serial, ray, got 'dask'"):
        EngineSpec("dask")
    with pytest.raises(ConfigError, match=r"^--cpus-per-run must be positive, got 0"):
        EngineSpec("ray", cpus_per_run=0)


def test_engine_ray_without_ray_installed_is_one_line_saying_how_to_install(toy, monkeypatch, tmp_path):
    import sys

    from recurbench.engine import EngineSpec
    from recurbench.tracking import MlflowTracker

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ConfigError, match=r"^--engine ray needs Ray, which is not installed here: pip install 'recurbench\[ray\]'$"):
        run_suite("toy", "base", MlflowTracker(f"sqlite:///{tmp_path}/m.db"), config_path=toy, engine=EngineSpec("ray"))
    assert not (tmp_path / "m.db").exists()


def test_a_cluster_address_refuses_a_store_on_this_machines_disk():
    from recurbench.engine import EngineSpec, check_cluster_store

    cluster = EngineSpec("ray", address="ray://head:10001")
    for uri in ("sqlite:///results/mlflow.db", "file:///tmp/mlruns", "mlruns", "journal:/tmp/optuna.log"):
        with pytest.raises(ConfigError, match=r"cannot share: start a tracking server \(`mlflow server"):
            check_cluster_store(cluster, uri)
    check_cluster_store(cluster, "http://head:5000")
    check_cluster_store(EngineSpec("ray"), "sqlite:///results/mlflow.db")  # a local instance shares this disk
