"""The CLI end to end: listing, data commands, JSON output and error exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from recurbench.cli import app
from recurbench.errors import DataError, RecurbenchError

runner = CliRunner()


def test_help_lists_every_command():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("list", "run", "tune", "compare", "report", "data", "bench"):
        assert command in result.output


@pytest.mark.parametrize("what", ["suites", "models", "datasets", "envs"])
def test_list_json(what):
    result = runner.invoke(app, ["list", what, "--json"])
    assert result.exit_code == 0, result.output
    items = json.loads(result.output)
    assert items


def test_list_envs_checks_every_pair_is_registered():
    items = json.loads(runner.invoke(app, ["list", "envs", "--json"]).output)
    assert {i["pair"] for i in items} >= {"DoorKey", "Memory", "RedBlueDoors", "GoToObject", "GoToDoor", "Fetch"}
    assert all(i["registered"] for i in items)


def test_data_info_json_counts(data_dir):
    result = runner.invoke(
        app, ["data", "info", "ETTh1", "--seq-len", "96", "--label-len", "48", "--pred-len", "24", "--json", "--data-dir", str(data_dir)]
    )
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["rows"] == 17420 and info["freq"] == "h" and len(info["columns"]) == 7
    assert (info["train_rows"], info["val_rows"], info["test_rows"]) == (8640, 2976, 2976)
    assert (info["train_windows"], info["val_windows"], info["test_windows"]) == (8521, 2857, 2857)


def test_data_verify_passes_on_the_shared_data(data_dir):
    result = runner.invoke(app, ["data", "verify", "--json", "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert {r["status"] for r in json.loads(result.output)} == {"ok"}


def test_data_info_bad_csv_raises_a_data_error(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("when,x\n2020-01-01,1\n")
    result = runner.invoke(app, ["data", "info", str(path)])
    assert isinstance(result.exception, DataError)
    assert "no 'date' column" in str(result.exception)


def test_console_script_prints_one_clear_error_and_exits_1(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("date,x\n2020-01-01 00:00,1\n2020-01-01 01:00,oops\n")
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-c", "from recurbench.cli import main; main()", "data", "info", str(path)],
        capture_output=True, text=True, env=env, check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "line 3 (data row 2), column 'x': non-numeric value 'oops'" in " ".join(proc.stderr.split())


def test_bench_rsa_rejects_an_unknown_rem_path():
    result = runner.invoke(app, ["bench", "rsa", "--impl", "fast"])
    assert isinstance(result.exception, RecurbenchError)
    assert "--impl must be one of naive, chunked, triton, got 'fast'" in str(result.exception)


def test_bench_rsa_rejects_an_unknown_baseline_attention():
    result = runner.invoke(app, ["bench", "rsa", "--attention", "sparse"])
    assert isinstance(result.exception, RecurbenchError)
    assert "--attention must be one of full, prob, got 'sparse'" in str(result.exception)


def test_bench_rsa_names_the_head_layout_flags_when_the_layout_does_not_fit_the_heads():
    result = runner.invoke(app, ["bench", "rsa", "--heads", "3"])
    assert isinstance(result.exception, RecurbenchError)
    assert str(result.exception) == "--k (0,2,2,0,2,2) fills 8 heads, but --heads is 3: give --k for 3 heads, or --heads 8"


@pytest.mark.parametrize("attention", ["full", "prob"])
def test_bench_rsa_times_both_layers_of_either_baseline(attention):
    args = ["bench", "rsa", "--seq-len", "16", "--heads", "2", "--head-dim", "4", "--batch", "2", "--k", "(0,1,1,0,0,0)",
            "--dilations", "-", "--repeats", "1", "--threads", "1", "--attention", attention, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["attention"] == attention and out["k1_k6"] == [0, 1, 1, 0, 0, 0]
    assert out["time_baseline_step_s"] > 0 and out["time_rsa_step_s"] > 0
    assert out["overhead_ratio"] == pytest.approx(out["time_rsa_step_s"] / out["time_baseline_step_s"])
    assert out["pairs"] == 1 and len(out["overhead_pct_paired_quartiles"]) == 3
    assert set(out["minor_page_faults_per_step"]) == {"baseline", "rsa"}
    assert out["time_sdpa_alone_s"] > 0 and out["time_rsa_attention_s"] > 0
    assert out["rsa_attention_vs_sdpa"] == pytest.approx(out["time_rsa_attention_s"] / out["time_sdpa_alone_s"])


def test_bench_rem_runs_where_device_says_and_names_it():
    # T = 256: large enough that both peaks exceed what the process already holds (tiny shapes fit in
    # it and measure 0 bytes), small enough to be quick.
    args = ["bench", "rem", "--seq-len", "256", "--heads", "6", "--head-dim", "4", "--batch", "1", "--repeats", "1",
            "--threads", "1", "--device", "cpu", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["device"] == "cpu" and out["default_impl"] == "chunked" and out["seq_len"] == 256
    assert out["max_abs_err"] < 1e-4
    # The dense reference holds H T x T matrices; the chunked path O(T) state: its peak is far smaller.
    assert out["peak_mem_dense_bytes"] > out["peak_mem_default_bytes"] > 0
    assert out["peak_mem_ratio"] == pytest.approx(out["peak_mem_dense_bytes"] / out["peak_mem_default_bytes"])


def test_bench_rsa_rejects_fewer_than_one_pair():
    result = runner.invoke(app, ["bench", "rsa", "--repeats", "0"])
    assert isinstance(result.exception, RecurbenchError)
    assert "--repeats must be at least 1, got 0" in str(result.exception)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", "rem", "--seq-len", "0"], "--seq-len must be at least 1, got 0"),
        (["bench", "rem", "--heads", "0"], "--heads must be at least 1, got 0"),
        (["bench", "rem", "--batch", "-1"], "--batch must be at least 1, got -1"),
        (["bench", "rsa", "--head-dim", "0"], "--head-dim must be at least 1, got 0"),
        (["bench", "rsa", "--threads", "0"], "--threads must be at least 1, got 0"),
        (["bench", "forecast", "--threads", "0"], "--threads must be at least 1, got 0"),
        (["bench", "rl", "--n-envs", "0"], "--n-envs must be at least 1, got 0"),
        (["run", "ltsf", "--seeds", "0"], "--seeds must be at least 1, got 0"),
    ],
)
def test_sizes_below_their_minimum_are_refused_by_flag(args, message):
    # These reached torch before (a RuntimeError traceback about a reshape or set_num_threads).
    result = runner.invoke(app, args)
    assert isinstance(result.exception, RecurbenchError)
    assert str(result.exception) == message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "ltsf", "--total-timesteps", "1000"], "--total-timesteps applies to the minigrid suite, not 'ltsf'"),
        # These were ignored: the suite planned its usual runs and trained them.
        (["run", "memory", "--datasets", "ETTh1"], "--datasets applies to the ltsf suite, not 'memory'"),
        (["run", "memory", "--models", "lstm", "--pair", "A:B"], "--pair applies to the minigrid suite, not 'memory'"),
        (["run", "langs", "--lengths", "10"], "--lengths applies to the memory suite, not 'langs'"),
        (["run", "ltsf", "--tasks", "copy"], "--tasks applies to the memory suite, not 'ltsf'"),
        (["run", "minigrid", "--languages", "parity"], "--languages applies to the langs suite, not 'minigrid'"),
    ],
)
def test_another_suites_option_is_refused(args, message, tmp_path):
    result = runner.invoke(app, [*args, "--dry-run", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])
    assert isinstance(result.exception, RecurbenchError)
    assert str(result.exception) == message
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "2"], "--workers needs --engine ray (the serial engine runs one run at a time in this process)"),
        (["--engine", "ray", "--address", "ray://head:10001"],
         "is a file on this machine, which workers on other machines of the Ray cluster at ray://head:10001 cannot share"),
        (["--engine", "ray", "--cpus-per-run", "0"], "--cpus-per-run must be positive, got 0.0"),
        (["--engine", "ray", "--device", "cuda"], "--device cuda with --engine ray needs --gpus-per-run"),
    ],
)
@pytest.mark.parametrize("command", ["run", "tune"])
def test_engine_options_are_checked_before_anything_is_written(tmp_path, args, message, command):
    store = tmp_path / "store.db"
    extra = ["--model", "rsa_informer", "--trials", "1", "--dataset", "ETTh1", "--horizon", "24"] if command == "tune" else []
    result = runner.invoke(app, [command, "ltsf", *extra, *args, "--tracking-uri", f"sqlite:///{store}"])
    assert isinstance(result.exception, RecurbenchError), result.output
    assert message in str(result.exception)
    assert not store.exists()


def test_first_seed_must_not_be_negative():
    result = runner.invoke(app, ["run", "ltsf", "--first-seed", "-1"])
    assert isinstance(result.exception, RecurbenchError)
    assert "--first-seed must be at least 0, got -1" in str(result.exception)


@pytest.mark.parametrize(
    ("suite", "args", "message"),
    [
        ("ltsf", ["--models", "informer,rsa_informer,informer"], "--models.2: model 'informer' is given twice (also --models.0)"),
        ("ltsf", ["--datasets", "ETTh1", "--datasets", "ETTh1"], "--datasets.1: dataset 'ETTh1' is given twice (also --datasets.0)"),
        ("ltsf", ["--horizons", "24,48,24"], "--horizons.2: horizon 24 is given twice (also --horizons.0)"),
        ("minigrid", ["--models", "lstm,lstm"], "--models.1: memory core 'lstm' is given twice (also --models.0)"),
        ("ltsf", ["--set", "models=[informer,informer]"], "--set models=[informer,informer]: 'informer' is given twice (items 0 and 1)"),
        ("ltsf", ["--set", "horizons.ETTh1=[24,24]"], "--set horizons.ETTh1=[24,24]: 24 is given twice (items 0 and 1)"),
        ("minigrid", ["--set", "envs=[DoorKey,DoorKey]"], "--set envs=[DoorKey,DoorKey]: 'DoorKey' is given twice (items 0 and 1)"),
    ],
)
def test_a_name_given_twice_is_refused_before_anything_runs(tmp_path, monkeypatch, data_dir, suite, args, message):
    # Run twice, the same configuration and seed would be counted as two seeds (a std of 0).
    from recurbench.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store.db"
    result = runner.invoke(app, ["run", suite, *args, "--data-dir", str(data_dir), "--tracking-uri", f"sqlite:///{store}"])
    assert isinstance(result.exception, ConfigError)
    assert message in str(result.exception)
    assert not store.exists()


def test_console_errors_print_brackets_as_they_are(tmp_path):
    # rich reads "[informer,informer]" as a markup tag; the message must keep it.
    env = {**os.environ, "COLUMNS": "300"}
    proc = subprocess.run(
        [sys.executable, "-c", "from recurbench.cli import main; main()", "run", "ltsf", "--set", "models=[informer,informer]",
         "--tracking-uri", f"sqlite:///{tmp_path / 'store.db'}"],
        capture_output=True, text=True, env=env, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert proc.stderr == "error: --set models=[informer,informer]: 'informer' is given twice (items 0 and 1)\n"
    assert not (tmp_path / "store.db").exists()


def test_console_errors_print_colons_as_they_are_on_one_line(tmp_path):
    # rich read ":abc" as an emoji code (`chrono🔤`), and folded a long message at 160 columns into a log file.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-c", "from recurbench.cli import main; main()", "run", "memory", "--dry-run",
         "--set", "model.gate_init=chrono:abc", "--set", "task.labels=8"],
        capture_output=True, text=True, env=env, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: ") and "model.gate_init=chrono:abc" in line and "'chrono:abc'" in line
    assert len(line) > 160


def test_tables_show_cells_as_text_not_markup():
    from rich.console import Console

    from recurbench.cli.common import table as _table

    out = Console(width=200, record=True, color_system=None)
    out.print(_table("[bold]t[/bold]", ["[i]x[/i]"], [["[red]cell[/red] [lstm]"]]))
    text = out.export_text()
    assert "[bold]t[/bold]" in text and "[i]x[/i]" in text and "[red]cell[/red] [lstm]" in text


def test_a_bad_suite_config_fails_before_the_tracking_store_is_written(tmp_path, monkeypatch):
    # The error names the file and key; neither the store nor results/ is created.
    from importlib import resources

    import yaml

    from recurbench.errors import ConfigError

    doc = yaml.safe_load(resources.files("recurbench.suites").joinpath("ltsf.yaml").read_text())
    doc["profiles"]["quick"]["training"]["rsa_lr_factor"] = -1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store = tmp_path / "store.db"
    for uri in ([], ["--tracking-uri", f"sqlite:///{store}"]):
        result = runner.invoke(app, ["run", "ltsf", "--config", str(bad), *uri])
        assert isinstance(result.exception, ConfigError)
        assert f"{bad}: profiles.quick.training.rsa_lr_factor: Input should be greater than 0" in str(result.exception)
    # tune takes the same --config and --set, and checks them before its study or a trial exists.
    tune = ["tune", "ltsf", "--model", "rsa_informer", "--dataset", "ETTh1", "--horizon", "24", "--trials", "1"]
    result = runner.invoke(app, [*tune, "--config", str(bad)])
    assert f"{bad}: profiles.quick.training.rsa_lr_factor: Input should be greater than 0" in str(result.exception)
    result = runner.invoke(app, [*tune, "--set", "training.epochs=0"])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == "--set training.epochs=0: Input should be greater than 0 (got 0)"
    assert not store.exists() and not (tmp_path / "results").exists()


def test_a_gpu_on_a_machine_without_one_is_refused_before_the_tracking_store_is_written(tmp_path, monkeypatch):
    import torch

    from recurbench.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store.db"
    uri = ["--tracking-uri", f"sqlite:///{store}"]
    tune = ["tune", "ltsf", "--model", "rsa_informer", "--dataset", "ETTh1", "--horizon", "24", "--trials", "1"]
    for args in (["run", "ltsf", *uri], ["run", "minigrid", *uri], [*tune, *uri], ["bench", "forecast"],
                 ["bench", "rem"], ["bench", "rsa"]):
        result = runner.invoke(app, [*args, "--device", "cuda:1"])
        assert isinstance(result.exception, ConfigError), (args, result.output)
        assert str(result.exception).startswith("--device: 'cuda:1' asks for a GPU, but "), args
    assert not store.exists() and not (tmp_path / "results").exists()


def test_progress_off_a_terminal_logs_each_epoch_once():
    import io
    from types import SimpleNamespace

    from rich.console import Console
    from rich.progress import Progress

    from recurbench.cli.run import _RunProgress

    buffer = io.StringIO()
    with Progress(console=Console(file=buffer, force_terminal=False, width=200)) as progress:
        update = _RunProgress(progress)(SimpleNamespace(name="informer-ETTh1-24-s0"))
        for done in range(5):  # batch updates within one epoch: one line, not five
            update(done / 5, 2, "epoch 1/2")
        update(1, 2, "epoch 1/2: train 0.5000, val 0.6000 (3 s)")
        update(1.5, 2, "epoch 2/2")
        update(1.75, 2, "epoch 2/2, batch 20/40: val 0.5500")
        update(2, 2, "done: test MSE 0.9000, MAE 0.7000")
    lines = [line.split(" ", 1)[1] for line in buffer.getvalue().splitlines() if line[:2].isdigit()]
    # An epoch's start ("epoch 1/2", the bar's label) is said again when it ends: logged once, at its end.
    assert lines == [
        "informer-ETTh1-24-s0 epoch 1/2: train 0.5000, val 0.6000 (3 s)",
        "informer-ETTh1-24-s0 epoch 2/2, batch 20/40: val 0.5500",
        "informer-ETTh1-24-s0 done: test MSE 0.9000, MAE 0.7000",
    ]


@pytest.mark.parametrize("enqueue", [[], ["--enqueue-paper"]])
def test_tune_with_a_bad_tracking_uri_creates_no_optuna_storage(tmp_path, data_dir, enqueue):
    from recurbench.errors import ConfigError

    storage = tmp_path / "optuna.db"
    result = runner.invoke(app, [
        "tune", "ltsf", "--model", "rsa_informer", "--dataset", "ETTh1", "--horizon", "24", "--trials", "1",
        "--storage", f"sqlite:///{storage}", "--tracking-uri", "foo://bar", "--data-dir", str(data_dir), *enqueue,
    ])
    assert isinstance(result.exception, ConfigError) and "tracking URI 'foo://bar'" in str(result.exception)
    assert not storage.exists()


def test_a_data_warning_prints_as_one_line_and_other_warnings_keep_pythons_form(capsys):
    import warnings

    from recurbench import cli
    from recurbench.errors import DataWarning

    shown_by_python = []
    with warnings.catch_warnings():  # restores warnings.showwarning on exit
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, *args: shown_by_python.append((category, str(message)))
        cli._show_data_warnings()
        warnings.warn("data/ETTh1.csv: sha256 abc is not the registry's def", DataWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
    assert capsys.readouterr().err == "warning: data/ETTh1.csv: sha256 abc is not the registry's def\n"
    assert shown_by_python == [(UserWarning, "something else")]


def test_help_reads_as_words_and_gives_every_suites_device_default():
    import re

    from recurbench.suites.registry import SUITES

    for args in (["--help"], ["bench", "--help"], ["run", "--help"], ["tune", "--help"], ["list", "--help"],
                 ["bench", "rem", "--help"], ["compare", "--help"]):
        out = runner.invoke(app, args, env={"COLUMNS": "200"}).output
        # Typer's type placeholders, not words: <bool>, <list[str]>, <int>; {suite} for a required argument.
        assert not re.search(r"<(bool|int|float|str|list\[str\])>|\{\w+\}", out), (args, out)
    usage = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    assert "Usage: recurbench run [OPTIONS] SUITE" in " ".join(usage.split()) and "--set KEY=VALUE" in " ".join(usage.split())
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", usage).split())
    device = text[text.index("--device"):]
    for name in ("ltsf", "minigrid", "langs", "memory"):
        default = SUITES[name].default_device
        assert re.search(rf"{default} for [^;(]*\b{name}\b", device), (name, default, device[:400])


def test_help_says_each_command_in_prose_where_the_docstring_wraps_its_lines():
    """A docstring wraps at the source's width; --help must not break its text there (Typer's rich help
    keeps each newline: `bench kernels` read "configuration, compiled" / "ahead of time"), nor show
    reStructuredText markup."""
    import re

    for group, names in (([], ("list", "run", "tune", "compare", "report", "data", "bench")),
                         (["data"], ("list", "verify", "fetch", "info")),
                         (["bench"], ("rem", "rsa", "forecast", "kernels", "memattn", "rl", "langs", "memory"))):
        out = runner.invoke(app, [*group, "--help"], env={"COLUMNS": "400"}).output
        panel = out[out.index("Commands"):]
        rows = [line.strip("│ ") for line in panel.splitlines()[1:] if line.startswith("│")]
        # At 400 columns every command's text fits on its own row: a row that names no command is a break.
        assert [row.split()[0] for row in rows] == list(names), (group, rows)
        for name in names:
            text = runner.invoke(app, [*group, name, "--help"], env={"COLUMNS": "400"}).output
            assert "``" not in text and not re.search(r":(func|class|attr|meth):", text), (group, name)
            lines = [line.strip() for line in text.splitlines()]
            start = next(i for i, line in enumerate(lines) if line.startswith("Usage:")) + 2  # a blank line between
            paragraph = lines[start:lines.index("", start)]
            assert len(paragraph) == 1 and paragraph[0], (group, name, lines[:start + 3])


def test_bench_rem_prints_units_a_person_reads_within_80_columns():
    args = ["bench", "rem", "--seq-len", "256", "--heads", "6", "--head-dim", "4", "--batch", "1", "--repeats", "1",
            "--threads", "1", "--device", "cpu"]
    result = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in result.output
    row = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in lines if line.count("│") == 3}
    assert row["dense fwd+bwd"].endswith(("ms", " s")) and row["chunked peak"].endswith(" MB")
    assert row["speed-up"].endswith("×") and row["memory saved"].endswith("×")
    refused = runner.invoke(app, ["bench", "rem", "--full-size", "--seq-len", "64"])
    assert "--full-size sets --seq-len to 4096: give one or the other" in str(refused.exception)


def test_tunes_table_reads_as_words(monkeypatch):
    # It printed {"complete": 3, "pruned": 1, "fail": 0, ...}, Python dicts with every digit and "[]".
    from recurbench.tuning import tune as tune_module
    from recurbench.tuning.study import StudyResult
    from recurbench.tuning.tune import TuneOutcome

    result = StudyResult("s", "sqlite:///o.db", "abc", {"complete": 3, "pruned": 1, "fail": 1, "running": 0},
                         0.123456789, {"gate_init": "uniform", "lr": 0.000123456789, "cyclical_pairs": 2}, 2, [])
    monkeypatch.setattr(tune_module, "tune", lambda request, tracker, engine: TuneOutcome(result, None))
    out = runner.invoke(app, ["tune", "ltsf", "--model", "rsa_informer", "--trials", "5", "--tracking-uri", "sqlite:///x.db"],
                        env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.output.splitlines() if line.count("│") == 3}
    assert rows["trials"] == "3 complete, 1 pruned, 1 failed"
    assert rows["best params"] == "gate_init=uniform, lr=0.0001235, cyclical_pairs=2"
    assert rows["best validation loss"] == "0.1235" and rows["stale trials failed and retried"] == "none"
