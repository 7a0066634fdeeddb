"""The langs suite: the shipped profiles are Table 2's, validation before training, a tiny end-to-end
run with a learning signal, reuse by --skip-finished, and the summary beside the paper."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from recurbench.errors import ConfigError
from recurbench.langs.models import PAPER_HEADS
from recurbench.records import logged_settings
from recurbench.suites.base import RunOutcome, RunPlan
from recurbench.suites.langs import LangsSuite, paper_reference
from recurbench.suites.registry import load_profile
from recurbench.suites.runner import run_suite
from recurbench.tracking import MemoryTracker

TINY = {
    "languages": ["d2"],
    "models": ["rsa_i", "transformer"],
    "seeds": 1,
    "data": {"d2": {"train_size": 240, "test_size": 60, "train_window": [2, 24], "bin1_window": [26, 40]}},
    "model": {"d_model": 10, "n_heads": 5, "n_layers": 1, "d_ff": 20},
    "training": {"epochs": 4, "batch_size": 16, "lr_step_epochs": 2},
}


@pytest.fixture(autouse=True)
def _registered(monkeypatch):
    torch.set_num_threads(1)


def _write(tmp_path, profile: dict, **changes) -> str:
    path = tmp_path / "langs.yaml"
    path.write_text(yaml.safe_dump({"suite": "langs", "profiles": {"tiny": {**profile, **changes,
                                                                            "cache_dir": str(tmp_path / "cache")}}}))
    return str(path)


def test_paper_profile_is_table2():
    suite, paper = load_profile("langs", "paper")
    plans = suite.plan(paper, {}, data_dir=None)
    assert len(plans) == 6 * 7 * 3
    assert {p.tags["language"] for p in plans} == {"parity", "tomita3", "tomita5", "tomita6", "d2", "d4"}
    assert {p.tags["model"] for p in plans} == {"transformer", "transformer_rel", "rsa_i", "rsa_ii", "rsa_iii",
                                                "rsa_iv", "lstm"}
    assert {m: tuple(k) for m, k in paper.rem_heads.items()} == PAPER_HEADS
    assert PAPER_HEADS["rsa_ii"] == (3, 0, 0, 2, 0, 0) and PAPER_HEADS["rsa_iv"] == (3, 0, 0, 0, 1, 1)
    one = next(p for p in plans if p.name == "rsa_iv-d4-s2")
    assert one.payload.network.rem_heads().dilations == (2, 2)  # our choice: the paper gives none
    assert one.params["data"] == {"train_size": 5000, "test_size": 1000, "train_window": [2, 100],
                                  "bin1_window": [101, 200], "seed": 0}
    parity = next(p for p in plans if p.name == "lstm-parity-s0").params["data"]
    assert (parity["train_size"], parity["test_size"], parity["train_window"], parity["bin1_window"]) == (
        10000, 2000, [2, 50], [51, 100])
    assert one.params["network"]["d_model"] == 20 and one.params["network"]["n_heads"] == 5
    assert one.params["network"]["n_layers"] == 3
    assert one.params["training"] == {"epochs": 25, "batch_size": 32, "learning_rate": 0.005, "lr_decay": 0.5,
                                      "lr_step_epochs": 5, "eval_batch_size": 64}
    narrowed = suite.plan(paper, {"languages": ["tomita5"], "models": ["rsa_ii"], "seeds": 2, "first_seed": 3},
                          data_dir=None)
    assert [(p.name, p.seed) for p in narrowed] == [("rsa_ii-tomita5-s3", 3), ("rsa_ii-tomita5-s4", 4)]


def test_shipped_settings_are_what_plan_logs():
    for profile in ("quick", "paper"):
        suite, cfg = load_profile("langs", profile)
        shipped = {tuple(sorted(tags.items())): params for tags, params in suite.shipped_settings(cfg)}
        for plan in suite.plan(cfg, {"languages": list(cfg.data), "models": ["transformer", "rsa_iii", "lstm"]},
                               data_dir=None):
            logged = logged_settings(plan.params)
            assert shipped[tuple(sorted(plan.tags.items()))] == logged


@pytest.mark.parametrize(
    ("changes", "selection", "message"),
    [
        ({}, {"languages": ["d2", "dyck"]}, r"--languages\.1: unknown language 'dyck'; known: parity, tomita3"),
        ({}, {"models": ["rsa_v"]}, r"--models\.0: unknown model 'rsa_v'"),
        ({}, {"languages": ["tomita5"]}, r"data\.tomita5: no data settings for language 'tomita5'"),
        ({"rem_heads": {"rsa_i": [3, 0, 0, 1, 0, 0]}}, {},
         r"rem_heads\.rsa_i: .*sum to 4, but the layer has 5 heads"),
        ({"rem_heads": {"rsa_i": [3, 1, 0, 0, 0, 0]}, "models": ["rsa_i"]}, {},
         r"rem_heads\.rsa_i: .*cyclical REM heads come in pairs"),
        ({"rem_heads": {"transformer": [5, 0, 0, 0, 0, 0]}}, {},
         r"profiles\.tiny\.rem_heads: 'transformer' has no REM heads; head layouts are for rsa_i"),
        ({"data": {"d2": {**TINY["data"]["d2"], "train_window": [24, 2]}}}, {},
         r"data\.d2: train_window: the window \[24, 2\] is inverted"),
        ({"data": {"d2": {**TINY["data"]["d2"], "bin1_window": [41, 41]}}}, {},
         r"data\.d2: bin1_window: no string of d2 has a length in \[41, 41\]"),
        ({"data": {"d2": {**TINY["data"]["d2"], "train_window": [2, 50, 100]}}}, {},
         r"profiles\.tiny\.data\.d2\.train_window: List should have at most 2 items"),
        ({"model": {**TINY["model"], "d_model": 12}}, {}, r"model: d_model \(12\) must be divisible by n_heads \(5\)"),
    ],
)
def test_bad_settings_fail_before_training(tmp_path, changes, selection, message):
    tracker = MemoryTracker()
    with pytest.raises(ConfigError, match=message):
        run_suite("langs", "tiny", tracker, selection=selection, config_path=_write(tmp_path, TINY, **changes))
    assert tracker.runs == []  # nothing started
    assert not (tmp_path / "cache").exists()  # no data generated


def test_a_tiny_run_learns_d2_and_logs_everything(tmp_path):
    tracker = MemoryTracker()
    result = run_suite("langs", "tiny", tracker, config_path=_write(tmp_path, TINY))
    assert not result.failed, [o.error for o in result.failed]
    for outcome in result.outcomes:  # what --skip-finished needs from a stored run
        assert set(outcome.metrics) == set(LangsSuite.headline_metrics)
    runs = {r.tags["model"]: r for r in tracker.runs if r.parent_id is not None}
    rsa, base = runs["rsa_i"], runs["transformer"]
    assert rsa.tags["language"] == "d2" and len(rsa.tags["data_digest"]) == 64
    assert rsa.tags["data_digest"] == base.tags["data_digest"]  # one dataset for every model
    # A learning signal: the REM heads recognise most of bin 0 within 4 epochs (a random network
    # gets every unit of a whole string right almost never), and the loss falls.
    assert rsa.last("bin0_acc_best") >= 0.5
    losses = [v for _, v in rsa.metrics["train_loss"]]
    assert losses[-1] < 0.5 * losses[0]
    assert [s for s, _ in rsa.metrics["bin1_acc"]] == [1, 2, 3, 4]
    assert rsa.last("bin1_acc") == result.outcomes[0].metrics["bin1_acc"]  # the last epoch's
    assert rsa.last("bin0_acc_best") == max(v for _, v in rsa.metrics["bin0_acc"])
    assert [v for _, v in rsa.metrics["learning_rate"]] == [0.005, 0.005, 0.0025, 0.0025]
    assert {k for k in rsa.metrics if k.startswith("gate.")} == {"gate.layer.0"}
    rem = json.loads(rsa.artifacts["rem_parameters.json"])
    assert rem["rem_parameters"]["layer.0"]["kind"] == ["regular"] * 5 and "layer.0" in rem["gates"]
    by_length = json.loads(rsa.artifacts["accuracy_by_length.json"])
    assert by_length["bin_edge"] == 24 and sum(by_length["bin1"]["total"]) == 60
    assert min(by_length["bin1"]["length"]) >= 26
    assert "rem_parameters.json" not in base.artifacts and not any(k.startswith("gate.") for k in base.metrics)
    # Every run is reused by --skip-finished: its logged settings and metrics are what the plan says.
    again = run_suite("langs", "tiny", tracker, config_path=_write(tmp_path, TINY), skip_finished=True)
    assert all(o.reused for o in again.outcomes)


def test_summary_sets_the_papers_cells_beside_ours():
    assert paper_reference()[("tomita5", "rsa_ii")] == {"bin0": 0.82, "bin1": 0.17}
    assert paper_reference()[("d4", "transformer")] == {"bin0": 1.0, "bin1": 0.08}
    assert ("parity", "lstm") not in paper_reference()
    plans = [RunPlan(f"rsa_iii-tomita6-s{s}", s, {"language": "tomita6", "model": "rsa_iii"}, {}) for s in (0, 1)]
    outcomes = [RunOutcome(p, "FINISHED", {"bin0_acc": a, "bin1_acc": b, "bin0_acc_best": a, "bin1_acc_best": 0.5},
                           seconds=10.0) for p, (a, b) in zip(plans, [(0.9, 0.3), (0.7, 0.5)], strict=True)]
    header, rows = LangsSuite().summary_rows(outcomes)
    row = dict(zip(header, rows[0], strict=True))
    assert row["bin 0 (last)"] == "0.800 ± 0.141" and row["bin 1 (best epoch)"] == "0.500 ± 0.000"
    assert row["paper bin 0"] == "0.95" and row["paper bin 1"] == "0.46" and row["seeds"] == "2/2"


@pytest.mark.parametrize(("seconds", "shown"), [((0.41, 0.45), "0.43"), ((3.0, 3.5), "3.2"), ((1200.0, 1300.0), "1,250")])
def test_summary_shows_a_sub_second_runs_time(seconds, shown):
    """s/run keeps two significant digits below 10 s: a tiny profile's 0.4 s runs read 0.43, not 0."""
    plans = [RunPlan(f"rsa_iii-tomita6-s{s}", s, {"language": "tomita6", "model": "rsa_iii"}, {}) for s in (0, 1)]
    outcomes = [RunOutcome(p, "FINISHED", {"bin0_acc": 0.9, "bin1_acc": 0.5}, seconds=t)
                for p, t in zip(plans, seconds, strict=True)]
    header, rows = LangsSuite().summary_rows(outcomes)
    assert dict(zip(header, rows[0], strict=True))["s/run"] == shown
