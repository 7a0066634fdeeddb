"""The suite runner: YAML validation with paths, nested runs per plan, failures kept and reported."""

from __future__ import annotations

import textwrap

import pytest

from recurbench.config import StrictModel, check_names, known_name
from recurbench.errors import ConfigError
from recurbench.suites import runner
from recurbench.suites.runner import RunPlan, SuiteDefinition, SuiteFailed, run_suite
from recurbench.tracking import MemoryTracker

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


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.setitem(runner.SUITES, "toy", ToySuite)
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
    ],
)
def test_bad_suite_files_are_reported_with_their_path(tmp_path, monkeypatch, profile_yaml, message):
    monkeypatch.setitem(runner.SUITES, "toy", ToySuite)
    path = tmp_path / "bad.yaml"
    path.write_text(f"suite: toy\nprofiles:\n  p:\n    {profile_yaml}\n")
    with pytest.raises(ConfigError, match=message) as info:
        run_suite("toy", "p", MemoryTracker(), config_path=path)
    assert str(info.value).startswith(f"{path}: ")


def test_unknown_names_selected_on_the_command_line_are_refused(toy):
    with pytest.raises(ConfigError, match=r"models\.0: unknown model 'bad'"):
        run_suite("toy", "base", MemoryTracker(), config_path=toy, selection={"models": ["bad"]})


def test_unknown_profile_and_suite(toy):
    with pytest.raises(ConfigError, match="no profile 'huge'; available: base, both"):
        run_suite("toy", "huge", MemoryTracker(), config_path=toy)
    with pytest.raises(ConfigError, match="unknown suite 'nope'"):
        run_suite("nope", "quick", MemoryTracker())


def test_set_overrides_one_profile_setting_and_leaves_the_others():
    from recurbench.suites.runner import load_profile

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
    from recurbench.suites.runner import load_profile

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
        (["training.rsa_lr_factr=100"], r"profiles\.paper\.training\.rsa_lr_factr: unknown key .*\(with --set training\.rsa_lr_factr=100\)"),
        (["training.rsa_lr_factor=-1"], r"profiles\.paper\.training\.rsa_lr_factor: .*greater than 0"),
        (["training.rsa_lr_factor"], r"--set 'training.rsa_lr_factor': expected KEY=VALUE"),
        (["training..lr=1"], r"--set 'training..lr=1': expected KEY=VALUE"),
        (["training=1", "training.epochs=2"], r"--set 'training.epochs=2': training was already set to a value"),
        (["model.d_model=[1"], r"--set 'model.d_model=\[1': cannot read the value as YAML"),
    ],
)
def test_bad_set_overrides_name_the_culprit(sets, message):
    from recurbench.suites.runner import load_profile

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


def test_the_typical_time_of_a_plan_is_the_median_wall_time_of_its_configuration(toy):
    import statistics

    from recurbench.suites.runner import typical_seconds
    from recurbench.tracking import standard_tags

    tracker = MemoryTracker()
    run_suite("toy", "both", tracker, config_path=toy, selection={"seeds": 1})  # good-s0 finishes, crash-s0 fails
    (first,) = [r for r in tracker.runs if r.name == "good-s0"]
    for seed, wall, profile in ((5, 10.0, "both"), (6, 30.0, "both"), (7, 999.0, "base")):  # other seeds; other profile
        extra = tracker._start("recurbench-toy", f"good-s{seed}", standard_tags(suite="toy", profile=profile, seed=seed,
                                                                               model="good"), None)
        extra.log_metrics({"wall_time_s": wall})
        extra.status = "FINISHED"
    plans = [o.plan for o in run_suite("toy", "both", tracker, config_path=toy, dry_run=True).outcomes]
    assert [p.name for p in plans] == ["good-s0", "good-s1", "crash-s0", "crash-s1"]
    expected = statistics.median([first.metrics["wall_time_s"][-1][1], 10.0, 30.0])
    # Every seed of model good; nothing for crash, whose only run failed.
    assert typical_seconds("toy", "both", tracker, plans) == {0: expected, 1: expected}
    assert typical_seconds("toy", "both", MemoryTracker(), plans) == {}


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
    # A run of seed 1 in progress elsewhere (a live process) is reported as such, not reused.
    from recurbench.tracking import standard_tags

    live = tracker._start("recurbench-toy", "good-s1", standard_tags(suite="toy", profile="base", seed=1, model="good"), None)
    live.log_params({"scale": 1.0, "seed": 1})
    dry = run_suite("toy", "base", tracker, config_path=toy, skip_finished=True, dry_run=True)
    assert [(o.status, o.run_id, o.reused) for o in dry.outcomes][1] == ("RUNNING", live.run_id, False)
    assert [o.status for o in run_suite("toy", "base", tracker, config_path=toy, dry_run=True).outcomes] == [
        "PLANNED", "PLANNED"]  # without --skip-finished the store is not read
    # Validation still happens: a bad selection is refused as it would be by a real run.
    with pytest.raises(ConfigError, match=r"models\.0: unknown model 'bad'"):
        run_suite("toy", "base", tracker, config_path=toy, selection={"models": ["bad"]}, dry_run=True)


