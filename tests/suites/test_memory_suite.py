"""The memory suite: the shipped profiles, validation before training, a tiny end-to-end run with a
learning signal, and the summary beside Table 5."""

from __future__ import annotations

import json
import math
import pickle
import re

import pytest
import torch
import yaml

from recurbench.errors import ConfigError
from recurbench.records import logged_settings
from recurbench.suites.base import RunOutcome, RunPlan
from recurbench.suites.memory import MemorySuite
from recurbench.suites.paper_settings import paper_differences
from recurbench.suites.registry import load_profile
from recurbench.suites.runner import run_suite
from recurbench.tracking import MemoryTracker

# Copy with 2 symbols out of 4 after a delay of 3 (chance 1/4): learnt in 200 updates at a large rate.
TINY = {
    "tasks": ["copy"],
    "lengths": [3],
    "models": ["lstm"],
    "seeds": 1,
    "task": {"copy_length": 2, "labels": 4},
    "model": {"hidden_size": 32, "attention_size": 16, "nu": 3, "rho": 2},
    "training": {"updates": 200, "batch_size": 32, "learning_rate": 0.03, "log_every": 50, "eval_batches": 4},
}


@pytest.fixture(autouse=True)
def _registered(monkeypatch):
    torch.set_num_threads(1)


def _write(tmp_path, profile: dict, **changes) -> str:
    path = tmp_path / "memory.yaml"
    path.write_text(yaml.safe_dump({"suite": "memory", "profiles": {"tiny": {**profile, **changes}}}))
    return str(path)


def test_shipped_profiles():
    suite, cpu = load_profile("memory", "cpu")
    plans = suite.plan(cpu, {}, data_dir=None)
    grid = [p for p in plans if p.tags["study"] == "table5"]
    assert len(grid) == 4 * 3 * 2 and {p.tags["T"] for p in grid} == {"100", "200", "300", "500"}
    assert {p.tags["task"] for p in plans} == {"copy"}
    one = next(p for p in plans if p.name == "copy-T500-rellstm-nu10-rho10-s1")
    assert one.params["training"]["updates"] == 2000 and one.payload.network.kappa == 20
    # The kappa sweep at T = 100 with nu = 10: rho = 1, 3, 20 are new, rho = 10 is the grid's run.
    sweep = sorted((p.tags["nu"], int(p.tags["rho"])) for p in plans if p.tags["study"] == "kappa" and p.seed == 0)
    assert sweep == [("10", 1), ("10", 3), ("10", 20)]
    assert {p.tags["sweep"] for p in plans if p.tags["model"] == "rellstm" and p.tags["T"] == "100"} == {"nu=10"}
    assert {p.tags["sweep"] for p in plans if p.tags["T"] != "100" or p.tags["model"] != "rellstm"} == {"-"}
    assert next(p for p in plans if p.name == "copy-T100-memlstm-nu120-rho0-s0").tags["rho"] == "0"
    assert next(p for p in plans if p.name == "copy-T100-lstm-s0").params["network"] == {
        "hidden_size": 128, "embedding_dim": "none", "gate_init": "pytorch"}  # nu / rho are not an LSTM's settings
    _, paper = load_profile("memory", "paper")
    paper_plans = suite.plan(paper, {}, data_dir=None)
    assert max(int(p.tags["T"]) for p in paper_plans) == 2000
    assert paper.training.updates == 200_000 and paper.training.learning_rate == 2e-4
    assert paper.training.batch_size == 10 and paper.model.hidden_size == 128
    fig3 = {(p.tags["nu"], p.tags["rho"]) for p in paper_plans if p.tags["task"] == "denoise" and p.tags["T"] == "1000"
            and p.tags["model"] == "rellstm"}
    assert {("15", r) for r in ("3", "8", "18", "25")} <= fig3 and {(n, "15") for n in ("3", "8", "18", "25")} <= fig3
    narrowed = suite.plan(paper, {"tasks": ["copy"], "lengths": ["200"], "models": ["lstm"], "seeds": 2,
                                  "first_seed": 3}, data_dir=None)
    assert [(p.name, p.seed) for p in narrowed] == [("copy-T200-lstm-s3", 3), ("copy-T200-lstm-s4", 4)]
    # --lengths without the sweep's T leaves the sweep out.
    assert all(p.tags["study"] == "table5" for p in suite.plan(cpu, {"lengths": [200]}, data_dir=None))


