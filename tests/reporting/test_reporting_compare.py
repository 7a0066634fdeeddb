"""compare(): aggregates over seeds checked against values computed by hand from the fixture store
(see conftest.py for the table of logged values)."""

from __future__ import annotations

import io
import math
from contextlib import contextmanager

import pandas as pd
import pytest
from typer.testing import CliRunner

from recurbench.errors import ConfigError, RecurbenchError
from recurbench.records import logged_settings
from recurbench.reference import ltsf_reference, minigrid_reference
from recurbench.reporting.by_suite import compare
from recurbench.reporting.compare import ltsf_wins
from recurbench.reporting.render import render, rich_tables
from recurbench.reporting.stats import iqm, iqm_ci


def cell(comp, metric, **keys):
    sub = comp.cells[comp.cells["metric"] == metric]
    for k, v in keys.items():
        sub = sub[sub[k] == v]
    assert len(sub) == 1, f"expected one cell for {keys} {metric}, got {len(sub)}"
    return sub.iloc[0]


@pytest.fixture(scope="module")
def ltsf(store):
    return compare("ltsf", tracking_uri=store.uri)


@pytest.fixture(scope="module")
def minigrid(store):
    return compare("minigrid", tracking_uri=store.uri)


def test_ltsf_mean_std_n_over_seeds(ltsf):
    c = cell(ltsf, "mse", dataset="ETTh1", horizon=24, model="informer")
    # seeds 0,1,2: 0.6, 0.7, 0.8 — the superseded seed-0 run (5.0) and the paper-profile run (9.9) excluded
    assert (c["mean"], c["std"], c["n"]) == (pytest.approx(0.7), pytest.approx(0.1), 3)
    c = cell(ltsf, "mae", dataset="ETTh1", horizon=24, model="rsa_informer")
    assert (c["mean"], c["std"], c["n"]) == (pytest.approx(0.46), pytest.approx(math.sqrt(0.0002)), 2)
    c = cell(ltsf, "mse", dataset="ETTh1", horizon=48, model="rsa_informer")
    assert c["mean"] == pytest.approx(0.5) and c["n"] == 1 and math.isnan(c["std"])
    assert ltsf.profile == "quick"
    assert any("superseded" in n for n in ltsf.notes) and any("paper" in n for n in ltsf.notes)


def test_runs_of_other_settings_are_never_pooled(ltsf):
    # ETTh1-48 rsa_informer: the older seed-1 run was trained with seq_len 48 (MSE 7.0): left out, and
    # the note names the configuration and the param.
    note = next(n for n in ltsf.notes if "settings differ" in n)
    assert note.startswith("1 finished run(s) left out")
    assert "ETTh1/48/rsa_informer: seq_len 48 (newest: 96)" in note
    # ETTh1-48 informer: the older seed-1 run differs only in its thread count: pooled (1.1 and 1.3).
    c = cell(ltsf, "mse", dataset="ETTh1", horizon=48, model="informer")
    assert (c["mean"], c["n"]) == (pytest.approx(1.2), 2)


def _record(**params):
    from recurbench.records import RunRecord

    return RunRecord("id", "run", "FINISHED", 0, {}, {k: str(v) for k, v in params.items()}, {}, None)


def test_a_param_an_older_run_did_not_log_is_read_at_its_default():
    from recurbench.records import settings_diff

    defaults = {"training.rsa_lr_factor": "1.0"}
    older = _record(seq_len=96)  # logged before rsa_lr_factor existed: it trained with factor 1
    assert settings_diff(older, _record(seq_len=96, **{"training.rsa_lr_factor": 1.0}), defaults) == ""
    assert settings_diff(older, _record(seq_len=96, **{"training.rsa_lr_factor": 100.0}), defaults) == (
        "training.rsa_lr_factor 1.0 (newest: 100.0)"
    )
    # Without a known default the runs cannot be told apart, so they count as different.
    assert settings_diff(older, _record(seq_len=96, width=3), defaults) == "width not logged (newest: 3)"
    assert settings_diff(_record(seq_len=96, seed=1, torch_threads=2), _record(seq_len=96, seed=0)) == ""


def test_suite_param_defaults_are_the_text_a_default_run_logs(data_dir):
    from recurbench.suites.registry import load_profile

    definition, paper = load_profile("ltsf", "paper")  # Informer's training scheme: every default
    (plan,) = definition.plan(paper, {"datasets": ["ETTh1"], "horizons": ["24"], "models": ["rsa_informer"], "seeds": 1},
                              data_dir=str(data_dir))
    logged = logged_settings(plan.params)
    defaults = definition.param_defaults()
    changed = ("training.lr_hold_epochs", "training.rsa_lr_factor")  # shipped values that older runs lacked
    training = {k: v for k, v in defaults.items() if k.startswith("training.") and k not in changed}
    assert training and all(logged[k] == v for k, v in training.items())
    # Runs from before lr_hold_epochs halved after every epoch: one that did not log it read as 1.
    assert (logged["training.lr_hold_epochs"], defaults["training.lr_hold_epochs"]) == ("2", "1")
    # Runs from before rsa_lr_factor trained every weight at one rate: read as 1, the paper profile ships 1000.
    assert (logged["training.rsa_lr_factor"], defaults["training.rsa_lr_factor"]) == ("1000.0", "1.0")
    assert defaults["rsa.keep_positional"] == "False"
    definition, quick = load_profile("minigrid", "quick")
    assert definition.param_defaults()["ppo.learning_rate"] == "0.001"


