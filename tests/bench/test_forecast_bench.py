"""bench forecast's table: the timings in ms or s, the network's settings in its title and legend, the raw
fields only under --json."""

import json

from bench_tables import body, header, legend, rendered
from typer.testing import CliRunner

from recurbench.bench import forecast
from recurbench.cli import app
from recurbench.cli.bench import forecast_table

RESULT = {
    "model": "informer", "dataset": "ETTh1", "horizon": 24, "seq_len": 48, "label_len": 48, "e_layers": 2,
    "d_layers": 1, "d_model": 512, "batch_size": 32, "threads": 1, "n_params": 10540039, "total_batches": 268,
    "timed_batches": 1, "seconds_per_batch": 1.5026834, "seconds_per_epoch": 402.71915, "extrapolated": True,
    "device": "cpu",
}


def test_a_row_per_timing_in_seconds_within_80_columns():
    text = rendered(forecast_table(RESULT))
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text
    assert text.splitlines()[0].strip() == "informer training time on ETTh1, horizon 24 (cpu, 1 thread)"
    assert header(text, 2) == ["", "time"]
    assert body(text, 2) == [["training step (one batch)", "1.5 s"], ["training epoch (268 batches)", "403 s"]]
    words = legend(text)
    assert ("input window 48, decoder start 48, 2 encoder + 1 decoder layers, d_model 512, batch 32; 10,540,039 "
            "parameters") in words
    assert "the mean of 1 timed batch after an untimed warm-up batch" in words
    assert "training epoch: the step's time x 268, extrapolated (--max-batches)." in words
    assert "seconds_per_epoch" not in text and "n_params" not in text  # raw fields only under --json


def test_a_whole_epoch_timed_in_ms():
    result = {**RESULT, "threads": 2, "total_batches": 1234, "timed_batches": 1234, "seconds_per_batch": 0.0123456,
              "seconds_per_epoch": 15.2345, "extrapolated": False, "device": "cuda:0 (NVIDIA H200)"}
    text = rendered(forecast_table(result))
    assert text.splitlines()[0].strip() == ("informer training time on ETTh1, horizon 24 (cuda:0 (NVIDIA H200), "
                                            "2 threads)")
    assert body(text, 2) == [["training step (one batch)", "12.3 ms"], ["training epoch (1,234 batches)", "15.2 s"]]
    words = legend(text)
    assert "the mean of 1,234 timed batches" in words and "training epoch: every batch timed." in words


def test_the_command_prints_the_table_and_json_the_raw_fields(monkeypatch):
    monkeypatch.setattr(forecast, "bench_forecast", lambda **kw: dict(RESULT))
    table = CliRunner().invoke(app, ["bench", "forecast", "--max-batches", "1"], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    assert max(map(len, table.output.splitlines())) <= 80
    assert body(table.output, 2)[1] == ["training epoch (268 batches)", "403 s"]
    raw = CliRunner().invoke(app, ["bench", "forecast", "--max-batches", "1", "--json"])
    assert raw.exit_code == 0, raw.output
    assert json.loads(raw.output) == RESULT