def test_shipped_settings_are_what_plan_logs():
    for profile in ("quick", "cpu", "table5", "paper"):
        suite, cfg = load_profile("memory", profile)
        shipped = {tuple(sorted(tags.items())): params for tags, params in suite.shipped_settings(cfg)}
        for plan in suite.plan(cfg, {}, data_dir=None):
            logged = logged_settings(plan.params)
            tags = {k: v for k, v in plan.tags.items() if k not in ("study", "sweep")}
            assert shipped[tuple(sorted(tags.items()))] == logged, plan.name
            # The defaults an older run of this configuration is read at name no network setting its
            # core does not log (an RNN gains no gate_init), and the gate start where it does.
            network = {k for k in suite.param_defaults(plan.tags) if k.startswith("network.")}
            assert network <= logged.keys(), plan.name
            assert ("network.gate_init" in network) == ("network.gate_init" in logged), plan.name


@pytest.mark.parametrize(
    ("changes", "selection", "message"),
    [
        ({"lengths": [3, 0]}, {}, r"profiles\.tiny\.lengths\.1: Input should be greater than 0"),
        ({"tasks": ["copy", "recall"]}, {}, r"profiles\.tiny\.tasks\.1: .*unknown memory task 'recall'"),
        ({"model": {"rho": -1}}, {}, r"profiles\.tiny\.model\.rho: Input should be greater than or equal to 0"),
        ({"model": {"nu": 0}}, {}, r"profiles\.tiny\.model\.nu: Input should be greater than 0"),
        ({"task": {"copy_length": 0}}, {}, r"profiles\.tiny\.task\.copy_length"),
        ({"kappa_sweeps": [{"task": "copy", "T": 3, "kappas": [4]}]}, {},
         r"profiles\.tiny\.kappa_sweeps\.0: give exactly one of nu and rho"),
        ({"kappa_sweeps": [{"task": "copy", "T": 3, "nu": 5, "kappas": [6, 4]}], "models": ["rellstm"]}, {},
         r"^\S+/memory\.yaml: profiles\.tiny\.kappa_sweeps\.0\.kappas\.1: kappa 4 with nu = 5 leaves model\.rho: .* got -1"),
        ({}, {"lengths": ["10", "abc"]}, r"--lengths\.1: a delay T must be a positive integer, got 'abc'"),
        ({}, {"tasks": ["denoise", "copyy"]}, r"--tasks\.1: unknown memory task 'copyy'"),
        ({}, {"models": ["gru"]}, r"--models\.0: unknown memory core 'gru'"),
        ({"per_model": {"gru": {}}}, {}, r"profiles\.tiny\.per_model\.gru\.\[key\]: unknown memory core 'gru'"),
        ({"per_model": {"rnn": {"training": {"lr": 0.1}}}}, {}, r"profiles\.tiny\.per_model\.rnn\.training\.lr: unknown key"),
        ({"per_model": {"rnn": {"model": {"nu": None}}}}, {}, r"profiles\.tiny\.per_model\.rnn\.model\.nu: .*valid integer"),
        ({"per_model": {"rnn": {"model": {"nonlinearity": "sigmoid"}}}, "models": ["rnn"]}, {},
         r"^\S+/memory\.yaml: profiles\.tiny\.per_model\.rnn\.model\.nonlinearity: unknown non-linearity 'sigmoid'"),
        ({"model": {"recurrent_init": "orthogonal"}, "models": ["lstm", "rnn"]}, {}, r"^\S+/memory\.yaml: profiles\.tiny\.model\.recurrent_init: "),
        ({"per_model": {"lstm": {"model": {"gate_init": "orthogonal"}}}}, {},
         r"^\S+/memory\.yaml: profiles\.tiny\.per_model\.lstm\.model\.gate_init: unknown LSTM gate initialisation 'orthogonal'"),
        ({"models_by_length": {5: ["lstm"]}}, {}, r"profiles\.tiny\.models_by_length\.5: T = 5 is not one of lengths \[3\]"),
        ({"models_by_length": {3: ["rnn"]}}, {}, r"profiles\.tiny\.models_by_length\.3\.0: 'rnn' is not one of models"),
        # SAB at T = 3 (L = 7 steps, every 2nd state stored: 3): its k, or its stride, longer than that.
        ({"models": ["lstm", "sab"]}, {}, r"^\S+/memory\.yaml: profiles\.tiny\.model\.topk: .*\(copy at T = 3, model 'sab'\)"),
        ({"models": ["sab"], "per_model": {"sab": {"model": {"topk": 4}}}}, {}, r"^\S+/memory\.yaml: profiles\.tiny\.per_model\.sab\.model\.topk: "),
        ({"models": ["sab"], "per_model": {"sab": {"model": {"topk": 1}, "tasks": {"copy": {"model": {"topk": 4}}}}}}, {},
         r"^\S+/memory\.yaml: profiles\.tiny\.per_model\.sab\.tasks\.copy\.model\.topk: "),
        ({"per_model": {"rnn": {"tasks": {"recall": {}}}}}, {}, r"per_model\.rnn\.tasks\.recall\.\[key\]: unknown memory task"),
        ({"models": ["sab"], "model": {"topk": 1, "memory_stride": 9}}, {}, r"^\S+/memory\.yaml: profiles\.tiny\.model\.memory_stride: "),
    ],
)
def test_bad_settings_fail_before_training(tmp_path, changes, selection, message):
    tracker = MemoryTracker()
    with pytest.raises(ConfigError, match=message):
        run_suite("memory", "tiny", tracker, selection=selection, config_path=_write(tmp_path, TINY, **changes))
    assert tracker.runs == []  # nothing was tracked, nothing trained


