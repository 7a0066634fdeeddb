"""compare/report for the memory suite, read from an MLflow store that a tiny run of the suite wrote:
accuracy over seeds beside Table 5's cells, Table 5's layout with each cell's budget, the gradient, kappa
and loss figures."""

from __future__ import annotations

import math
import statistics

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from recurbench.memory.figures import gradient_figure
from recurbench.reporting.by_suite import compare, write_report
from recurbench.reporting.compare import cell_values
from recurbench.reporting.memory import CORE_ORDER, CORE_STYLES, _label
from recurbench.reporting.render import render
from recurbench.suites import runner
from recurbench.suites.memory import budget_text
from recurbench.tracking import MlflowTracker, experiment_name

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = {
    "tasks": ["copy"],
    "lengths": [100],
    "models": ["lstm", "rnn", "rellstm"],
    "seeds": 2,
    "task": {"copy_length": 2, "labels": 4},
    "model": {"hidden_size": 8, "attention_size": 4, "nu": 1, "rho": 1},
    # A threshold some runs reach within 6 updates and some do not: both kinds of budget.
    "training": {"updates": 6, "batch_size": 4, "learning_rate": 0.01, "log_every": 3, "eval_batches": 1,
                 "eval_every": 2, "solve_threshold": 0.3},
    "kappa_sweeps": [{"task": "copy", "T": 100, "nu": 1, "kappas": [2, 4]}],  # kappa 2 is the grid's run
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory-store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    config = root / "memory.yaml"
    config.write_text(yaml.safe_dump({"suite": "memory", "profiles": {"tiny": TINY}}))
    torch.set_num_threads(1)
    tracker = MlflowTracker(uri)
    tracker.client.create_experiment(experiment_name("memory"), artifact_location=(root / "artifacts").as_uri())
    result = runner.run_suite("memory", "tiny", tracker, config_path=config)
    assert not result.failed, [o.error for o in result.failed]
    return uri, {(o.plan.tags["T"], o.plan.tags["model"], o.plan.tags["rho"], o.plan.seed): o.metrics
                 for o in result.outcomes}


def test_compare_sets_accuracy_beside_table5(store):
    uri, metrics = store
    comp = compare("memory", tracking_uri=uri)
    rows = comp.cells[comp.cells["metric"] == "accuracy"][["T", "model", "nu", "rho"]].values.tolist()
    assert rows == [[100, "lstm", "-", "-"], [100, "rnn", "-", "-"], [100, "rellstm", "1", "1"],
                    [100, "rellstm", "1", "3"]]
    acc = cell_values(comp, "accuracy")
    lstm = acc.loc[("copy", 100, "lstm", "-", "-")]
    assert lstm["n"] == 2 and lstm["mean"] == pytest.approx((metrics[("100", "lstm", "-", 0)]["accuracy"]
                                                             + metrics[("100", "lstm", "-", 1)]["accuracy"]) / 2)
    assert lstm["paper"] == 1.0 and lstm["diff"] == pytest.approx(lstm["mean"] - 1.0)
    assert acc.loc[("copy", 100, "rellstm", "1", "1")]["paper"] == 1.0
    assert acc.loc[("copy", 100, "rellstm", "1", "3")]["n"] == 2
    assert cell_values(comp, "train_accuracy").loc[("copy", 100, "lstm", "-", "-")]["paper"] == 1.0
    assert any("Table 5" in note for note in comp.notes)
    assert "paper 1.000" in render(comp, "markdown")


def test_report_draws_gradients_kappa_and_loss(store, tmp_path):
    uri, _ = store
    report = write_report("memory", tmp_path, tracking_uri=uri, fmt="markdown", log_to_mlflow=False)
    names = [f.name for f in report.figures]
    assert names == ["memory_gradients_init", "memory_gradients_final", "memory_kappa_tradeoff",
                     "memory_loss_curves"], report.omitted
    for fig in report.figures:
        assert fig.path.read_bytes().startswith(PNG_MAGIC)
    assert "| copy | 100 | lstm |" in report.path.read_text()


def test_compare_lays_out_table5_with_each_cells_budget(store):
    uri, metrics = store
    comp = compare("memory", tracking_uri=uri)
    ((title, table),) = comp.tables
    assert title.startswith("copy: held-out accuracy per model and T") and "Table 5" in title
    # All seven columns of Table 5, in its order and named as there, whether run or not.
    assert list(table.columns) == ["T", "LSTM", "orth-RNN (rnn)", "expRNN", "MemRNN", "SAB", "RelRNN", "RelLSTM"]
    row = table.iloc[0]
    assert row["T"] == 100 and row["expRNN"] == "—\npaper 1.00"  # not run: the paper's cell alone
    for column, core, rho in (("LSTM", "lstm", "-"), ("orth-RNN (rnn)", "rnn", "-"), ("RelLSTM", "rellstm", "1")):
        seeds = [metrics[("100", core, rho, s)] for s in (0, 1)]
        accuracy, budget, paper = row[column].split("\n")
        assert accuracy.startswith(f"{sum(m['accuracy'] for m in seeds) / 2:.3f} ± ") and accuracy.endswith("(n=2)")
        assert budget == budget_text(seeds) and paper == "paper 1.00"
    # The runs end solved (at 2, 4 or 6) or at the cap (6), and the cell says which.
    budgets = {budget_text([m]) for m in metrics.values()}
    assert budgets <= {"solved at 4", "solved at 6", "6 updates"} and budgets
    # RelLSTM ran at two rho at T = 100 (the kappa sweep): the note names the one shown.
    assert any("rellstm at T = 100: nu=1, rho=1" in note for note in comp.notes)
    text = render(comp, "markdown")
    assert "| T | LSTM | orth-RNN (rnn) |" in text and "<br>paper 1.00" in text
    # Without the paper: the columns we ran, no paper line.
    ((_, ours),) = compare("memory", tracking_uri=uri, reference="none").tables
    assert list(ours.columns) == ["T", "LSTM", "orth-RNN (rnn)", "RelLSTM"]
    assert "paper" not in " ".join(ours.iloc[0].astype(str))


def test_gradient_figure_keeps_eight_cores_apart():
    # App. C's diagnostic at T = 500 with Table 5's seven models and MemLSTM: a line per core, each its
    # own colour and line style, one legend below the panels (eight entries would cover a panel's curves).
    labels = [_label({"model": core, "nu": "10", "rho": "10"}) for core in CORE_ORDER]
    assert labels[1] == "rnn (orth-RNN)" and labels[5] == "relrnn (ν=10, ρ=10)" and labels[0] == "lstm"
    curves = {label: [10.0 ** -(k + t / 100) for t in range(520)] for k, label in enumerate(labels)}
    fig = gradient_figure([("copy, T = 500", curves, 510)], "after training", CORE_STYLES)
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == labels
    assert len({(line.get_color(), line.get_linestyle()) for line in lines}) == len(labels)
    assert ax.get_legend() is None and len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == labels
    # Two curves (a run's own figure): the legend stays in the panel.
    fig = gradient_figure([("copy, T = 500", {"at initialisation": [1.0, 0.5], "after training": [1.0, 0.1]}, 1)], "one run")
    assert fig.axes[0].get_legend() is not None and not fig.legends


class Table5Store:
    """A store of the table5 profile's copy runs written by hand, each at the settings the profile ships
    (or those with ``changed``); :meth:`attempt` without ``metrics`` is stopped (KILLED) as Ctrl-C does."""

    def __init__(self, root):
        from recurbench.reporting.runs import suite_shipped_settings

        self.tracker = MlflowTracker(f"sqlite:///{root / 'mlflow.db'}")
        self.tracker.client.create_experiment(experiment_name("memory"), artifact_location=(root / "a").as_uri())
        self.shipped = {(int(t["T"]), t["model"]): (t, p) for t, p in suite_shipped_settings("memory", "table5")
                        if t["task"] == "copy"}
        self.parent = None

    @property
    def uri(self):
        return self.tracker.tracking_uri

    def invocation(self):
        from recurbench.tracking import standard_tags

        return self.tracker.run("memory-table5", experiment=experiment_name("memory"),
                                tags=standard_tags(suite="memory", profile="table5", role="parent"))

    def attempt(self, T, model, *, evaluations=(), metrics=None, owner=None, **changed):
        """``owner``: owner tags to leave the run RUNNING under (its driver alive, or gone)."""
        from recurbench.tracking import standard_tags

        config, settings = self.shipped[(T, model)]
        tags = standard_tags(suite="memory", profile="table5", seed=0, **config)
        if owner is not None:
            run = self.tracker.open_run(f"copy-T{T}-{model}-s0", experiment=experiment_name("memory"),
                                        parent=self.parent, tags={**tags, **owner})
            run.log_params({**settings, "seed": 0, **changed})
            for update, accuracy in evaluations:
                run.log_metrics({"eval_accuracy": accuracy, "eval_update": float(update)}, step=update)
            return
        try:
            with self.tracker.run(f"copy-T{T}-{model}-s0", experiment=experiment_name("memory"), parent=self.parent,
                                  tags=tags) as run:
                run.log_params({**settings, "seed": 0, **changed})
                for update, accuracy in evaluations:
                    run.log_metrics({"eval_accuracy": accuracy, "eval_update": float(update)}, step=update)
                if metrics is None:
                    raise KeyboardInterrupt
                run.log_metrics(metrics)
        except KeyboardInterrupt:
            pass


def test_table5_layout_shows_how_far_an_unfinished_cell_got(tmp_path):
    """A cell that no run finished shows its unfinished run's last held-out evaluation and its update,
    running or stopped; an earlier attempt of the same configuration that a later one took over is
    neither in the cell nor listed; a cell with a finished run shows that run alone. A run at other
    settings than the profile's (a --set probe) stands in for no cell, and the list says how its
    settings differ."""
    store = Table5Store(tmp_path)
    with store.invocation() as store.parent:
        store.attempt(100, "lstm", metrics={"accuracy": 0.41, "train_accuracy": 0.4, "updates": 200000.0, "solved": 0.0})
        store.attempt(100, "lstm", evaluations=[(500, 0.3)], **{"training.batch_size": 128})  # a stopped probe
        store.attempt(100, "sab", evaluations=[(500, 0.5)], **{"training.learning_rate": 0.001})  # the only SAB run at T = 100
        store.attempt(200, "sab", evaluations=[(500, 0.1), (1000, 0.2)])  # stopped; then continued below
        store.attempt(200, "sab", evaluations=[(500, 0.1), (1000, 0.2), (1500, 0.9613)])
        store.attempt(500, "lstm", evaluations=[(500, 0.125)])
        store.attempt(500, "rellstm")  # stopped before its first evaluation

    comp = compare("memory", tracking_uri=store.uri)
    ((_, table),) = comp.tables
    cells = table.set_index("T")
    assert list(cells.index) == [100, 200, 500]
    assert cells.loc[200, "SAB"] == "0.961 at 1,500\n(stopped)\npaper 1.00"
    assert cells.loc[500, "LSTM"] == "0.125 at 500\n(stopped)\npaper 0.12"
    assert cells.loc[500, "RelLSTM"] == "no evaluation yet\n(stopped)\npaper 1.00"
    assert cells.loc[100, "LSTM"] == "0.410 (n=1)\n200,000 updates\npaper 1.00"
    assert cells.loc[100, "SAB"] == "—\npaper 1.00"
    assert any("a cell that no run finished shows the last held-out evaluation" in n for n in comp.notes)
    listed = comp.unresolved.set_index("name")
    assert sorted(listed.index) == ["copy-T100-lstm-s0", "copy-T100-sab-s0", "copy-T200-sab-s0", "copy-T500-lstm-s0",
                                    "copy-T500-rellstm-s0"]
    assert listed.loc["copy-T200-sab-s0", "last_eval_update"] == 1500
    assert listed.loc["copy-T100-lstm-s0", "settings"] == "training.batch_size 128 (shipped: 10)"
    assert listed.loc["copy-T100-sab-s0", "settings"] == "training.learning_rate 0.001 (shipped: 0.0002)"
    assert (listed.drop(index=["copy-T100-lstm-s0", "copy-T100-sab-s0"])["settings"] == "").all()
    text = render(comp, "markdown").split("runs that did not finish")[1]
    assert "1,500" in text and "0.961" in text  # how far the listed runs got, formatted
    assert "training.batch_size 128 (shipped: 10)" in text


def test_a_run_left_running_by_a_gone_driver_says_so(tmp_path):
    """A RUNNING run whose driver is provably gone (killed outright) reads "driver gone", in its cell and
    in the list, not "running"; a live driver's run reads "running". Reading leaves both RUNNING."""
    from owners import dead_owner
    from recurbench.tracking import owner_tags

    store = Table5Store(tmp_path)
    with store.invocation() as store.parent:
        store.attempt(100, "lstm", evaluations=[(500, 0.25)], owner=dead_owner())
        store.attempt(200, "lstm", evaluations=[(500, 0.125)], owner=owner_tags())

    comp = compare("memory", tracking_uri=store.uri)
    cells = comp.tables[0][1].set_index("T")
    assert cells.loc[100, "LSTM"] == "0.250 at 500\n(driver gone)\npaper 1.00"
    assert cells.loc[200, "LSTM"] == "0.125 at 500\n(running)\npaper 1.00"
    listed = render(comp, "markdown").split("runs that did not finish")[1].splitlines()
    assert any("copy-T100-lstm-s0 | RUNNING (driver gone) |" in line for line in listed)
    assert any("copy-T200-lstm-s0 | RUNNING |" in line for line in listed)
    assert {r.status for r in store.tracker.stored_runs(experiment_name("memory"), {}, "RUNNING")} == {"RUNNING"}
    assert len(store.tracker.stored_runs(experiment_name("memory"), {}, "RUNNING")) == 2


def test_a_store_where_no_run_has_finished_yet_shows_how_far_each_got(tmp_path):
    """The first long runs of a store, interrupted before any finished: compare and report show Table 5's
    layout with how far each got and list the runs (the guide: "so the table can be watched while long
    runs train"), rather than refusing the store for its want of a finished run. No aggregate table (there
    is nothing to aggregate), and a note says why."""
    from recurbench.cli import app

    store = Table5Store(tmp_path)
    with store.invocation() as store.parent:
        store.attempt(100, "lstm", evaluations=[(500, 0.3), (1000, 0.4567)])
        store.attempt(200, "rellstm")  # stopped before its first evaluation
        store.attempt(500, "lstm", evaluations=[(500, 0.2)], **{"training.batch_size": 128})  # a probe: no cell

    comp = compare("memory", tracking_uri=store.uri)
    assert comp.cells.empty
    ((title, table),) = comp.tables
    assert title.endswith("beside Kerg et al.'s Table 5")  # the runs are at the paper's settings: no caveat
    cells = table.set_index("T")
    assert list(cells.index) == [100, 200]
    assert cells.loc[100, "LSTM"] == "0.457 at 1,000\n(stopped)\npaper 1.00"
    assert cells.loc[200, "RelLSTM"] == "no evaluation yet\n(stopped)\npaper 1.00"
    assert sorted(comp.unresolved["name"]) == ["copy-T100-lstm-s0", "copy-T200-rellstm-s0", "copy-T500-lstm-s0"]
    assert ("no run of profile 'table5' has finished yet, so there is nothing to aggregate over seeds; the runs that "
            "did not finish are listed") in comp.notes
    text = render(comp, "markdown")
    assert [line for line in text.splitlines() if line.startswith("### ")] == [
        "### copy: held-out accuracy per model and T, with the updates behind it, beside Kerg et al.'s Table 5",
        "### runs that did not finish (not in the aggregates)"]
    result = CliRunner().invoke(app, ["compare", "memory", "--tracking-uri", store.uri, "--format", "markdown"])
    assert result.exit_code == 0, result.output
    assert result.stdout == text
    report = write_report("memory", tmp_path / "report", tracking_uri=store.uri, fmt="markdown", log_to_mlflow=False)
    assert "| 100 | 0.457 at 1,000<br>(stopped)<br>paper 1.00 |" in report.path.read_text()
    assert "loss curves: no finished run logged loss" in report.omitted


def test_grouping_that_pools_settings_says_so_and_counts_read_as_counts(store):
    """--by task,model puts RelLSTM's two kappa-sweep points (rho 1 and 3) into one cell: a note names the
    pooled column and its values, so that the cell's std is not read as a spread over seeds. The updates
    run are a count: whole numbers, with a std only where the runs differ."""
    uri, metrics = store
    comp = compare("memory", tracking_uri=uri, by=["task", "model"])
    assert ("--by task,model pools runs at different settings into one cell, so its mean, std and n are over those "
            "settings, not over seeds alone: rho 1, 3 (in 1 cell(s): copy/rellstm); add the key(s) to --by to keep "
            "them apart") in comp.notes
    assert cell_values(comp, "accuracy").loc[("copy", "rellstm")]["n"] == 4
    # One configuration per cell: no note.
    assert not any("pools" in note for note in compare("memory", tracking_uri=uri, by=["task", "model", "rho"]).notes)
    text = render(comp, "markdown")
    for model in ("lstm", "rnn", "rellstm"):
        updates = [int(m["updates"]) for (_, core, _, _), m in metrics.items() if core == model]
        mean, spread = statistics.mean(updates), statistics.stdev(updates)
        shown = f"{mean:,.0f} (n={len(updates)})" if spread == 0 else f"{mean:,.0f} ± {spread:,.0f} (n={len(updates)})"
        row = next(line for line in text.splitlines() if line.startswith(f"| copy | {model} |"))
        assert row.split(" | ")[4] == shown, row


def test_a_count_prints_as_a_whole_number():
    from recurbench.reporting.render import format_cell

    def cell(mean, std, n):
        return format_cell(pd.Series({"mean": mean, "std": std, "n": n}, dtype=object), reference=False, sep="", integer=True)

    assert cell(50.0, 0.0, 4) == "50 (n=4)"
    assert cell(200000.0, math.nan, 1) == "200,000 (n=1)"
    assert cell(12500.0, 3535.53, 2) == "12,500 ± 3,536 (n=2)"
    assert cell(math.nan, math.nan, 0) == "—"
    assert format_cell(pd.Series({"mean": 50.0, "std": 0.0, "n": 4}, dtype=object), reference=False, sep="") == "50.000 ± 0.000 (n=4)"


def test_a_run_is_read_at_the_defaults_of_its_own_configuration(store, tmp_path):
    # An RNN's run logs no network.gate_init (its core has no gates): read at the suite's defaults, it
    # gains none (grouped by the param, it is left out, as a baseline by an RSA param), while an LSTM
    # run from before gate_init (the param gone) reads it at pytorch.
    import shutil
    import sqlite3

    uri, _ = store
    copy = tmp_path / "mlflow.db"
    shutil.copy(uri.removeprefix("sqlite:///"), copy)
    with sqlite3.connect(copy) as db:
        (older,) = db.execute("SELECT t.run_uuid FROM tags t JOIN params p ON p.run_uuid = t.run_uuid "
                              "WHERE t.key = 'model' AND t.value = 'lstm' AND p.key = 'seed' AND p.value = '0'").fetchone()
        db.execute("DELETE FROM params WHERE run_uuid = ? AND key = 'network.gate_init'", (older,))
    comp = compare("memory", tracking_uri=f"sqlite:///{copy}", by=["task", "T", "model", "network.gate_init"])
    cells = comp.cells[comp.cells["metric"] == "accuracy"]
    shown = {(m, g): n for m, g, n in cells[["model", "network.gate_init", "n"]].values.tolist()}
    assert shown[("lstm", "pytorch")] == 2 and shown[("rellstm", "pytorch")] == 4
    assert shown.keys() == {("lstm", "pytorch"), ("rellstm", "pytorch")}
    assert any("2 finished run(s) without the tag(s)" in note for note in comp.notes), comp.notes
    assert not any("settings differ" in note for note in comp.notes), comp.notes


def test_the_loss_figures_update_ticks_stay_apart_at_the_papers_budget():
    """200,000 updates on a panel a third of the figure wide: labels such as 150000 and 200000 ran
    into one another ("100000150000200000"); they read 100k, 200k now and no two overlap."""
    import numpy as np
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from recurbench.reporting.memory import loss_figure

    steps = np.arange(0, 200_001, 500)
    curves = pd.DataFrame([{"task": "copy", "T": T, "label": label, "seed": 0, "step": int(step),
                            "value": 1.0 / (1 + step / 1000)}
                           for T in (100, 200, 500) for label in ("lstm", "rellstm (ν=10, ρ=10)") for step in steps])
    fig = loss_figure(curves, {("copy", 100): 0.2})
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:3]:
        low, high = ax.get_xlim()
        labels = [t for t in ax.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high]
        texts = [t.get_text() for t in labels]
        assert "100k" in texts and "200k" in texts and all(len(t) <= 4 for t in texts), texts
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        assert all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:], strict=False)), texts