def test_grouping_by_a_param_keeps_each_variant(store):
    variants = compare("ltsf", tracking_uri=store.uri, by=["dataset", "horizon", "model", "seq_len"])
    short = cell(variants, "mse", dataset="ETTh1", horizon=48, model="rsa_informer", seq_len="48")
    usual = cell(variants, "mse", dataset="ETTh1", horizon=48, model="rsa_informer", seq_len="96")
    assert (short["mean"], short["n"], usual["mean"], usual["n"]) == (pytest.approx(7.0), 1, pytest.approx(0.5), 1)
    assert not any("settings differ" in n for n in variants.notes)


def test_ltsf_paper_values_and_difference(ltsf):
    c = cell(ltsf, "mse", dataset="ETTh1", horizon=24, model="rsa_informer")
    assert c["paper"] == 0.414 and c["paper_std"] == 0.014  # RSA paper Table 1, ETTh1-24 RSA-Informer
    assert c["diff"] == pytest.approx(0.42 - 0.414)


def test_missing_cells_stay_missing(ltsf, minigrid):
    xl = cell(ltsf, "mse", dataset="ETTh1", horizon=24, model="xl")  # never run
    assert xl["n"] == 0 and math.isnan(xl["mean"]) and math.isnan(xl["diff"]) and xl["paper"] == 0.514
    assert set(ltsf.cells["model"]) == {"informer", "rsa_informer", "logsparse", "rsa_logsparse", "xl", "rsa_xl"}
    assert len(ltsf.cells) == 2 * 6 * 2  # two settings x six models x MSE/MAE, nothing dropped
    md = render(ltsf, "markdown")
    assert "| —; paper 0.514; Δ — |" in md
    mem = cell(minigrid, "test_reward", env="Memory", agent="memlstm")  # its only run failed
    assert mem["n"] == 0 and math.isnan(mem["mean"]) and mem["paper"] == 0.24
    lstm = cell(minigrid, "train_reward", env="DoorKey", agent="lstm")  # no LSTM column in the paper
    assert math.isnan(lstm["paper"]) and lstm["mean"] == pytest.approx(0.875)
    assert set(minigrid.cells["env"]) == {"DoorKey", "Memory"}  # env pairs never run are not invented


def test_failed_runs_are_listed_not_aggregated(ltsf, minigrid):
    assert ltsf.failed[["name", "status", "model", "seed"]].values.tolist() == [["ETTh1-24-rsa_informer-s2", "FAILED", "rsa_informer", 2]]
    assert ltsf.failed["error"].iloc[0] == "RuntimeError: out of memory"
    assert cell(ltsf, "mse", dataset="ETTh1", horizon=24, model="rsa_informer")["n"] == 2
    assert minigrid.failed["error"].tolist() == ["RuntimeError: env exploded"]
    assert "runs that did not finish" in render(ltsf, "markdown")


def test_ltsf_win_counts(ltsf):
    wins = ltsf.wins.set_index("baseline")
    # ours: informer pair wins all four cells; rsa_logsparse wins MSE (0.9 <= 1.0), loses MAE (0.85 > 0.8); no xl run
    assert wins.loc["informer", ["ours_wins", "ours_cells"]].tolist() == [4, 4]
    assert wins.loc["logsparse", ["ours_wins", "ours_cells"]].tolist() == [1, 2]
    assert wins.loc["xl", ["ours_wins", "ours_cells"]].tolist() == [0, 0]
    # The table lists the pairs that have a cell to count: "0/0" for XL said nothing.
    listed = render(ltsf, "markdown").split("cells where RSA ≤ baseline")[1]
    assert "rsa_informer vs informer" in listed and "rsa_xl vs xl" not in listed
    # A quick-profile store: the paper's counts are not set beside ours (test_paper_win_counts_...).
    assert [c for c in wins.columns if c.startswith("paper")] == []
    # Beside runs at the paper's settings they are counted on the same cells, and over its whole table:
    # 28/32, 31/32, 24/32 (XL with one tie, ETTm1-288 MAE).
    paper = ltsf_wins(ltsf.cells[["dataset", "horizon", "model", "metric", "mean"]], ltsf_reference()).set_index("baseline")
    assert paper.loc["logsparse", ["paper_wins", "paper_cells"]].tolist() == [2, 2]
    assert paper["paper_all_wins"].tolist() == [28, 31, 24] and paper["paper_all_cells"].tolist() == [32, 32, 32]
    assert paper.loc["xl", "paper_all_ties"] == 1


def test_a_quick_profile_is_not_set_beside_the_papers_figures_as_if_comparable(ltsf, store):
    assert ltsf.paper_caveat.startswith(
        "not comparable with the paper's figures: profile quick, settings other than the paper's: "
    )
    md = render(ltsf, "markdown")
    main, wins = (t for t in md.split("### ")[1:3])
    assert main.startswith(f"recurbench-ltsf (profile quick): test MSE/MAE over seeds — {ltsf.paper_caveat}\n")
    assert "ours only: the paper's counts are left out" in wins.splitlines()[0]
    assert "| RSA vs baseline | ours |" in wins and "28/32" not in md and "paper, all cells" not in md
    terminal = [t.title for t in rich_tables(ltsf) if hasattr(t, "title")]
    assert ltsf.paper_caveat_short in str(terminal[0]) and "left out, not comparable" in str(terminal[1])
    # A run of the paper profile whose logged settings are not the paper's is flagged too.
    paper = compare("ltsf", tracking_uri=store.uri, profile="paper")
    assert paper.paper_caveat.startswith("not comparable with the paper's figures: settings other than the paper's: ")