def test_shards_split_the_plans_without_overlap_and_resume_on_their_own(toy):
    from recurbench.suites.runner import parse_shard

    names = {}
    for k in (1, 2):
        result = run_suite("toy", "base", MemoryTracker(), config_path=toy, selection={"seeds": 5}, shard=(k, 2))
        names[k] = [o.plan.name for o in result.outcomes]
    assert names == {1: ["good-s0", "good-s2", "good-s4"], 2: ["good-s1", "good-s3"]}
    # With --skip-finished a shard resumes its own share: after shard 1 has run, shard 2 still has all of its.
    tracker = MemoryTracker()
    run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 5}, shard=(1, 2))
    second = run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 5}, shard=(2, 2), skip_finished=True)
    assert [(o.plan.name, o.reused) for o in second.outcomes] == [("good-s1", False), ("good-s3", False)]
    assert tracker.runs[-3].params["shard"] == "2/2"
    whole = run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 5}, skip_finished=True)
    assert whole.parent_run_id is None and all(o.reused for o in whole.outcomes)
    with pytest.raises(ConfigError, match=r"^--shard 3/3: this shard has no run; the selection has 2$"):
        run_suite("toy", "base", MemoryTracker(), config_path=toy, shard=(3, 3))
    assert parse_shard("2/8") == (2, 8)
    for bad in ("0/2", "3/2", "2", "a/b", "1/0", "-1/2"):
        with pytest.raises(ConfigError, match=rf"^--shard: expected K/N with 1 <= K <= N .*, got '{bad}'$"):
            parse_shard(bad)


def _rival(tracker, seed, *, status="RUNNING", start_time=None, key=None):
    """A run of good-s<seed> (base profile) opened by "another process" (this one, so it reads as live)."""
    from recurbench.processes import process_tags
    from recurbench.tracking import standard_tags

    tags = standard_tags(suite="toy", profile="base", seed=seed, model="good")
    if key is not None:
        tags[runner.CLAIM_TAG] = key
    run = tracker._start("recurbench-toy", f"good-s{seed}", {**process_tags(), **tags}, None)
    run.log_params({"scale": 1.0, "seed": seed})
    if start_time is not None:
        run.start_time = start_time
    if status == "FINISHED":
        run.log_metrics({"score": 0.25, "wall_time_s": 3.0})
    run.status = status
    return run