def test_a_layout_of_lengths_the_paper_never_ran_has_no_paper_lines(tmp_path):
    # A quick profile's T = 10: every cell read "paper —" under a title "beside Kerg et al.'s Table 5",
    # while a note said "the paper gives no figures for these configurations: ours only".
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = tmp_path / "memory.yaml"
    profile = {**TINY, "lengths": [10], "models": ["lstm"], "seeds": 1, "kappa_sweeps": [],
               "training": {**TINY["training"], "updates": 2}}
    config.write_text(yaml.safe_dump({"suite": "memory", "profiles": {"tiny": profile}}))
    torch.set_num_threads(1)
    tracker = MlflowTracker(uri)
    tracker.client.create_experiment(experiment_name("memory"), artifact_location=(tmp_path / "artifacts").as_uri())
    assert not runner.run_suite("memory", "tiny", tracker, config_path=config).failed
    comp = compare("memory", tracking_uri=uri)
    ((title, table),) = comp.tables
    assert title.endswith("in Table 5's layout") and list(table.columns) == ["T", "LSTM"]
    assert "paper" not in table.iloc[0]["LSTM"]
    assert "the paper gives no figures for these configurations: ours only" in comp.notes


def test_memlstm_is_named_as_the_paper_writes_it():
    from recurbench.reporting.memory import table5_layout

    frame = pd.DataFrame([{"T": 100, "model": "memlstm", "nu": "30", "rho": "0", "accuracy": 0.5, "updates": 10.0,
                           "solved_at": math.nan}])
    table, _, _ = table5_layout(frame, with_paper=False)
    assert list(table.columns) == ["T", "MemLSTM"]  # it read `memlstm` beside MemRNN and RelLSTM


def test_the_loss_figures_baseline_is_told_apart_from_every_cores_line():
    """The blanks-and-guessing line was grey dotted, as SAB's line is dotted: in a panel with SAB the
    legend showed two dotted samples. It now has a line style that no core has."""
    import numpy as np
    import pandas as pd

    from recurbench.reporting.memory import CORE_STYLES, loss_figure

    steps = np.arange(0, 2_001, 500)
    curves = pd.DataFrame([{"task": "copy", "T": 100, "label": core, "seed": 0, "step": int(step), "value": 1.0 / (1 + step)}
                           for core in CORE_STYLES for step in steps])
    fig = loss_figure(curves, {("copy", 100): 0.2})
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    baseline = lines.pop("blanks + guessing")
    assert set(lines) == set(CORE_STYLES)
    assert baseline.get_linestyle() not in {line.get_linestyle() for line in lines.values()}