def test_paper_win_counts_stand_beside_runs_at_the_papers_settings():
    from recurbench.records import RunRecord
    from recurbench.reporting.by_suite import compare_runs
    from recurbench.reporting.runs import SuiteRuns
    from recurbench.suites.registry import load_profile

    definition, cfg = load_profile("ltsf", "paper")
    shipped = {tags["model"]: params for tags, params in definition.shipped_settings(cfg)
               if (tags["dataset"], tags["horizon"]) == ("ETTh1", "24")}

    def record(model: str, mse: float, mae: float) -> RunRecord:
        params = {k: "7" if v is None else v for k, v in shipped[model].items()}  # None: the data decide
        tags = {"suite": "ltsf", "profile": "paper", "dataset": "ETTh1", "horizon": "24", "model": model, "seed": "0"}
        return RunRecord(f"id-{model}", f"{model}-ETTh1-24-s0", "FINISHED", 0, tags, {**params, "seed": "0"},
                         {"test_mse": mse, "test_mae": mae}, "parent")

    runs = SuiteRuns("ltsf", "recurbench-ltsf", "memory://", "paper",
                     [record("informer", 0.8, 0.6), record("rsa_informer", 0.5, 0.7)], [])
    comp = compare_runs(runs)
    assert comp.paper_caveat is None
    md = render(comp, "markdown")
    assert "not comparable" not in md
    # ours: MSE won, MAE lost; the paper's on the same two cells, and over its whole table
    assert "| rsa_informer vs informer | 1/2 | 2/2 | 28/32 |" in md


def test_paper_counts_recomputed_from_the_shipped_csv():
    ref = ltsf_reference().pivot_table(index=["dataset", "horizon", "metric"], columns="model", values="paper_mean")
    assert len(ref) == 32
    assert int((ref["rsa_informer"] <= ref["informer"]).sum()) == 28
    assert int((ref["rsa_logsparse"] <= ref["logsparse"]).sum()) == 31
    assert int((ref["rsa_xl"] <= ref["xl"]).sum()) == 24 and int((ref["rsa_xl"] < ref["xl"]).sum()) == 23
    mg = minigrid_reference().set_index(["env", "agent", "metric"])["paper"]
    assert mg[("DoorKey", "rellstm", "test_reward")] == 0.44 and mg[("Memory", "memlstm", "train_reward")] == 0.40


def test_minigrid_aggregates_and_iqm(minigrid):
    c = cell(minigrid, "train_reward", env="DoorKey", agent="lstm")  # 0.9, 0.8, 0.95, 0.85
    assert c["mean"] == pytest.approx(0.875) and c["std"] == pytest.approx(math.sqrt(0.0125 / 3)) and c["n"] == 4
    assert c["iqm"] == pytest.approx((0.85 + 0.9) / 2)  # middle two of four
    assert c["iqm_lo"] <= c["iqm"] <= c["iqm_hi"] and 0.8 <= c["iqm_lo"] and c["iqm_hi"] <= 0.95
    ratio = cell(minigrid, "generalisation_ratio", env="DoorKey", agent="rellstm")  # the ratio of the means
    assert ratio["mean"] == pytest.approx(((0.5 + 0.3 + 0.4) / 3) / ((0.9 + 0.9 + 0.96) / 3)) and ratio["n"] == 3
    assert ratio["paper"] == pytest.approx(0.44 / 0.93)
    assert any(n.startswith("paper: Kerg et al.'s Table 4 came from agents that saw image and direction only, in code "
                            "that cleared the attention memory at every acting step and at the start of every 16-step "
                            "training chunk") for n in minigrid.notes)
    assert math.isnan(cell(minigrid, "test_reward", env="DoorKey", agent="memlstm")["iqm"])  # one seed: no IQM
    agg = minigrid.aggregate.set_index(["agent", "metric"])
    rel = agg.loc[("rellstm", "test_reward")]
    # pooled 0.5 0.3 0.4 | 0.2 0.3 0.1 -> drop one at each end -> mean(0.2, 0.3, 0.3, 0.4)
    assert (rel["envs"], rel["runs"]) == (2, 6) and rel["iqm"] == pytest.approx(0.3)
    assert 0.1 <= rel["iqm_lo"] <= 0.3 <= rel["iqm_hi"] <= 0.5


def test_minigrid_ratio_counts_a_seed_whose_train_reward_is_0():
    import pandas as pd

    from recurbench.reporting.compare import minigrid_ratio_of_means

    frame = pd.DataFrame({"env": ["Memory"] * 3 + ["Fetch"], "agent": ["lstm"] * 4,
                          "train_reward": [0.0, 0.8, 0.4, 0.0], "test_reward": [0.2, 0.4, math.nan, 0.1]})
    cells = pd.DataFrame({"env": ["Memory", "Fetch"], "agent": ["lstm", "lstm"], "metric": ["generalisation_ratio"] * 2,
                          "mean": [0.5, math.nan], "std": [0.0, math.nan], "n": [1, 0]})
    out = minigrid_ratio_of_means(cells, frame).set_index("env")
    # Seeds 0 and 1 (seed 2 has no test reward): 0.3 / 0.4; the mean of per-seed ratios would drop seed 0.
    assert out.loc["Memory", "mean"] == pytest.approx(0.75) and out.loc["Memory", "n"] == 2
    assert math.isnan(out.loc["Fetch", "mean"]) and out.loc["Fetch", "n"] == 1  # mean train reward 0: no ratio


def test_iqm_and_bootstrap():
    assert iqm([100, 1, 2, 3, 4]) == pytest.approx(3.0)  # floor(5/4) = 1 dropped at each end
    assert iqm([1, 2, 3]) == pytest.approx(2.0)  # nothing trimmed below four runs
    assert iqm_ci([[0.4, 0.4, 0.4]]) == (pytest.approx(0.4),) * 3
    assert iqm_ci([[0.1, 0.5, 0.9, 0.2]], seed=3) == iqm_ci([[0.1, 0.5, 0.9, 0.2]], seed=3)


