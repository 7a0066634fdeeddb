"""The ltsf suite: settings tables, validation before training, a tiny end-to-end run, the summary."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

from recurbench.data.protocol import WindowSpec, prepare
from recurbench.errors import ConfigError
from recurbench.suites.base import suite_file
from recurbench.suites.ltsf import LTSFSuite, paper_reference
from recurbench.suites.registry import load_profile
from recurbench.suites.runner import run_suite
from recurbench.tracking import MemoryTracker


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def custom_suite(tmp_path: Path, **changes) -> Path:
    """The shipped suite with a tiny `quick` profile of Informer and RSA-Informer (changes applied on top)."""
    raw = yaml.safe_load(suite_file("ltsf").read_text())
    quick = raw["profiles"]["quick"]
    quick["models"] = ["informer", "rsa_informer"]
    quick["model"] = {**quick["model"], "d_model": 16, "d_ff": 16}
    quick["training"] = {**quick["training"], "epochs": 2, "max_train_batches": 2, "max_val_batches": 1}
    for key, value in changes.items():
        quick[key] = value
    path = tmp_path / "ltsf.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_paper_profile_matches_informer_scripts_and_table5():
    _, paper = load_profile("ltsf", "paper")
    assert len(paper.datasets) * 4 * len(paper.models) == 96 and paper.seeds == 5
    assert paper.windows["ETTh1"][24].model_dump() == {
        "seq_len": 48, "label_len": 48, "e_layers": 2, "d_layers": 1, "factor": 3
    }
    assert paper.windows["WTH"][336].seq_len == 720 and paper.windows["ETTh2"][168].e_layers == 3
    assert paper.model.distil is False and paper.model.d_model == 512
    heads = paper.rem_heads["ETTh1"][24]["rsa_informer"]
    assert heads.k == [0, 2, 2, 0, 2, 2] and heads.dilations == [24, 24, 24, 24]
    # The malformed rows, as interpreted in ltsf.yaml.
    assert paper.rem_heads["ETTm1"][24]["rsa_informer"].k == [0, 0, 0, 4, 2, 2]
    assert paper.rem_heads["WTH"][168]["rsa_xl"].dilations == [48, 24, 24]
    # Every RSA model x setting of the table has a head layout.
    for dataset, horizons in paper.horizons.items():
        for h in horizons:
            assert set(paper.rem_heads[dataset][h]) == {"rsa_informer", "rsa_logsparse", "rsa_xl"}


def test_paper_plan_validates_every_setting(data_dir):
    suite, paper = load_profile("ltsf", "paper")
    plans = suite.plan(paper, {"seeds": 1}, data_dir=str(data_dir))
    assert len(plans) == 96
    one = next(p for p in plans if p.name == "rsa_xl-ETTh1-336-s0")
    assert one.tags == {"model": "rsa_xl", "dataset": "ETTh1", "horizon": "336"}
    assert one.payload.network.rsa.dilations == (48, 24, 24)
    later = suite.plan(paper, {"datasets": ["ETTh1"], "horizons": ["24"], "models": ["informer"], "seeds": 2,
                               "first_seed": 3}, data_dir=str(data_dir))
    assert [(p.name, p.seed) for p in later] == [("informer-ETTh1-24-s3", 3), ("informer-ETTh1-24-s4", 4)]


def test_rsa_learning_rate_factors_reach_the_rsa_models_only(data_dir):
    suite, paper = load_profile("ltsf", "paper")
    pick = {"datasets": ["ETTh1"], "horizons": ["24"], "seeds": 1}
    rates = {p.tags["model"]: (p.payload.training.rsa_lr_factor, p.params["training"]["rsa_lr_factor"])
             for p in suite.plan(paper, pick, data_dir=str(data_dir))}
    # The shipped factor of each RSA model; the baselines keep TrainConfig's 1 (it has nothing to scale),
    # so their logged settings match their runs from before the factor changed.
    assert rates == {"informer": (1.0, 1.0), "logsparse": (1.0, 1.0), "xl": (1.0, 1.0),
                     "rsa_informer": (1000.0, 1000.0), "rsa_logsparse": (1.0, 1.0), "rsa_xl": (1.0, 1.0)}
    suite, one = load_profile("ltsf", "paper", overrides=["training.rsa_lr_factor=1000"])
    rates = {p.tags["model"]: p.payload.training.rsa_lr_factor for p in suite.plan(one, pick, data_dir=str(data_dir))}
    assert rates == {"informer": 1.0, "logsparse": 1.0, "xl": 1.0,
                     "rsa_informer": 1000.0, "rsa_logsparse": 1000.0, "rsa_xl": 1000.0}
    suite, mixed = load_profile("ltsf", "paper", overrides=["training.rsa_lr_factor={rsa_informer: 1000, rsa_xl: 3}"])
    rates = {p.tags["model"]: p.payload.training.rsa_lr_factor for p in suite.plan(mixed, pick, data_dir=str(data_dir))}
    assert rates == {"informer": 1.0, "logsparse": 1.0, "xl": 1.0,
                     "rsa_informer": 1000.0, "rsa_logsparse": 1.0, "rsa_xl": 3.0}  # left out: 1


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("training.rsa_lr_factor={informer: 3}",
         r"^--set training\.rsa_lr_factor=\{informer: 3\}: 'informer' has no RSA parameters; per-model factors are for "
         r"rsa_informer, rsa_logsparse, rsa_xl"),
        ("training.rsa_lr_factor={rsa_informr: 3}",
         r"^--set training\.rsa_lr_factor=\{rsa_informr: 3\}: rsa_informr: unknown model 'rsa_informr'; known: informer, "
         r"rsa_informer"),
        ("training.rsa_lr_factor={rsa_xl: 0}",
         r"^--set training\.rsa_lr_factor=\{rsa_xl: 0\}: rsa_xl: Input should be greater than 0"),
        ("training.rsa_lr_factor=-1", r"^--set training\.rsa_lr_factor=-1: Input should be greater than 0 \(got -1\)$"),
    ],
)
def test_bad_per_model_rsa_factors_are_refused_with_their_key(setting, message):
    with pytest.raises(ConfigError, match=message):
        load_profile("ltsf", "paper", overrides=[setting])


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        ({"models": ["informer", "transformer"]}, "unknown model 'transformer'"),
        ({"datasets": ["ETTh3"]}, "unknown dataset 'ETTh3'"),
        ({"horizons": ["720"]}, "no settings for horizon 720 of ETTh1"),
        ({"horizons": ["soon"]}, "not an integer"),
    ],
)
def test_bad_selection_fails_before_training(selection, message, data_dir):
    tracker = MemoryTracker()
    with pytest.raises(ConfigError, match=message):
        run_suite("ltsf", "quick", tracker, selection=selection, data_dir=str(data_dir))
    assert tracker.runs == []  # nothing started


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # Both named no key: "label_len (100) cannot exceed seq_len (48)", "ETTh1 horizon 24 informer: attention ...".
        (["windows.ETTh1.24.label_len=100"],
         r"^--set windows\.ETTh1\.24\.label_len=100: label_len \(100\) cannot exceed seq_len \(48\) \(ETTh1 horizon 24\)$"),
        (["model.attention=foo"],
         r"^--set model\.attention=foo: attention must be 'prob' or 'full', got 'foo' \(ETTh1 horizon 24 informer\)$"),
    ],
)
def test_a_bad_network_or_window_setting_names_the_key_that_gave_it(overrides, message, data_dir):
    tracker = MemoryTracker()
    with pytest.raises(ConfigError, match=message):
        run_suite("ltsf", "quick", tracker, selection={"datasets": ["ETTh1"], "horizons": ["24"]},
                  overrides=overrides, data_dir=str(data_dir))
    assert tracker.runs == []


def test_a_bad_window_in_a_suite_file_names_the_file_and_key(tmp_path, data_dir):
    from recurbench.config import read_yaml
    from recurbench.suites.registry import SUITES

    raw = read_yaml(SUITES["ltsf"]().suite_path())
    raw["profiles"]["quick"]["windows"]["ETTh1"][24]["label_len"] = 100
    path = tmp_path / "ltsf.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=rf"^{path}: profiles\.quick\.windows\.ETTh1\.24\.label_len: label_len "
                                          r"\(100\) cannot exceed seq_len \(48\)"):
        run_suite("ltsf", "quick", MemoryTracker(), config_path=path,
                  selection={"datasets": ["ETTh1"], "horizons": ["24"]}, data_dir=str(data_dir))


def test_a_device_this_machine_lacks_fails_before_training(data_dir):
    tracker = MemoryTracker()
    with pytest.raises(ConfigError) as info:
        run_suite("ltsf", "quick", tracker, data_dir=str(data_dir), device="gpu")
    assert str(info.value) == "--device: unknown device 'gpu'; expected auto, cpu, cuda, cuda:N or mps"
    assert tracker.runs == []


def test_horizon_longer_than_the_test_split(tmp_path, data_dir):
    windows = {"ETTh1": {3000: {"seq_len": 48, "label_len": 48, "e_layers": 1, "d_layers": 1}}}
    path = custom_suite(tmp_path, windows=windows, horizons={"ETTh1": [3000]}, models=["informer"])
    with pytest.raises(ConfigError, match=r"ETTh1 \(horizon 3000\): .*split has 2928 rows.*too few for seq_len 48 \+ pred_len 3000"):
        run_suite("ltsf", "quick", MemoryTracker(), config_path=path, data_dir=str(data_dir))


@pytest.mark.parametrize(
    ("heads", "message"),
    [
        ({"k": [0, 0, 0, 4, 4], "dilations": [2, 3, 6, 24, 2, 3, 6, 24]}, "six non-negative head counts"),
        ({"k": [4, 0, 0, 4, 0, 0], "dilations": [24, 24]}, "need 4 dilation factors"),
        ({"k": [4, 0, 0, 0, 0, 0], "dilations": []}, "sum to 4, but the model has 8 heads"),
        ({"k": [4, 3, 1, 0, 0, 0], "dilations": []}, "pairs"),
    ],
)
def test_invalid_rem_heads_fail_before_training(tmp_path, heads, message, data_dir):
    path = custom_suite(tmp_path, rem_heads={"ETTh1": {24: {"rsa_informer": heads}}})
    tracker = MemoryTracker()
    with pytest.raises(ConfigError, match=message):
        run_suite("ltsf", "quick", tracker, config_path=path, data_dir=str(data_dir))
    assert tracker.runs == []


@pytest.mark.parametrize(
    ("heads", "key", "message"),
    [
        ({"k": [4, 0, 0, 0, 0, 0]}, "k", "the head counts [4, 0, 0, 0, 0, 0] sum to 4, but the model has 8 heads"),
        ({"k": [4, 0, 0, 4, 0, 0], "dilations": [24, 24]}, "dilations",
         "4 dilated heads (k4+k5+k6) need 4 dilation factors, got 2: [24, 24]"),
        ({"k": [4, 3, 1, 0, 0, 0]}, "k",
         "cyclical REM heads come in pairs: k2=3 != k3=1; give k2 (cos) and k3 (sin) the same count, one sin head "
         "per cos head"),
    ],
)
def test_a_bad_rem_layout_names_the_file_and_its_key_path(tmp_path, heads, key, message):
    # The layout errors used to name the cell a plan reached ("ETTh1 horizon 24 rsa_informer: rsa.k: ..."),
    # not the file, and the unpaired one suggested allow_unpaired, a key REMHeads refuses.
    path = custom_suite(tmp_path, rem_heads={"ETTh1": {24: {"rsa_informer": heads}}})
    with pytest.raises(ConfigError) as info:
        load_profile("ltsf", "quick", path)
    assert str(info.value) == f"{path}: profiles.quick.rem_heads.ETTh1.24.rsa_informer.{key}: {message}"


def test_the_suggested_fix_for_unpaired_heads_loads(tmp_path):
    path = custom_suite(tmp_path, rem_heads={"ETTh1": {24: {"rsa_informer": {"k": [4, 2, 2, 0, 0, 0]}}}})
    _, profile = load_profile("ltsf", "quick", path)
    assert profile.rem_heads["ETTh1"][24]["rsa_informer"].k == [4, 2, 2, 0, 0, 0]


def test_a_bad_rem_layout_set_on_the_command_line_names_the_shipped_file():
    setting = "rem_heads.WTH.336.rsa_xl.k=[8,0,0,0,0,0]"  # WTH-336's RSA-XL has 4 dilations for 4 dilated heads
    with pytest.raises(ConfigError) as info:
        load_profile("ltsf", "paper", overrides=[setting])
    assert str(info.value) == (
        f"{suite_file('ltsf')}: profiles.paper.rem_heads.WTH.336.rsa_xl.dilations: 0 dilated heads (k4+k5+k6) "
        f"need 0 dilation factors, got 4: [48, 24, 48, 24] (with --set {setting})"
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("training.epochs=0", r"Input should be greater than 0 \(got 0\)"),
        ("training.patience=-1", r"Input should be greater than 0 \(got -1\)"),
        ("training.learning_rate=-1e-4", r"Input should be greater than 0 \(got -0\.0001\)"),
        ("training.learning_rate=.nan", r"Input should be a finite number \(got nan\)"),
        ("training.lr_decay=1.5", r"Input should be less than or equal to 1 \(got 1\.5\)"),
        ("training.max_train_batches=0", r"Input should be greater than 0 \(got 0\)"),
        ("model.dropout=1", r"Input should be less than 1 \(got 1\)"),
        ("model.d_model=0", r"Input should be greater than 0 \(got 0\)"),
        ("model.local_window=-2", r"Input should be greater than or equal to 0 \(got -2\)"),
        ("model.prob_rows=top", r"Input should be 'all' or 'active' \(got 'top'\)"),
        ("training.lr_hold_epochs=0", r"Input should be greater than 0 \(got 0\)"),
        ("training.val_checks_per_epoch=0", r"Input should be greater than 0 \(got 0\)"),
        ("seeds=0", r"Input should be greater than 0 \(got 0\)"),
        ("windows.ETTh1.24.seq_len=0", r"Input should be greater than or equal to 1 \(got 0\)"),
        # A key inside a list the --set gave: the item, then the key within it.
        ("rem_heads.ETTh1.24.rsa_informer.dilations=[0]",
         r"rem_heads\.ETTh1\.24\.rsa_informer\.dilations\.0: Input should be greater than 0 \(got 0\)"),
    ],
)
def test_out_of_range_settings_are_refused_with_their_key(setting, message):
    # Named as the --set that gave the value, as typed (it named the shipped file, the --set items after).
    with pytest.raises(ConfigError) as info:
        load_profile("ltsf", "quick", overrides=[setting])
    assert re.fullmatch(rf"--set {re.escape(setting)}: {message}", str(info.value)), str(info.value)


def test_unknown_model_in_the_file_is_reported_with_its_path(tmp_path):
    path = custom_suite(tmp_path, models=["informer", "rsa_informr"])
    with pytest.raises(ConfigError, match=r"profiles\.quick\.models\.1: .*unknown model 'rsa_informr'"):
        load_profile("ltsf", "quick", path)


def test_tiny_run_logs_what_the_issue_asks(tmp_path, data_dir):
    path = custom_suite(tmp_path)
    tracker = MemoryTracker()
    result = run_suite("ltsf", "quick", tracker, config_path=path, data_dir=str(data_dir), device="cpu")
    assert not result.failed and len(result.outcomes) == 2
    # The headline metrics, which a run reused by --skip-finished must have, are what execute returns.
    assert all(set(o.metrics) == set(LTSFSuite.headline_metrics) for o in result.outcomes)
    runs = {r.tags["model"]: r for r in tracker.runs if r.parent_id is not None}
    assert {r.tags["device"] for r in tracker.runs} == {"cpu"}  # parent and nested runs: where they trained
    for run in runs.values():
        assert run.tags["dataset"] == "ETTh1" and run.tags["horizon"] == "24" and run.tags["seed"] == "0"
        assert [step for step, _ in run.metrics["train_loss"]] == [1, 2]
        assert [step for step, _ in run.metrics["val_loss"]] == [1, 2]
        assert run.last("test_mse") > 0 and run.last("test_mae") > 0 and run.last("n_params") > 0
        assert run.params["network.d_model"] == 16 and run.params["test_windows"] == 2857
        assert run.tags["data_path"] == str(data_dir / "ETTh1.csv") and run.tags["data_registry"] == "match"
    rsa = runs["rsa_informer"]
    gates = [k for k in rsa.metrics if k.startswith("gate.")]
    assert sorted(gates) == ["gate.decoder.0.cross", "gate.decoder.0.self", "gate.encoder.0.self", "gate.encoder.1.self"]
    assert "rem_parameters.json" in rsa.artifacts
    assert not any(k.startswith("gate.") for k in runs["informer"].metrics)
    # A forecast example for `recurbench report`: the middle test window, the same for every model.
    seq_len = runs["informer"].params["network.seq_len"]
    test_set = prepare("ETTh1", WindowSpec(seq_len, runs["informer"].params["network.label_len"], 24),
                       str(data_dir)).test.dataset()
    x, y, _, _ = test_set[len(test_set) // 2]
    for run in runs.values():
        example = json.loads(run.artifacts["forecasts/example_0.json"])
        assert example["window"] == len(test_set) // 2 and example["columns"][-1] == "OT"
        assert example["history"] == x.tolist() and example["truth"] == y[-24:].tolist()
        prediction = torch.tensor(example["prediction"])
        assert prediction.shape == (24, 7) and bool(prediction.isfinite().all())

    header, rows = LTSFSuite().summary_rows(result.outcomes)
    assert header[:8] == ["dataset", "horizon", "model", "seeds", "MSE", "MAE", "paper MSE", "paper MAE"]
    by_model = {row[2]: row for row in rows}
    assert by_model["rsa_informer"][6] == "0.414 ± 0.014" and by_model["informer"][7] == "0.632 ± 0.076"
    assert by_model["informer"][4] == f"{runs['informer'].last('test_mse'):.3f}"  # one seed: no ± shown
    # Each RSA row against its baseline of the same invocation. A tiny network is not the paper's
    # setting: the paper's own change (-45.7 %) is left out, and a closing row says why.
    change = 100 * (runs["rsa_informer"].last("test_mse") / runs["informer"].last("test_mse") - 1)
    assert header[9] == "MSE vs baseline"
    assert by_model["rsa_informer"][9] == f"{change:+.1f} %" and by_model["informer"][9] == "-"
    assert " ".join(rows[-1][0].split()).startswith("paper MSE/MAE: not comparable with the paper's figures: ")


def test_checks_within_epochs_are_logged_at_their_training_batch(tmp_path, data_dir):
    path = custom_suite(tmp_path, models=["informer"])
    tracker = MemoryTracker()
    overrides = ["training.max_train_batches=4", "training.val_checks_per_epoch=2"]
    result = run_suite("ltsf", "quick", tracker, config_path=path, data_dir=str(data_dir), overrides=overrides)
    assert not result.failed
    (run,) = [r for r in tracker.runs if r.parent_id is not None]
    assert run.params["training.val_checks_per_epoch"] == 2
    checks = run.metrics["val_loss_check"]
    assert [step for step, _ in checks] == [2, 4, 6, 8]  # after 2 and 4 of each epoch's 4 batches
    assert [v for _, v in run.metrics["progress"]] == [0.5, 1.0, 1.5, 2.0]
    # The epoch's val_loss is its last check, and the kept weights are those of the best check.
    assert [v for _, v in run.metrics["val_loss"]] == [checks[1][1], checks[3][1]]
    best = min(range(4), key=lambda i: checks[i][1])
    assert run.last("best_epoch") == [0.5, 1.0, 1.5, 2.0][best]


def test_summary_mean_and_std_over_seeds():
    from recurbench.suites.ltsf import _mean_std

    assert _mean_std([1.0, 2.0, 3.0]) == "2.000 ± 1.000"
    assert _mean_std([]) == "-"
    assert _mean_std([0.4954]) == "0.495"
    assert paper_reference()[("WTH", 336, "RSA-XL")]["mse_mean"] == 0.816


def test_skip_finished_resumes_a_suite_from_its_mlflow_store(tmp_path, data_dir):
    # Params come back from MLflow as text; the plan's must match them for a finished run to be reused.
    from typer.testing import CliRunner

    from recurbench.cli import app
    from recurbench.tracking import MlflowTracker

    path = custom_suite(tmp_path, models=["informer"])
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    args = ["run", "ltsf", "--config", str(path), "--data-dir", str(data_dir), "--tracking-uri", uri]
    # A dry run lists the runs and creates no store.
    dry = CliRunner().invoke(app, [*args, "--seeds", "2", "--skip-finished", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "2 run(s) to run, 0 already finished; nothing was trained or written" in " ".join(dry.output.split())
    assert not (tmp_path / "store.db").exists()
    first = CliRunner().invoke(app, [*args, "--seeds", "1"])
    assert first.exit_code == 0, first.output
    (stored,) = MlflowTracker(uri).stored_runs("recurbench-ltsf", {"seed": "0"})
    assert stored.name == "informer-ETTh1-24-s0"
    dry = CliRunner().invoke(app, [*args, "--seeds", "2", "--skip-finished", "--dry-run"])
    said = " ".join(dry.output.split())
    assert f"finished: run {stored.run_id}" in said and "1 run(s) to run, 1 already finished" in said
    assert "typical time of the 1 run(s) to run that have one:" in said  # seed 1, from seed 0's wall time
    client = MlflowTracker(uri).client
    experiment = client.get_experiment_by_name("recurbench-ltsf").experiment_id
    assert len(client.search_runs([experiment])) == 2  # still the first run and its parent
    result = CliRunner().invoke(app, [*args, "--seeds", "2", "--skip-finished"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # the console wraps long lines
    assert "1 of 2 run(s) were already finished at these settings and were not run again (--skip-finished)" in said
    assert f"informer-ETTh1-24-s0 ({stored.run_id})" in said
    runs = MlflowTracker(uri).stored_runs("recurbench-ltsf", {})
    assert sorted(r.name for r in runs) == ["informer-ETTh1-24-s0", "informer-ETTh1-24-s1"]
    # The table's mean is over both seeds: the stored one and the one just run.
    mean = (runs[0].metrics["test_mse"] + runs[1].metrics["test_mse"]) / 2
    # (a one-row table prints transposed at the test runner's 80 columns: a row per column)
    assert re.search(r"│ seeds +│ 2/2 +│", result.output) and re.search(rf"│ MSE +│ {mean:.3f} ± ", result.output)
    # A --set changes the settings: nothing is reused.
    result = CliRunner().invoke(app, [*args, "--seeds", "1", "--skip-finished", "--set", "training.learning_rate=2e-4"])
    assert result.exit_code == 0, result.output
    assert "already finished" not in result.output
    assert len(MlflowTracker(uri).stored_runs("recurbench-ltsf", {})) == 3


def test_a_run_on_another_data_file_is_another_run(data_dir, tmp_path):
    """``--skip-finished`` took a run trained on an altered copy of ETTh1 for a run on the official file
    (its closing table showed the altered data's MSE): the file read is now part of the run's settings,
    ``data_file``. A run on the registered file keeps the key runs had before the param came."""
    import hashlib

    from recurbench.suites.runner import plan_key

    original = (data_dir / "ETTh1.csv").read_bytes()
    lines = original.decode().splitlines(keepends=True)
    lines[5] = lines[5].rsplit(",", 1)[0] + ",99.0\n"  # one value changed
    altered = "".join(lines).encode()
    (tmp_path / "ETTh1.csv").write_bytes(altered)
    suite, quick = load_profile("ltsf", "quick")
    pick = {"models": ["informer"]}
    (official,) = suite.plan(quick, pick, data_dir=str(data_dir))
    (other,) = suite.plan(quick, pick, data_dir=str(tmp_path))
    assert official.params["data_file"] == "registry"
    assert other.params["data_file"] == f"sha256:{hashlib.sha256(altered).hexdigest()}"
    assert plan_key("ltsf", "quick", official) != plan_key("ltsf", "quick", other)
    before = {k: v for k, v in official.params.items() if k != "data_file"}  # what a run logged before
    assert plan_key("ltsf", "quick", official) == plan_key("ltsf", "quick", replace(official, params=before))
