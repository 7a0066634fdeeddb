"""The memory suite: the shipped profiles, validation before training, a tiny end-to-end run with a
learning signal, and the summary beside Table 5."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from recurbench.errors import ConfigError
from recurbench.records import logged_settings
from recurbench.suites.base import RunOutcome, RunPlan
from recurbench.suites.memory import MemorySuite
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
        "hidden_size": 128, "embedding_dim": "none"}  # nu / rho are not an LSTM's settings
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
    for profile in ("quick", "cpu", "paper"):
        suite, cfg = load_profile("memory", profile)
        shipped = {tuple(sorted(tags.items())): params for tags, params in suite.shipped_settings(cfg)}
        for plan in suite.plan(cfg, {}, data_dir=None):
            logged = logged_settings(plan.params)
            tags = {k: v for k, v in plan.tags.items() if k not in ("study", "sweep")}
            assert shipped[tuple(sorted(tags.items()))] == logged, plan.name


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
         r"kappa_sweeps\.0\.kappas\.1: kappa 4 with nu = 5 leaves model\.rho: .* got -1"),
        ({}, {"lengths": ["10", "abc"]}, r"--lengths\.1: a delay T must be a positive integer, got 'abc'"),
        ({}, {"tasks": ["denoise", "copyy"]}, r"--tasks\.1: unknown memory task 'copyy'"),
        ({}, {"models": ["gru"]}, r"--models\.0: unknown memory core 'gru'"),
    ],
)
def test_bad_settings_fail_before_training(tmp_path, changes, selection, message):
    tracker = MemoryTracker()
    with pytest.raises(ConfigError, match=message):
        run_suite("memory", "tiny", tracker, selection=selection, config_path=_write(tmp_path, TINY, **changes))
    assert tracker.runs == []  # nothing was tracked, nothing trained


def test_a_tiny_run_learns_copy_and_logs_everything(tmp_path):
    tracker = MemoryTracker()
    result = run_suite("memory", "tiny", tracker, config_path=_write(tmp_path, TINY))
    assert not result.failed, [o.error for o in result.failed]
    (outcome,) = result.outcomes
    # The headline metrics, which a run reused by --skip-finished must have, are what execute returns.
    assert set(outcome.metrics) == set(MemorySuite.headline_metrics)
    assert outcome.metrics["accuracy"] > 0.6  # chance: 1/4
    (run,) = [r for r in tracker.runs if r.parent_id is not None]
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