def test_by_profile_and_reference_options(store):
    paper = compare("ltsf", tracking_uri=store.uri, profile="paper")
    assert cell(paper, "mse", dataset="ETTh1", horizon=24, model="informer")["mean"] == pytest.approx(9.9)
    by_model = compare("ltsf", tracking_uri=store.uri, by=["model"], reference="paper")
    informer = cell(by_model, "mse", model="informer")  # ETTh1-24 seeds and ETTh1-48 pooled
    assert informer["mean"] == pytest.approx((0.6 + 0.7 + 0.8 + 1.1 + 1.3) / 5) and informer["n"] == 5
    assert "paper" not in by_model.cells and by_model.wins is None
    plain = compare("ltsf", tracking_uri=store.uri, reference="none")
    assert "paper" not in plain.cells and "paper" not in render(plain, "markdown").split("###")[1]


def test_a_by_key_given_twice_is_refused_before_the_store_is_read(tmp_path):
    # pandas would fail on the doubled column ("Grouper for 'model' not 1-dimensional").
    store = tmp_path / "never.db"
    with pytest.raises(ConfigError, match=r"^--by\.3: key 'model' is given twice \(also --by\.2\)$"):
        compare("ltsf", tracking_uri=f"sqlite:///{store}", by=["dataset", "horizon", "model", "model"])
    assert not store.exists()


def test_output_formats(ltsf):
    csv = pd.read_csv(io.StringIO(render(ltsf, "csv")))
    assert list(csv.columns) == ["dataset", "horizon", "model", "metric", "mean", "std", "n", "paper", "paper_std", "diff",
                                 "paper_caveat"]
    assert csv["mean"].isna().sum() == ltsf.cells["mean"].isna().sum()  # missing stays empty, not 0
    assert set(csv["paper_caveat"]) == {ltsf.paper_caveat}  # a quick profile: every row says why
    md = render(ltsf, "markdown")
    assert "| ETTh1 | 24 | MSE | 0.700 ± 0.100 (n=3); paper 0.762; Δ -0.062 |" in md
    assert "*a cell reads: our mean ± std over n runs, the paper's figure, Δ = ours − paper*" in md  # Δ's sign
    assert "| rsa_informer vs informer | 4/4 |" in md  # ours only: a quick profile
    tex = render(ltsf, "latex")
    assert r"\begin{tabular}" in tex and r"0.700 $\pm$ 0.100 (n=3)" in tex and "n/a" in tex
    with pytest.raises(ConfigError, match="unknown format 'xml'"):
        render(ltsf, "xml")


def test_bad_input_errors(store, tmp_path):
    with pytest.raises(ConfigError, match="unknown suite 'nope'"):
        compare("nope", tracking_uri=store.uri)
    with pytest.raises(ConfigError, match="unknown reference"):
        compare("ltsf", tracking_uri=store.uri, reference="arxiv")
    with pytest.raises(RecurbenchError, match="no MLflow store"):
        compare("ltsf", tracking_uri=f"sqlite:///{tmp_path / 'none.db'}")
    assert not (tmp_path / "none.db").exists()  # reading never creates a store
    with pytest.raises(RecurbenchError, match="no experiment 'absent'.*recurbench-ltsf"):
        compare("ltsf", tracking_uri=store.uri, experiment="absent")
    from mlflow.tracking import MlflowClient

    MlflowClient(store.uri).create_experiment("empty-exp", artifact_location=(tmp_path / "a").as_uri())
    with pytest.raises(RecurbenchError, match="'empty-exp'.*has no runs"):
        compare("ltsf", tracking_uri=store.uri, experiment="empty-exp")
    with pytest.raises(RecurbenchError, match="no runs of profile 'huge'"):
        compare("ltsf", tracking_uri=store.uri, profile="huge")
    # A typo in --by: the one key no run carries is named, not every key.
    with pytest.raises(RecurbenchError) as typo:
        compare("ltsf", tracking_uri=store.uri, by=["dataset", "horizon", "model", "training.rsa_lr_factr"])
    assert str(typo.value) == "no finished run of 'recurbench-ltsf' carries the tag(s) training.rsa_lr_factr"