def test_a_files_key_judged_with_a_command_line_setting_names_that_setting_too(tmp_path):
    # SAB's topk (the file's) against a memory_stride from --set: the error named the file alone.
    with pytest.raises(ConfigError) as info:
        run_suite("memory", "tiny", MemoryTracker(), config_path=_write(tmp_path, TINY, models=["sab"]),
                  overrides=["model.memory_stride=4"], dry_run=True)
    message = str(info.value)
    assert re.match(r"^\S+/memory\.yaml: profiles\.tiny\.model\.topk: SAB selects", message)
    assert message.endswith("(with --set model.memory_stride=4)")
    # A task setting the task refuses names its key (it read "task 'copy' at T=3: labels: ...").
    with pytest.raises(ConfigError) as info:
        run_suite("memory", "tiny", MemoryTracker(), config_path=_write(tmp_path, TINY), overrides=["task.labels=1"],
                  dry_run=True)
    assert str(info.value) == ("--set task.labels=1: the copy task needs an integer of at least 2 (with one symbol "
                               "there is nothing to remember), got 1 (copy at T = 3)")


def test_a_tiny_run_learns_copy_and_logs_everything(tmp_path):
    tracker = MemoryTracker()
    result = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path, TINY))
    assert not result.failed, [o.error for o in result.failed]
    (outcome,) = result.outcomes
    # The headline metrics, which a run reused by --skip-finished must have, are what execute returns.
    assert set(outcome.metrics) == set(MemorySuite.headline_metrics)
    assert outcome.metrics["accuracy"] > 0.6  # chance: 1/4
    (run,) = [r for r in tracker.runs if r.parent_id is not None]
    assert 0 < run.metrics["train_seconds"][-1][1] <= run.metrics["wall_time_s"][-1][1]  # the updates, evaluations aside
    assert {k: run.tags[k] for k in ("task", "T", "model", "nu", "rho", "study", "sweep")} == {
        "task": "copy", "T": "3", "model": "lstm", "nu": "-", "rho": "-", "study": "table5", "sweep": "-"}
    steps = [s for s, _ in run.metrics["loss"]]
    assert steps == [50, 100, 150, 200]  # step = updates
    losses = [v for _, v in run.metrics["loss"]]
    assert losses[-1] < 0.5 * losses[0]
    assert run.last("train_accuracy") == outcome.metrics["train_accuracy"]
    gradients = json.loads(run.artifacts["gradient_norms.json"])
    assert len(gradients["init"]) == len(gradients["final"]) == 3 + 2 * 2 and gradients["scored_from"] == 5
    assert outcome.metrics["grad_first_final"] == pytest.approx(sum(gradients["final"][:2]) / 2)
    assert outcome.metrics["grad_ratio_final"] == pytest.approx(gradients["final"][0] / gradients["final"][2])  # T = 3
    assert run.artifacts["gradient_norms.png"].startswith(b"\x89PNG")
    assert [p["update"] for p in json.loads(run.artifacts["loss_curve.json"])] == [50, 100, 150, 200]
    # --skip-finished finds it at the same settings, and runs it again at others.
    again = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path, TINY), skip_finished=True)
    assert again.outcomes[0].reused and again.outcomes[0].metrics == outcome.metrics
    other = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path, TINY), skip_finished=True,
                      dry_run=True, overrides=["training.updates=100"])
    assert other.outcomes[0].status == "PLANNED"
    # A run logged before gate_init was (the param absent) trained at its default, pytorch: found at
    # that setting (MemorySuite.param_defaults), run again at xavier.
    del run.params["network.gate_init"]
    older = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path, TINY), skip_finished=True)
    assert older.outcomes[0].reused and older.outcomes[0].metrics == outcome.metrics
    xavier = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path, TINY), skip_finished=True,
                       dry_run=True, overrides=["model.gate_init=xavier"])
    assert xavier.outcomes[0].status == "PLANNED"


