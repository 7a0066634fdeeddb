"""The caveat beside the paper's figures names every setting that differs, in every format (a key the
user changed is never hidden behind "and N more"), and a table shows nothing of the paper's where the
paper has no figure for any of its configurations."""

from __future__ import annotations

import io

import pandas as pd
from rich.console import Console

from recurbench.records import RunRecord
from recurbench.reporting.by_suite import compare_runs
from recurbench.reporting.render import render, rich_tables
from recurbench.reporting.report import minigrid_figures
from recurbench.reporting.runs import SuiteRuns
from recurbench.suites.base import RunOutcome
from recurbench.suites.paper_settings import SettingDifference
from recurbench.suites.registry import load_profile

#: The auditor's `run ltsf --set ...`: four settings changed on top of the quick profile's two.
OVERRIDES = ["training.epochs=1", "training.max_train_batches=2", "training.max_val_batches=1",
             "training.test_stride=64"]
SETTINGS = ("network.d_ff 128 (paper 2048); network.d_model 64 (paper 512); training.epochs 1 (paper 6); "
            "training.max_train_batches 2 (paper: unset); training.max_val_batches 1 (paper: unset); "
            "training.test_stride 64 (paper 1)")
CAVEAT = f"not comparable with the paper's figures: profile quick, settings other than the paper's: {SETTINGS}"


def _record(suite: str, tags: dict[str, str], params: dict[str, str], metrics: dict[str, float]) -> RunRecord:
    name = "-".join(tags.values()) + "-s0"
    return RunRecord(f"id-{name}", name, "FINISHED", 0, {"suite": suite, "profile": "quick", "seed": "0", **tags},
                     {**params, "seed": "0"}, metrics, "parent")


def _ltsf_comparison():
    definition, cfg = load_profile("ltsf", "quick", overrides=OVERRIDES)
    [(tags, params)] = [(t, p) for t, p in definition.shipped_settings(cfg)
                        if (t["dataset"], t["horizon"], t["model"]) == ("ETTh1", "24", "informer")]
    params = {k: "7" if v is None else v for k, v in params.items()}  # None: the data decide
    run = _record("ltsf", tags, params, {"test_mse": 1.286, "test_mae": 0.865})
    return compare_runs(SuiteRuns("ltsf", "recurbench-ltsf", "memory://", "quick", [run], []))


def test_every_differing_setting_is_named_in_the_terminal_and_in_every_file_format():
    comp = _ltsf_comparison()
    assert comp.paper_caveat == comp.paper_caveat_short == CAVEAT
    title = f"recurbench-ltsf (profile quick): test MSE/MAE over seeds — {CAVEAT}"
    assert render(comp, "markdown").startswith(f"### {title}\n")
    csv = pd.read_csv(io.StringIO(render(comp, "csv")))
    assert set(csv["paper_caveat"]) == {CAVEAT}
    caption = render(comp, "latex").splitlines()[2]
    assert caption == r"\caption{" + title.replace("_", r"\_").replace("—", "---") + "}"
    console = Console(width=80, record=True)
    for item in rich_tables(comp):
        console.print(item)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert " ".join(" ".join(lines).split()).startswith(" ".join(title.split()))


def test_the_terminal_counts_several_long_values_but_names_their_key():
    heads = SettingDifference("rsa.k", ("[0, 2, 2, 0, 2, 2]",),
                              ("[4, 0, 0, 4, 0, 0]", "[0, 2, 2, 2, 1, 1]", "None"))
    assert heads.text() == "rsa.k [0, 2, 2, 0, 2, 2] (paper [4, 0, 0, 4, 0, 0], [0, 2, 2, 2, 1, 1], or unset)"
    assert heads.text(short=True) == "rsa.k [0, 2, 2, 0, 2, 2] (paper: 2 values, or unset)"
    # Few or short values are listed in the terminal too.
    assert SettingDifference("network.seq_len", ("96",), ("48", "168")).text(short=True) == (
        "network.seq_len 96 (paper 48, 168)")


def test_the_closing_table_of_run_names_every_differing_setting(data_dir):
    definition, cfg = load_profile("ltsf", "quick", overrides=OVERRIDES)
    plans = definition.plan(cfg, {"models": ["informer"]}, data_dir=str(data_dir))
    metrics = {"test_mse": 1.286, "test_mae": 0.865, "seconds_per_epoch": 0.4}
    _, rows = definition.summary_rows([RunOutcome(p, "FINISHED", metrics) for p in plans])
    assert rows[-1][0] == f"paper MSE/MAE: not comparable with the paper's figures: settings other than the paper's: {SETTINGS}"


def test_a_configuration_the_paper_has_no_figures_for_shows_none_of_the_papers(tmp_path):
    """A MiniGrid pair of one's own (`run minigrid --pair A:B`): no column of dashes marked as the
    paper's, no caveat on figures that are not there, no note on how Table 4 came about."""
    definition, cfg = load_profile("minigrid", "quick")
    params = {k: "7" if v is None else v for k, v in definition.shipped_settings(cfg)[0][1].items()}
    pair = "MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0"
    run = _record("minigrid", {"env": pair, "agent": "lstm"}, params, {"train_reward": 0.5, "test_reward": 0.25})
    runs = SuiteRuns("minigrid", "recurbench-minigrid", "memory://", "quick", [run], [])
    comp = compare_runs(runs)
    assert comp.reference == "none" and comp.paper_caveat is None and comp.paper_caveat_short is None
    assert comp.notes == ["the paper gives no figures for these configurations: ours only"]
    md = render(comp, "markdown")
    assert md.split("\n\n")[:3] == [
        "### recurbench-minigrid (profile quick): mean over seeds",
        "| env | agent | train reward | test reward | test/train | train reward IQM [95% CI] | test reward IQM [95% CI] |\n"
        "|---|---|---|---|---|---|---|\n"
        f"| {pair} | lstm | 0.500 (n=1) | 0.250 (n=1) | 0.500 (n=1) | — | — |",
        "### IQM over all env pairs with ≥ 3 seeds (stratified bootstrap)",
    ]
    assert render(comp, "csv").splitlines()[0] == "env,agent,metric,mean,std,n,iqm,iqm_lo,iqm_hi"
    built, _ = minigrid_figures(runs, comp, tmp_path)  # the report's figure cites no Table 4 either
    assert [f.caption for f in built] == ["Final train and test reward per env pair and core (± std over seeds)."]
    # A pair of the paper's keeps its figures, and the note on how they came about.
    doorkey = _record("minigrid", {"env": "DoorKey", "agent": "lstm"}, params, {"train_reward": 0.5, "test_reward": 0.25})
    both = compare_runs(SuiteRuns("minigrid", "recurbench-minigrid", "memory://", "quick", [run, doorkey], []))
    assert both.reference == "paper" and both.notes[0].startswith("paper: Kerg et al.'s Table 4")