def test_cli_compare(store):
    from recurbench.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["compare", "ltsf", "--tracking-uri", store.uri, "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert "ETTh1,24,informer,mse,0.7" in result.stdout
    result = runner.invoke(app, ["compare", "minigrid", "--tracking-uri", store.uri])
    assert result.exit_code == 0 and "DoorKey" in result.stdout and "FAILED" in result.stdout and "exploded" in result.stdout
    result = runner.invoke(app, ["compare", "ltsf", "--tracking-uri", store.uri, "--format", "xml"])
    assert isinstance(result.exception, ConfigError)
    result = runner.invoke(app, ["compare", "ltsf", "--tracking-uri", store.uri, "--settings", "newest", "--format", "csv"])
    assert result.exit_code == 0 and "ETTh1,48,rsa_informer,mse,0.5" in result.stdout  # its newest run, as shipped-first
    result = runner.invoke(app, ["compare", "ltsf", "--tracking-uri", store.uri, "--settings", "latest"])
    assert isinstance(result.exception, ConfigError) and "--settings: unknown rule 'latest'" in str(result.exception)


def test_grouping_by_a_param_an_older_run_did_not_log_reads_its_default(tmp_path):
    # rsa_informer seed 0 was logged before training.rsa_gate_lr_factor existed, seed 1 after (at its
    # default, None): grouped by that param they are one cell of two seeds. The baseline logged no rsa.*
    # params at all, so it gains none: grouped by rsa.gate_init it is left out, not given a gate.
    uri = _ltsf_store(tmp_path, [
        ("rsa_informer", 0, 0.40, {"rsa.k": "[2, 0, 0, 0, 0, 0]", "training.rsa_lr_factor": "1.0"}),
        ("rsa_informer", 1, 0.44, {"rsa.k": "[2, 0, 0, 0, 0, 0]", "rsa.gate_init": "1.0",
                                   "training.rsa_lr_factor": "1.0", "training.rsa_gate_lr_factor": "None"}),
        ("informer", 0, 0.70, {"training.rsa_lr_factor": "1.0", "training.rsa_gate_lr_factor": "None"}),
    ])
    keys = ["dataset", "horizon", "model"]
    by_gate_rate = compare("ltsf", tracking_uri=uri, by=[*keys, "training.rsa_gate_lr_factor"])
    c = cell(by_gate_rate, "mse", model="rsa_informer", **{"training.rsa_gate_lr_factor": "None"})
    assert (c["mean"], c["n"]) == (pytest.approx(0.42), 2)
    by_hold = compare("ltsf", tracking_uri=uri, by=[*keys, "training.lr_hold_epochs"])  # its value before it was logged
    c = cell(by_hold, "mse", model="rsa_informer", **{"training.lr_hold_epochs": "1"})
    assert (c["mean"], c["n"]) == (pytest.approx(0.42), 2)
    by_gate = compare("ltsf", tracking_uri=uri, by=[*keys, "rsa.gate_init"])
    c = cell(by_gate, "mse", model="rsa_informer", **{"rsa.gate_init": "1.0"})
    assert (c["mean"], c["n"]) == (pytest.approx(0.42), 2)
    assert set(by_gate.cells["model"]) == {"rsa_informer"}
    assert any("1 finished run(s) without the tag(s)" in n for n in by_gate.notes)


def _shipped_store(tmp_path):
    """ETTh1-24 rsa_xl of profile quick: seeds 0 and 1 at the shipped settings (MSE 0.50, 0.52), then a
    newer ``--set training.rsa_lr_factor=1000`` probe (seed 0, MSE 0.90); ETTh1-24 informer: one run
    whose d_ff the profile no longer ships (MSE 0.70)."""
    from recurbench.reporting.runs import suite_shipped_settings

    shipped = {(t["dataset"], t["horizon"], t["model"]): p for t, p in suite_shipped_settings("ltsf", "quick")}

    def logged(model, **changes):
        params = {k: "7" if v is None else v for k, v in shipped[("ETTh1", "24", model)].items()}  # data-derived: any
        return {**params, **changes, "torch_threads": 1}

    return _ltsf_store(tmp_path, [
        ("rsa_xl", 0, 0.50, logged("rsa_xl")), ("rsa_xl", 1, 0.52, logged("rsa_xl")),
        ("rsa_xl", 0, 0.90, logged("rsa_xl", **{"training.rsa_lr_factor": "1000.0"})),
        ("informer", 0, 0.70, logged("informer", **{"network.d_ff": "4096"})),
    ])


def test_the_left_out_note_names_each_way_a_configurations_runs_differ(tmp_path):
    from recurbench.reporting.runs import suite_shipped_settings

    shipped = {(t["dataset"], t["horizon"], t["model"]): p for t, p in suite_shipped_settings("ltsf", "quick")}
    params = {k: "7" if v is None else v for k, v in shipped[("ETTh1", "24", "rsa_xl")].items()}
    uri = _ltsf_store(tmp_path, [
        ("rsa_xl", 0, 0.50, params),
        ("rsa_xl", 0, 0.90, {**params, "training.rsa_lr_factor": "1000.0"}),  # two probes, each its own change
        ("rsa_xl", 1, 0.80, {**params, "network.d_ff": "4096"}),
    ])
    comp = compare("ltsf", tracking_uri=uri)
    assert cell(comp, "mse", model="rsa_xl")["n"] == 1
    (note,) = [n for n in comp.notes if "settings differ" in n]
    assert note.startswith("2 finished run(s) left out")
    assert "ETTh1/24/rsa_xl: training.rsa_lr_factor 1000.0 (shipped: 1.0)" in note
    assert f"ETTh1/24/rsa_xl: network.d_ff 4096 (shipped: {params['network.d_ff']})" in note


def _ltsf_store(tmp_path, runs):
    """An MLflow store of ltsf ``quick`` runs on ETTh1-24, each in an invocation of its own, in order:
    ``(model, seed, mse, params[, tags])`` (MAE = MSE)."""
    from recurbench.tracking import MlflowTracker, experiment_name, standard_tags

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri)
    tracker.client.create_experiment(experiment_name("ltsf"), artifact_location=(tmp_path / "a").as_uri())
    for model, seed, mse, params, *extra in runs:
        with tracker.run("ltsf-quick", experiment=experiment_name("ltsf"),
                         tags=standard_tags(suite="ltsf", profile="quick", role="parent")) as parent:
            tags = standard_tags(suite="ltsf", profile="quick", seed=seed, dataset="ETTh1", horizon=24, model=model,
                                 **(extra[0] if extra else {}))
            with tracker.run(f"{model}-s{seed}", experiment=experiment_name("ltsf"), parent=parent, tags=tags) as run:
                run.log_params({**params, "seed": seed})
                run.log_metrics({"test_mse": mse, "test_mae": mse})
    return uri


