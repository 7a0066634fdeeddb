"""`recurbench tune` logs its studies into the suite's experiment (a parent run per study, a nested run
per trial): compare and report leave them out, and say so, rather than read a study as a configuration
whose tags were not logged or a trial as a seed."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from recurbench.errors import RecurbenchError
from recurbench.reporting.by_suite import compare, write_report
from recurbench.suites.registry import load_profile
from recurbench.tracking import MlflowTracker, experiment_name, standard_tags
from recurbench.tuning.study import Objective, StudySpec, run_study

CELL = {"dataset": "ETTh1", "horizon": "24", "model": "rsa_informer"}


@dataclass
class ValidationLoss(Objective):
    """A trial as tune's LTSF objective logs one: a proposed setting, a validation loss."""

    suite = "ltsf"

    def __call__(self, trial, run):
        x = trial.suggest_int("cyclical_pairs", 0, 3)
        run.log_metrics({"val_loss": 1.0 + x})
        return 1.0 + x


@pytest.fixture
def tuned_store(tmp_path):
    """A store that holds one study of two trials and nothing else."""
    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker.client.create_experiment(experiment_name("ltsf"), artifact_location=(tmp_path / "artifacts").as_uri())
    spec = StudySpec("heads24", 2, storage=f"sqlite:///{tmp_path / 'optuna.db'}",
                     tags={"suite": "ltsf", "profile": "quick", **CELL})
    run_study(spec, ValidationLoss(), tracker)
    return tracker


def test_a_store_with_only_tune_runs_says_so_and_where_to_look(tuned_store, tmp_path):
    uri = tuned_store.tracking_uri
    message = (f"experiment 'recurbench-ltsf' in {uri} holds no runs of `recurbench run ltsf`, only the runs of "
               "`recurbench tune` (study heads24; 2 trial(s)), which compare and report leave out: a study's best "
               "parameters and its trials are in `tune`'s closing table, its Optuna storage and its MLflow parent "
               "run; `tune --best-out FILE` writes them as a profile that `recurbench run ltsf --config FILE "
               "--profile tuned` trains")
    with pytest.raises(RecurbenchError, match=f"^{re.escape(message)}$"):
        compare("ltsf", tracking_uri=uri)
    with pytest.raises(RecurbenchError, match=f"^{re.escape(message)}$"):
        write_report("ltsf", tmp_path / "report", tracking_uri=uri, log_to_mlflow=False)
    assert not (tmp_path / "report").exists()


def test_beside_suite_runs_a_study_is_left_out_with_a_note(tuned_store):
    definition, cfg = load_profile("ltsf", "quick")
    [params] = [p for t, p in definition.shipped_settings(cfg) if all(t[k] == v for k, v in CELL.items())]
    with tuned_store.run("ltsf-quick", experiment=experiment_name("ltsf"),
                         tags=standard_tags(suite="ltsf", profile="quick", role="parent")) as parent:
        with tuned_store.run("rsa_informer-ETTh1-24-s0", experiment=experiment_name("ltsf"), parent=parent,
                             tags=standard_tags(suite="ltsf", profile="quick", seed=0, **CELL)) as run:
            run.log_params({k: "7" if v is None else v for k, v in params.items()})  # None: the data decide
            run.log_metrics({"test_mse": 0.5, "test_mae": 0.4})
    comp = compare("ltsf", tracking_uri=tuned_store.tracking_uri)
    assert comp.notes[0] == ("not shown: the runs of `recurbench tune` (study heads24; 2 trial(s)), which are not "
                             "runs of `recurbench run ltsf`")
    ours = comp.cells.dropna(subset=["mean"])
    assert ours[["model", "metric", "mean", "n"]].values.tolist() == [["rsa_informer", "mse", 0.5, 1],
                                                                      ["rsa_informer", "mae", 0.4, 1]]
    # The study's params (best.*) are no settings of a run, and a trial is no seed: the caveat is the quick
    # profile's alone, and no run is left out for its settings.
    assert comp.paper_caveat == (
        "not comparable with the paper's figures: profile quick, settings other than the paper's: network.d_ff 128 "
        "(paper 2048); network.d_model 64 (paper 512); training.epochs 2 (paper 6); training.max_train_batches 40 "
        "(paper: unset); training.max_val_batches 8 (paper: unset)")
    assert comp.notes[1:] == ["a cell reads: our mean ± std over n runs, the paper's figure, Δ = ours − paper"]
    assert comp.failed.empty