def test_per_model_settings_and_models_by_length(tmp_path):
    profile = {**TINY, "lengths": [3, 5], "models": ["lstm", "rnn", "exprnn"], "models_by_length": {5: ["exprnn"]},
               "per_model": {"exprnn": {"model": {"nonlinearity": "modrelu"},
                                        "training": {"optimizer": "rmsprop", "orth_learning_rate": 1e-4},
                                        "tasks": {"copy": {"training": {"orth_learning_rate": 2e-4}},
                                                  "denoise": {"training": {"learning_rate": 1.0}}}}}}
    result = run_suite("memory", "tiny", MemoryTracker(), config_path=_write(tmp_path, profile), dry_run=True)
    plans = {o.plan.name: o.plan for o in result.outcomes}
    assert list(plans) == ["copy-T3-lstm-s0", "copy-T3-rnn-s0", "copy-T3-exprnn-s0", "copy-T5-exprnn-s0"]
    exprnn, rnn = plans["copy-T3-exprnn-s0"].params, plans["copy-T3-rnn-s0"].params
    assert exprnn["network"]["nonlinearity"] == "modrelu" and rnn["network"]["nonlinearity"] == "tanh"
    # The core's own keys over the profile's, its keys for the task (copy) over those; denoise's not run.
    assert exprnn["training"]["optimizer"] == "rmsprop" and exprnn["training"]["orth_learning_rate"] == 2e-4
    # The other settings are the profile's; the override leaves the other cores alone.
    assert exprnn["training"]["learning_rate"] == rnn["training"]["learning_rate"] == 0.03
    assert rnn["training"]["optimizer"] == "adam" and rnn["training"]["orth_learning_rate"] is None
    assert plans["copy-T3-exprnn-s0"].payload.training.orth_learning_rate == 2e-4
    # The LSTM-family cores log their gate start; the RNNs, which have no gates, do not.
    assert plans["copy-T3-lstm-s0"].params["network"]["gate_init"] == "pytorch" and "gate_init" not in rnn["network"]
    # A selection that models_by_length empties says so (it said only "the selection leaves no run to do").
    with pytest.raises(ConfigError) as info:
        run_suite("memory", "tiny", MemoryTracker(), config_path=_write(tmp_path, profile), dry_run=True,
                  selection={"models": ["rnn"], "lengths": [5]})
    assert str(info.value) == "--models rnn: no run at the lengths selected: the profile's models_by_length runs at T = 5 only exprnn"