def test_a_configuration_is_shown_at_its_shipped_settings_before_newer_probes(tmp_path):
    uri = _shipped_store(tmp_path)
    shipped = compare("ltsf", tracking_uri=uri)
    c = cell(shipped, "mse", model="rsa_xl")
    assert (c["mean"], c["n"]) == (pytest.approx(0.51), 2)  # the probe, newer, is left out
    assert any("1 finished run(s) left out" in n and "ETTh1/24/rsa_xl: training.rsa_lr_factor 1000.0 (shipped: 1.0)" in n
               for n in shipped.notes), shipped.notes
    # No run of informer has today's settings: its newest run stands, and a note says so.
    assert cell(shipped, "mse", model="informer")["mean"] == pytest.approx(0.70)
    assert ("1 configuration(s) have no finished run at the settings their profile ships now, so they are shown "
            "at their newest run's settings: ETTh1/24/informer (network.d_ff 4096 (shipped: 128))") in shipped.notes
    newest = compare("ltsf", tracking_uri=uri, settings="newest")
    c = cell(newest, "mse", model="rsa_xl")
    assert (c["mean"], c["n"]) == (pytest.approx(0.90), 1)
    assert any("training.rsa_lr_factor 1.0 (newest: 1000.0)" in n for n in newest.notes)
    assert not any("ships now" in n for n in newest.notes)
    with pytest.raises(ConfigError, match=r"^--settings: unknown rule 'oldest'; choose one of: shipped, newest$"):
        compare("ltsf", tracking_uri=uri, settings="oldest")


def test_has_settings_reads_defaults_and_refuses_settings_the_suite_no_longer_has():
    from recurbench.records import has_settings

    shipped = {"seq_len": "96", "training.rsa_lr_factor": "1.0", "network.n_features": None}
    assert has_settings(_record(seq_len=96, **{"training.rsa_lr_factor": 1.0, "network.n_features": 7}, seed=3), shipped)
    assert not has_settings(_record(seq_len=48, **{"training.rsa_lr_factor": 1.0, "network.n_features": 7}), shipped)
    # An older run that did not log the factor trained at its default: shipped where that is the value.
    older = _record(seq_len=96, **{"network.n_features": 7})
    assert has_settings(older, shipped, {"training.rsa_lr_factor": "1.0"})
    assert not has_settings(older, shipped)
    # A param the settings do not have counts against a run, even at a default.
    wider = _record(seq_len=96, **{"training.rsa_lr_factor": 1.0, "network.n_features": 7, "width": 3})
    assert not has_settings(wider, shipped) and not has_settings(wider, shipped, {"width": "3"})


def test_shipped_settings_diff_says_what_has_settings_refuses():
    from recurbench.records import shipped_settings_diff

    shipped = {"seq_len": "96", "training.rsa_lr_factor": "1.0", "network.n_features": None}
    assert shipped_settings_diff(_record(seq_len=96, **{"training.rsa_lr_factor": 1.0, "network.n_features": 7}, seed=3),
                                 shipped) == ""
    assert shipped_settings_diff(_record(seq_len=48, **{"training.rsa_lr_factor": 1.0, "network.n_features": 7}),
                                 shipped) == "seq_len 48 (shipped: 96)"
    older = _record(seq_len=96, **{"network.n_features": 7})
    assert shipped_settings_diff(older, shipped, {"training.rsa_lr_factor": "1.0"}) == ""
    assert shipped_settings_diff(older, shipped) == "training.rsa_lr_factor not logged (shipped: 1.0)"
    wider = _record(seq_len=12, **{"training.rsa_lr_factor": 1.0, "network.n_features": 7, "width": 3})
    assert shipped_settings_diff(wider, shipped, {"width": "3"}) == "seq_len 12 (shipped: 96), width 3 (shipped: not a setting)"


def test_shipped_settings_are_what_the_suites_plan_and_log(data_dir):
    from recurbench.suites.registry import load_profile

    definition, paper = load_profile("ltsf", "paper")
    shipped = {tuple(t.values()): p for t, p in definition.shipped_settings(paper)}
    assert len(shipped) == sum(len(h) for h in paper.windows.values()) * 6  # every model has its heads
    plans = definition.plan(paper, {"datasets": ["ETTh1", "WTH"], "horizons": ["24"], "seeds": 1}, data_dir=str(data_dir))
    assert len(plans) == 12
    for plan in plans:
        settings = shipped[(plan.tags["dataset"], plan.tags["horizon"], plan.tags["model"])]
        logged = logged_settings(plan.params)
        assert logged.keys() <= settings.keys()
        assert {k: v for k, v in logged.items() if settings[k] is not None} == {
            k: v for k, v in settings.items() if v is not None
        }
    definition, quick = load_profile("minigrid", "quick")
    shipped = {tuple(t.values()): p for t, p in definition.shipped_settings(quick)}
    for plan in definition.plan(quick, {"seeds": 1}, data_dir=None):
        logged = logged_settings(plan.params)
        assert shipped[(plan.tags["env"], plan.tags["agent"])] == logged


def test_runs_on_a_data_file_other_than_the_registered_one_are_named(tmp_path):
    uri = _ltsf_store(tmp_path, [
        ("informer", 0, 0.60, {}, {"data_sha256": "aaa", "data_registry": "match"}),
        ("informer", 1, 0.80, {}, {"data_sha256": "bbb", "data_registry": "differs"}),
    ])
    pooled = compare("ltsf", tracking_uri=uri, settings="newest")
    assert cell(pooled, "mse", model="informer")["n"] == 2
    assert ("1 run(s) read a data file other than the one the registry pins (tag data_registry=differs): "
            "informer-s1; --by data_sha256 shows them apart") in pooled.notes
    apart = compare("ltsf", tracking_uri=uri, settings="newest", by=["dataset", "horizon", "model", "data_sha256"])
    assert cell(apart, "mse", model="informer", data_sha256="bbb")["mean"] == pytest.approx(0.80)
    assert cell(apart, "mse", model="informer", data_sha256="aaa")["mean"] == pytest.approx(0.60)


