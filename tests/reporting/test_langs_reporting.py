"""compare/report for the langs suite, read from an MLflow store that a tiny run of the suite wrote:
mean ± std over seeds beside Table 2's cells (last-epoch and best-epoch columns), and the figures."""

from __future__ import annotations

import pytest
import torch
import yaml

from recurbench.reporting.by_suite import compare, write_report
from recurbench.reporting.compare import cell_values
from recurbench.reporting.render import render
from recurbench.suites import registry, runner
from recurbench.suites.langs import LangsSuite
from recurbench.tracking import MlflowTracker, experiment_name

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = {
    "languages": ["d2"],
    "models": ["transformer", "rsa_ii"],
    "seeds": 2,
    "data": {"d2": {"train_size": 120, "test_size": 40, "train_window": [2, 20], "bin1_window": [22, 30]}},
    "model": {"d_model": 10, "n_heads": 5, "n_layers": 2, "d_ff": 10},
    "training": {"epochs": 2, "batch_size": 16},
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("langs-store")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    config = root / "langs.yaml"
    config.write_text(yaml.safe_dump({"suite": "langs", "profiles": {"tiny": {**TINY, "cache_dir": str(root / "cache")}}}))
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as m:
        m.setitem(registry.SUITES, "langs", LangsSuite)
        tracker = MlflowTracker(uri)
        tracker.client.create_experiment(experiment_name("langs"), artifact_location=(root / "artifacts").as_uri())
        result = runner.run_suite("langs", "tiny", tracker, config_path=config)
    assert not result.failed, [o.error for o in result.failed]
    return uri, {(o.plan.tags["model"], o.plan.seed): o.metrics for o in result.outcomes}


def test_compare_shows_mean_std_over_seeds_beside_table2(store):
    uri, metrics = store
    comp = compare("langs", tracking_uri=uri)
    assert list(dict.fromkeys(comp.cells["model"])) == ["transformer", "rsa_ii"]  # Table 2's order
    assert set(comp.cells["metric"]) == {"bin0_last", "bin1_last", "bin0_best", "bin1_best"}
    last = cell_values(comp, "bin1_last").loc[("d2", "rsa_ii")]
    ours = [metrics[("rsa_ii", s)]["bin1_acc"] for s in (0, 1)]
    assert last["n"] == 2 and last["mean"] == pytest.approx(sum(ours) / 2)
    assert last["paper"] == 1.0 and last["diff"] == pytest.approx(last["mean"] - 1.0)
    best = cell_values(comp, "bin0_best").loc[("d2", "transformer")]
    assert best["mean"] == pytest.approx(sum(metrics[("transformer", s)]["bin0_acc_best"] for s in (0, 1)) / 2)
    assert best["paper"] == 0.2  # the paper's bin-0 cell beside both columns
    assert any("each bin's best epoch" in note for note in comp.notes)
    text = render(comp, "markdown")
    assert "bin0_last" in text and "bin1_best" in text and "paper 0.200" in text


def test_report_draws_length_curves_gates_and_rems(store, tmp_path):
    uri, _ = store
    report = write_report("langs", tmp_path, tracking_uri=uri, fmt="markdown", log_to_mlflow=False)
    names = [f.name for f in report.figures]
    assert names == ["langs_accuracy_by_length", "langs_rem_gates", "langs_rem_d2"], report.omitted
    for fig in report.figures:
        assert fig.path.read_bytes().startswith(PNG_MAGIC)
    assert "| d2 | rsa_ii |" in report.path.read_text()