def test_a_command_line_setting_holds_for_every_core_over_per_model(tmp_path):
    # --set model.nonlinearity=tanh was silently overridden by per_model.rnn's modrelu: the run trained
    # at modrelu and logged it. A per_model key the command line sets itself stays the more specific.
    profile = {**TINY, "models": ["lstm", "rnn", "exprnn"],
               "per_model": {"rnn": {"model": {"nonlinearity": "modrelu"}, "training": {"optimizer": "rmsprop"}},
                             "exprnn": {"model": {"nonlinearity": "modrelu"},
                                        "tasks": {"copy": {"training": {"learning_rate": 0.5}}}}}}

    def plans(*overrides):
        result = run_suite("memory", "tiny", MemoryTracker(), config_path=_write(tmp_path, profile), dry_run=True,
                           overrides=list(overrides))
        return {o.plan.tags["model"]: o.plan for o in result.outcomes}

    shipped = plans()
    assert shipped["rnn"].params["network"]["nonlinearity"] == "modrelu"
    assert shipped["exprnn"].params["training"]["learning_rate"] == 0.5
    given = plans("model.nonlinearity=tanh", "training.learning_rate=0.01")
    assert given["rnn"].params["network"]["nonlinearity"] == given["exprnn"].params["network"]["nonlinearity"] == "tanh"
    assert given["rnn"].payload.network.nonlinearity == "tanh"  # what trains, not only what is logged
    assert {m: p.params["training"]["learning_rate"] for m, p in given.items()} == {"lstm": 0.01, "rnn": 0.01,
                                                                                  "exprnn": 0.01}
    assert given["rnn"].params["training"]["optimizer"] == "rmsprop"  # a key the command line left alone
    both = plans("model.nonlinearity=tanh", "per_model.rnn.model.nonlinearity=relu")
    assert both["rnn"].params["network"]["nonlinearity"] == "relu"
    assert both["exprnn"].params["network"]["nonlinearity"] == "tanh"


@pytest.mark.parametrize(
    ("profile_changes", "overrides", "message"),
    [
        # Accepted, and no run changed: the LSTM has no nonlinearity, and nu is a screened core's.
        ({}, ["model.nonlinearity=relu"],
         "--set model.nonlinearity=relu: none of the cores selected (lstm) reads it, so it would change no run; "
         "rnn, exprnn, memrnn, relrnn do"),
        ({"models": ["lstm", "rnn"]}, ["model.nu=3"],
         "--set model.nu=3: none of the cores selected (lstm, rnn) reads it, so it would change no run; "
         "rellstm, relrnn do"),
        ({"models": ["lstm", "rnn"]}, ["per_model.rnn.model.gate_init=xavier"],
         "--set per_model.rnn.model.gate_init=xavier: the 'rnn' core does not read it; lstm, memlstm, rellstm, sab do"),
        # A file's per_model block, for a core not even selected.
        ({"per_model": {"sab": {"tasks": {"copy": {"model": {"nu": 4}}}}}}, [],
         "{file}: profiles.tiny.per_model.sab.tasks.copy.model.nu: the 'sab' core does not read it; rellstm, relrnn do"),
    ],
)
def test_a_model_setting_no_core_reads_is_refused(tmp_path, profile_changes, overrides, message):
    tracker = MemoryTracker()
    path = _write(tmp_path, TINY, **profile_changes)
    with pytest.raises(ConfigError) as info:
        run_suite("memory", "tiny", tracker, config_path=path, overrides=overrides)
    assert str(info.value) == message.format(file=path)
    assert tracker.runs == []


def test_a_model_setting_one_selected_core_reads_is_taken(tmp_path):
    result = run_suite("memory", "tiny", MemoryTracker(), config_path=_write(tmp_path, TINY, models=["lstm", "rellstm"]),
                       overrides=["model.nu=2"], dry_run=True)
    plans = {o.plan.tags["model"]: o.plan for o in result.outcomes}
    assert plans["rellstm"].payload.network.nu == 2 and "nu" not in plans["lstm"].params["network"]