class _LtsfAttempts:
    """An LTSF store of informer-ETTh1-24 attempts, each a nested run opened inside :meth:`parent`:
    finished with an MSE, or failed (a RuntimeError naming it); ``ids`` by label."""

    def __init__(self, tmp_path):
        from recurbench.tracking import MlflowTracker, experiment_name

        self.tracker = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
        self.experiment = experiment_name("ltsf")
        self.tracker.client.create_experiment(self.experiment, artifact_location=(tmp_path / "a").as_uri())
        self.ids: dict[str, str] = {}
        self._parent = None

    @staticmethod
    def tags(**tags):
        from recurbench.tracking import standard_tags

        return standard_tags(suite="ltsf", profile="quick", **tags)

    @contextmanager
    def parent(self):
        with self.tracker.run("ltsf-quick", experiment=self.experiment, tags=self.tags(role="parent")) as run:
            self._parent = run
            yield run
        self._parent = None

    def attempt(self, label, seed, *, seq_len=96, mse=None, extra_tags=None, extra_params=None):
        tags = {**self.tags(seed=seed, dataset="ETTh1", horizon=24, model="informer"), **(extra_tags or {})}
        try:
            with self.tracker.run(f"informer-ETTh1-24-s{seed}", experiment=self.experiment, parent=self._parent,
                                  tags=tags) as run:
                self.ids[label] = run.run_id
                run.log_params({"seq_len": seq_len, "seed": seed, **(extra_params or {})})
                if mse is None:
                    raise RuntimeError(label)
                run.log_metrics({"test_mse": mse, "test_mae": mse})
        except RuntimeError:
            pass

    def attempts(self, *specs):
        """``(label, seed[, keywords of attempt])`` each, in order, under one parent run."""
        with self.parent():
            for label, seed, *rest in specs:
                self.attempt(label, seed, **(rest[0] if rest else {}))

    @staticmethod
    def column(comp, name):
        """``comp.failed``'s column ``name`` by run id (None where empty)."""
        return {r: v if isinstance(v, str) else None for r, v in zip(comp.failed["run_id"], comp.failed[name], strict=True)}

    @contextmanager
    def live(self, seed):
        """A run of ``seed`` at work (RUNNING) for the block's length."""
        with self.parent() as parent, self.tracker.run(
                f"informer-ETTh1-24-s{seed}", experiment=self.experiment, parent=parent,
                tags=self.tags(seed=seed, dataset="ETTh1", horizon=24, model="informer")) as run:
            run.log_params({"seq_len": 96, "seed": seed})
            yield run


def test_unfinished_runs_whose_seed_finished_elsewhere_are_not_listed(tmp_path):
    """A killed or failed run whose configuration and seed has a finished run at the same settings (a
    seed run again to the end, before or after) is kept in ``failed`` with that run's id, but not
    listed; one at other settings, with no finished run of its seed, or running now is still listed."""
    store = _LtsfAttempts(tmp_path)
    tracker, ids = store.tracker, store.ids
    store.attempts(("s0 failed", 0), ("s0 finished", 0, {"mse": 0.6}), ("s1 finished", 1, {"mse": 0.7}),
                   ("s1 failed after it", 1), ("s1 failed at other settings", 1, {"seq_len": 48}), ("s2 failed", 2))
    comp = compare("ltsf", tracking_uri=tracker.tracking_uri)
    assert store.column(comp, "finished_as") == {
        ids["s0 failed"]: ids["s0 finished"],
        ids["s1 failed after it"]: ids["s1 finished"],
        ids["s1 failed at other settings"]: None,
        ids["s2 failed"]: None,
    }
    assert set(comp.unresolved["run_id"]) == {ids["s1 failed at other settings"], ids["s2 failed"]}
    assert cell(comp, "mse", dataset="ETTh1", horizon=24, model="informer")["n"] == 2
    note = next(n for n in comp.notes if "did not finish are not listed" in n)
    assert note.startswith("2 run(s) that did not finish are not listed")
    assert f"({ids['s0 failed'][:8]}: finished as {ids['s0 finished'][:8]})" in note
    # A run at work now is listed even where its seed has finished before (someone runs it again).
    with store.live(0) as live:
        assert live.run_id in set(compare("ltsf", tracking_uri=tracker.tracking_uri).unresolved["run_id"])
    listed = render(comp, "markdown").split("runs that did not finish")[1].split("\n\n*")[0]  # the table, not the notes
    assert listed.count("informer-ETTh1-24-s") == 2
    assert "RuntimeError: s2 failed" in listed and "RuntimeError: s1 failed at other settings" in listed
    assert "RuntimeError: s0 failed" not in listed and "RuntimeError: s1 failed after it" not in listed


