"""compare/report for the memory suite, read from an MLflow store that a tiny run of the suite wrote:
accuracy over seeds beside Table 5's LSTM / RelLSTM cells, the gradient, kappa and loss figures."""

from __future__ import annotations

import pytest
import torch
import yaml

from recurbench.reporting.by_suite import compare, write_report
from recurbench.reporting.compare import cell_values
from recurbench.reporting.render import render
from recurbench.suites import registry, runner
from recurbench.suites.memory import MemorySuite
from recurbench.tracking import MlflowTracker, experiment_name

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = {
    "tasks": ["copy"],
    "lengths": [100],
    "models": ["lstm", "rellstm"],
    "seeds": 2,
    "task": {"copy_length": 2, "labels": 4},
    "model": {"hidden_size": 8, "attention_size": 4, "nu": 1, "rho": 1},
    "training": {"updates": 6, "batch_size": 4, "learning_rate": 0.01, "log_every": 3, "eval_batches": 1},
    "kappa_sweeps": [{"task": "copy", "T": 100, "nu": 1, "kappas": [2, 4]}],  # kappa 2 is the grid's run
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory-store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    config = root / "memory.yaml"
    config.write_text(yaml.safe_dump({"suite": "memory", "profiles": {"tiny": TINY}}))
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as m:
        m.setitem(registry.SUITES, "memory", MemorySuite)
        tracker = MlflowTracker(uri)
        tracker.client.create_experiment(experiment_name("memory"), artifact_location=(root / "artifacts").as_uri())
        result = runner.run_suite("memory", "tiny", tracker, config_path=config)
        assert not result.failed, [o.error for o in result.failed]
        yield uri, {(o.plan.tags["T"], o.plan.tags["model"], o.plan.tags["rho"], o.plan.seed): o.metrics
                    for o in result.outcomes}


def test_compare_sets_accuracy_beside_table5(store):
    uri, metrics = store
    comp = compare("memory", tracking_uri=uri)
    rows = comp.cells[comp.cells["metric"] == "accuracy"][["T", "model", "nu", "rho"]].values.tolist()
    assert rows == [[100, "lstm", "-", "-"], [100, "rellstm", "1", "1"], [100, "rellstm", "1", "3"]]
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