def test_skip_finished_leaves_to_another_process_what_it_finished_or_runs_since_planning(toy, monkeypatch):
    tracker = MemoryTracker()
    rivals = {}

    def execute(self, plan, run, progress, *, data_dir, device):
        if plan.seed == 0:  # while seed 0 trains, another invocation finishes seed 1 and starts seed 2
            rivals[1] = _rival(tracker, 1, status="FINISHED")
            rivals[2] = _rival(tracker, 2)
        run.log_metrics({"score": 0.5})
        return {"score": 0.5}

    monkeypatch.setattr(ToySuite, "execute", execute)
    monkeypatch.setattr(runner, "CLAIM_SETTLE_S", 0.0)
    said = []
    result = run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 4}, skip_finished=True,
                       progress_factory=lambda plan: lambda done, total, text="": said.append((plan.name, text)))
    assert [(o.plan.name, o.status, o.reused, o.run_id) for o in result.outcomes] == [
        ("good-s0", "FINISHED", False, result.outcomes[0].run_id),
        ("good-s1", "FINISHED", True, rivals[1].run_id),
        ("good-s2", "RUNNING", False, rivals[2].run_id),
        ("good-s3", "FINISHED", False, result.outcomes[3].run_id)]
    assert result.outcomes[1].metrics == {"score": 0.25} and result.elsewhere == [result.outcomes[2]]
    assert ("good-s2", f"running in another process as run {rivals[2].run_id}: left to it") in said
    parent = next(r for r in tracker.runs if r.run_id == result.parent_run_id)
    assert [parent.last(k) for k in ("runs_finished", "runs_skipped", "runs_left_to_others")] == [2, 1, 1]
    # This invocation's own runs carry the plan's key; without --skip-finished nothing is left to others.
    plans = {o.plan.name: o.plan for o in result.outcomes}
    assert {r.name: r.tags[runner.CLAIM_TAG] for r in tracker.children(parent)} == {
        name: runner.plan_key("toy", "base", plans[name]) for name in ("good-s0", "good-s3")}
    again = run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 4})
    assert [o.status for o in again.outcomes] == ["FINISHED"] * 4 and again.elsewhere == []


def test_two_invocations_opening_one_run_at_once_keep_the_earliest_started(toy, monkeypatch):
    tracker = MemoryTracker()
    plan = RunPlan("good-s0", 0, {"model": "good"}, {"scale": 1.0}, payload="good")
    key = runner.plan_key("toy", "base", plan)
    assert key != runner.plan_key("toy", "base", RunPlan("good-s0", 0, {"model": "good"}, {"scale": 2.0}))
    rival = {}

    def settle(seconds):  # while this invocation settles, the rival's run reaches the store
        rival["run"] = _rival(tracker, 0, start_time=rival_start, key=key)

    monkeypatch.setattr(runner.time, "sleep", settle)
    # The rival started earlier (its record arrived late): this invocation withdraws its own run.
    rival_start = -1
    result = run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 1}, skip_finished=True)
    (outcome,) = result.outcomes
    assert (outcome.status, outcome.run_id) == ("RUNNING", rival["run"].run_id) and result.failed == []
    assert [r.name for r in tracker.discarded] == ["good-s0"] and tracker.discarded[0].tags[runner.CLAIM_TAG] == key
    assert [r.run_id for r in tracker.runs if r.name == "good-s0"] == [rival["run"].run_id]
    # The rival started later: this invocation keeps its run and trains.
    tracker = MemoryTracker()
    rival_start = 10**9
    result = run_suite("toy", "base", tracker, config_path=toy, selection={"seeds": 1}, skip_finished=True)
    assert [o.status for o in result.outcomes] == ["FINISHED"] and tracker.discarded == []


def _share(toy, uri, seeds, out):
    from recurbench.tracking import MlflowTracker

    runner.SUITES["toy"] = SlowToySuite
    result = run_suite("toy", "base", MlflowTracker(uri), config_path=toy, selection={"seeds": seeds}, skip_finished=True)
    out.put([(o.plan.name, o.status, o.reused) for o in result.outcomes])


class SlowToySuite(ToySuite):
    def execute(self, plan, run, progress, *, data_dir, device):
        import time

        time.sleep(0.4)
        return super().execute(plan, run, progress, data_dir=data_dir, device=device)


def test_two_processes_given_one_selection_run_each_plan_once(toy, tmp_path, monkeypatch):
    """The real thing: two processes, one sqlite store, the same command with --skip-finished."""
    import multiprocessing as mp

    from recurbench.tracking import MlflowTracker

    monkeypatch.setattr(runner, "CLAIM_SETTLE_S", 0.3)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowTracker(uri).experiment_id("recurbench-toy")  # the store exists before both start
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_share, args=(toy, uri, 8, out)) for _ in range(2)]
    for p in procs:
        p.start()
    said = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    finished = MlflowTracker(uri).stored_runs("recurbench-toy", {"suite": "toy"}, "FINISHED")
    assert sorted(r.name for r in finished) == [f"good-s{s}" for s in range(8)]  # each once
    trained = [{name for name, status, reused in outcomes if status == "FINISHED" and not reused} for outcomes in said]
    assert trained[0].isdisjoint(trained[1]) and trained[0] | trained[1] == {f"good-s{s}" for s in range(8)}
    assert all(trained), trained  # both did some of the work