@pytest.mark.parametrize(
    ("profile_changes", "overrides", "message"),
    [
        # Refused for the LSTM but let through for an RNN core, whose per_model key shadowed it.
        ({"models": ["rnn"], "per_model": {"rnn": {"model": {"nonlinearity": "modrelu"}}}}, ["model.nonlinearity=sigmoid"],
         r"^--set model\.nonlinearity=sigmoid: unknown non-linearity 'sigmoid'; known: .* \(copy at T = 3, model 'rnn'\)$"),
        # The kappa sweep was blamed ("kappa_sweeps.0.kappas.0: kappa 3 with nu = 2 leaves ...").
        ({"models": ["rellstm"], "kappa_sweeps": [{"task": "copy", "T": 3, "nu": 2, "kappas": [3, 4]}]},
         ["model.nonlinearity=sigmoid"],
         r"^--set model\.nonlinearity=sigmoid: unknown non-linearity 'sigmoid'; known: .*"
         r"\(kappa_sweeps\.0: copy at T = 3, model 'rellstm'\)$"),
    ],
)
def test_a_bad_command_line_setting_is_named_as_such(tmp_path, profile_changes, overrides, message):
    tracker = MemoryTracker()
    with pytest.raises(ConfigError, match=message):
        run_suite("memory", "tiny", tracker, config_path=_write(tmp_path, TINY, **profile_changes), overrides=overrides)
    assert tracker.runs == []


def test_table5_profile_is_the_paper_profile_narrowed():
    suite, table5 = load_profile("memory", "table5")
    plans = suite.plan(table5, {}, data_dir=None)
    grid = {(p.tags["T"], p.tags["model"]) for p in plans}
    seven = {"lstm", "rnn", "exprnn", "memrnn", "sab", "relrnn", "rellstm"}
    assert grid == {(T, m) for T in ("100", "200") for m in seven} | {("500", m) for m in ("lstm", "relrnn", "rellstm")}
    assert len(plans) == 17 and {p.seed for p in plans} == {0} and {p.tags["task"] for p in plans} == {"copy"}
    by_model = {p.tags["model"]: p.params for p in plans if p.tags["T"] == "100"}
    # Table 6 (copy): orthRNN and expRNN RMSprop 2e-4 modReLU (expRNN's orthogonal parameters 2e-5),
    # LSTM and RelRNN Adam 2e-4, RelRNN tanh with nu = rho = 10.
    for core in ("rnn", "exprnn"):
        assert by_model[core]["training"]["optimizer"] == "rmsprop" and by_model[core]["network"]["nonlinearity"] == "modrelu"
    assert by_model["exprnn"]["training"]["orth_learning_rate"] == 2e-5
    assert {k: by_model["relrnn"]["network"][k] for k in ("nonlinearity", "nu", "rho")} == {"nonlinearity": "tanh", "nu": 10, "rho": 10}
    assert all(by_model[c]["training"]["learning_rate"] == 2e-4 for c in seven)
    assert all(by_model[c]["training"]["optimizer"] == "adam" for c in seven - {"rnn", "exprnn"})
    assert all(p.params["training"]["updates"] == 200_000 and p.params["training"]["eval_every"] == 500
               and p.params["training"]["solve_threshold"] == 0.99 for p in plans)
    # Every run is at the paper profile's settings: compare sets it beside Table 5 without a caveat.
    assert paper_differences(suite, ((p.tags, logged_settings(p.params)) for p in plans)) == []
    # Table 7 (denoise) differs from Table 6 in RelRNN's row only: RMSprop and modReLU.
    _, paper = load_profile("memory", "paper")
    denoise = {p.tags["model"]: p.params for p in suite.plan(paper, {"tasks": ["denoise"], "lengths": ["100"]}, data_dir=None)}
    assert denoise["relrnn"]["training"]["optimizer"] == "rmsprop" and denoise["relrnn"]["network"]["nonlinearity"] == "modrelu"
    assert all(denoise[c]["training"] == by_model[c]["training"] for c in seven - {"relrnn"})
    # The profile and its plans travel to Ray workers pickled, per-model keys and all.
    copy = pickle.loads(pickle.dumps(table5))
    assert copy == table5 and [p.params for p in suite.plan(copy, {}, data_dir=None)] == [p.params for p in plans]