def test_an_unfinished_run_taken_over_by_a_later_attempt_is_not_listed(tmp_path):
    """An ended run (FAILED, KILLED) whose configuration and seed was started again later with the same
    params, execution params aside (continued from its checkpoint, or from the start), whatever that later run's status, is
    history: ``failed`` names the newest attempt in ``taken_over_by`` and the table lists only it. An
    attempt at other params, or with no later attempt, is still listed."""
    store = _LtsfAttempts(tmp_path)
    tracker, ids = store.tracker, store.ids
    # "s0 first" logged no checkpoint interval (an older version): an execution param, not a setting.
    store.attempts(("s9 finished", 9, {"mse": 0.5}), ("s0 first", 0),
                   ("s0 second", 0, {"extra_tags": {"resumed_from": "x"}, "extra_params": {"checkpoint_every": 500}}),
                   ("s0 third", 0, {"extra_params": {"checkpoint_every": 500}}), ("s1 at 96", 1),
                   ("s1 at 48", 1, {"seq_len": 48}), ("s2 alone", 2))
    comp = compare("ltsf", tracking_uri=tracker.tracking_uri)
    assert store.column(comp, "taken_over_by") == {
        ids["s0 first"]: ids["s0 third"],
        ids["s0 second"]: ids["s0 third"],
        ids["s0 third"]: None,
        ids["s1 at 96"]: None,
        ids["s1 at 48"]: None,
        ids["s2 alone"]: None,
    }
    assert set(comp.unresolved["run_id"]) == {ids["s0 third"], ids["s1 at 96"], ids["s1 at 48"], ids["s2 alone"]}
    note = next(n for n in comp.notes if "took each over" in n)
    assert note.startswith("2 run(s) that did not finish are not listed: a later run of the same configuration, seed")
    assert f"({ids['s0 first'][:8]}: taken over by {ids['s0 third'][:8]})" in note
    listed = render(comp, "markdown").split("runs that did not finish")[1].split("\n\n*")[0]
    assert "RuntimeError: s0 third" in listed
    assert "RuntimeError: s0 first" not in listed and "RuntimeError: s0 second" not in listed
    # A run at work now takes over the ended attempts before it, and is listed itself.
    with store.live(2) as live:
        now = compare("ltsf", tracking_uri=tracker.tracking_uri)
        assert ids["s2 alone"] not in set(now.unresolved["run_id"]) and live.run_id in set(now.unresolved["run_id"])


def test_a_suite_with_no_finished_run_yet_lists_its_runs(tmp_path):
    """Runs that have not finished are no reason to refuse a store: compare lists them, with a note that
    there is nothing to aggregate yet, and shows no table of empty aggregates (no win counts with only
    the paper's side). An experiment without runs is still refused."""
    from recurbench.tracking import MlflowTracker, experiment_name, standard_tags

    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker.client.create_experiment(experiment_name("ltsf"), artifact_location=(tmp_path / "a").as_uri())
    with tracker.run("ltsf-quick", experiment=experiment_name("ltsf"),
                     tags=standard_tags(suite="ltsf", profile="quick", role="parent")) as parent:
        tags = standard_tags(suite="ltsf", profile="quick", seed=0, dataset="ETTh1", horizon=24, model="informer")
        with pytest.raises(RuntimeError):
            with tracker.run("ETTh1-24-informer-s0", experiment=experiment_name("ltsf"), parent=parent, tags=tags):
                raise RuntimeError("out of memory")
    for by in (None, ["model"]):
        comp = compare("ltsf", tracking_uri=tracker.tracking_uri, by=by)
        assert comp.cells.empty and comp.wins is None
        assert list(comp.unresolved["name"]) == ["ETTh1-24-informer-s0"]
        assert comp.notes[0] == ("no run of profile 'quick' has finished yet, so there is nothing to aggregate over "
                                 "seeds; the runs that did not finish are listed")
        md = render(comp, "markdown")
        assert [line for line in md.splitlines() if line.startswith("### ")] == [
            "### runs that did not finish (not in the aggregates)"]
        assert "| ETTh1-24-informer-s0 | FAILED | ETTh1 | 24 | informer | 0 | RuntimeError: out of memory |" in md
        assert render(comp, "csv").splitlines() == [",".join([*(by or ["dataset", "horizon", "model"]), "metric", "mean",
                                                              "std", "n", *(["paper", "paper_std", "diff", "paper_caveat"] if not by else [])])]
    tracker.client.create_experiment("no-runs", artifact_location=(tmp_path / "b").as_uri())
    with pytest.raises(RecurbenchError, match=r"^experiment 'no-runs' in .* has no runs to compare$"):
        compare("ltsf", tracking_uri=tracker.tracking_uri, experiment="no-runs")


def test_grouping_that_leaves_out_a_configuration_key_names_what_it_pools(store):
    by_model = compare("ltsf", tracking_uri=store.uri, by=["model"])
    assert ("--by model pools runs at different settings into one cell, so its mean, std and n are over those "
            "settings, not over seeds alone: horizon 24, 48 (in 2 cell(s): informer, rsa_informer); add the key(s) "
            "to --by to keep them apart") in by_model.notes
    assert "horizon 24, 48" in render(by_model, "markdown")
    # Every configuration key kept, in another order or with a param: no note.
    for by in (["model", "horizon", "dataset"], ["dataset", "horizon", "model", "seq_len"]):
        assert not any("pools" in n for n in compare("ltsf", tracking_uri=store.uri, by=by).notes)


def test_latex_keeps_a_dash_in_text_and_writes_n_a_only_for_a_missing_value(ltsf):
    import pandas as pd

    from recurbench.reporting.render import latex_table

    tex = render(ltsf, "latex")
    captions = [line for line in tex.splitlines() if line.startswith(r"\caption")]
    assert captions[0] == (r"\caption{recurbench-ltsf (profile quick): test MSE/MAE over seeds --- " + ltsf.paper_caveat
                           .replace("_", r"\_") + "}")
    assert not any("n/a" in c for c in captions)
    assert r"cells where RSA $\leq$ baseline (MSE and MAE; ties count as wins, as in the paper) --- ours only" in tex
    # rsa_xl has no xl to stand beside: xl's cell is missing, the paper's value beside it is not.
    xl = cell(ltsf, "mse", dataset="ETTh1", horizon=24, model="xl")
    assert f"n/a; paper {xl['paper']:.3f}; $\\Delta$ n/a" in tex
    table = latex_table(pd.DataFrame({"run": ["—", "stopped — out of memory", "paper —\nnext", None, "1–3"]}),
                        "A – B — C")
    assert table.splitlines()[2] == r"\caption{A -- B --- C}"
    assert table.splitlines()[7:12] == [r"n/a \\", r"stopped --- out of memory \\", r"paper n/a; next \\", r"n/a \\",
                                        r"1--3 \\"]