def test_a_run_stops_once_solved_and_logs_when(tmp_path):
    tracker = MemoryTracker()
    profile = {**TINY, "training": {**TINY["training"], "updates": 1000, "eval_every": 25}}
    result = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path, profile))
    (outcome,) = result.outcomes
    metrics = outcome.metrics
    assert metrics["solved"] == 1.0 and metrics["solved_at"] == metrics["updates"] < 1000
    (run,) = [r for r in tracker.runs if r.parent_id is not None]
    evaluations = run.metrics["eval_accuracy"]
    assert [s for s, _ in evaluations] == list(range(25, int(metrics["solved_at"]) + 1, 25))
    assert min(v for _, v in evaluations[-2:]) >= 0.99
    # Each evaluation's update beside it, so that a run read back mid-way (latest values) says how far it got.
    assert run.metrics["eval_update"] == [(s, float(s)) for s, _ in evaluations]
    assert run.metrics["loss"][-1][0] == metrics["solved_at"]  # the last log window closes at the stop
    header, rows = MemorySuite().summary_rows(result.outcomes)
    assert rows[0][header.index("budget")] == f"solved at {int(metrics['solved_at']):,}"


def test_summary_sets_table5_beside_ours():
    def outcome(T: int, core: str, seed: int, acc: float, updates: int, solved: bool) -> RunOutcome:
        tags = {"task": "copy", "T": str(T), "model": core, "nu": "-", "rho": "-", "study": "table5"}
        metrics = {"accuracy": acc, "train_accuracy": acc, "grad_first_init": 1e-9, "grad_first_final": 1e-7,
                   "updates": float(updates), "solved": float(solved), "solved_at": updates if solved else math.nan}
        return RunOutcome(RunPlan(f"copy-T{T}-{core}-s{seed}", seed, tags, {}), "FINISHED", metrics)

    outcomes = [outcome(500, "lstm", 0, 0.125, 200_000, False), outcome(500, "lstm", 1, 0.175, 200_000, False),
                outcome(1000, "rnn", 0, 0.99, 12_500, True), outcome(2000, "memrnn", 0, 0.5, 200_000, False),
                outcome(200, "sab", 0, 0.995, 9_000, True), outcome(200, "sab", 1, 0.5, 150_000, False)]
    header, rows = MemorySuite().summary_rows(outcomes)
    table = {(row[1], row[2]): dict(zip(header, row, strict=True)) for row in rows}
    lstm = table[("500", "lstm")]
    assert lstm["accuracy"] == "0.150 ± 0.035" and lstm["paper (Table 5)"] == "0.12" and lstm["seeds"] == "2/2"
    assert lstm["budget"] == "200,000 updates"
    # orth-RNN, MemRNN (out of memory at T = 2000) and SAB: Table 5's columns.
    assert table[("1000", "rnn")]["paper (Table 5)"] == "0.80" and table[("1000", "rnn")]["budget"] == "solved at 12,500"
    assert table[("2000", "memrnn")]["paper (Table 5)"] == "OOM"
    assert table[("200", "sab")]["budget"] == "solved 1/2 at 9,000; 150,000 updates"


def test_a_delay_whose_training_batch_cannot_fit_is_refused_by_its_length(monkeypatch):
    """``--lengths 100000000`` allocated 8.5 GB before failing; the plan now refuses it, naming it."""
    monkeypatch.setenv("RECURBENCH_MEMORY_GIB", "1")
    definition, profile = load_profile("memory", "table5")
    assert definition.plan(profile, {"lengths": ["100", "1000"], "models": ["lstm"]}, data_dir=None)
    with pytest.raises(ConfigError, match=r"^--lengths\.1: a delay T = 100000 needs about 8 GiB to train \(batch 10 x "
                                          r"100020 steps x 128 units, kept for the backward pass\), more than this "
                                          r"machine's 1 GiB of memory$"):
        definition.plan(profile, {"lengths": ["100", "100000"], "models": ["lstm"]}, data_dir=None)
