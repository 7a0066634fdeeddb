"""bench langs: one row per language x model x route, the implied run time, and the attention routes."""

import json

import pytest
import torch
from bench_tables import body, header, legend, rendered
from typer.testing import CliRunner

from recurbench.bench import langs as bench
from recurbench.cli import app
from recurbench.cli.bench import langs_table
from recurbench.errors import ConfigError
from recurbench.forecasters.layers import attention as attention_module
from recurbench.forecasters.layers.rsa import REMHeadConfig, RSAFullAttention


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the generated strings go here


def test_rows_per_route_and_the_run_time_they_imply():
    rows = bench.bench_langs("quick", languages=["tomita3"], models=["rsa_ii"], batches=2)
    assert [(r["language"], r["model"], r["attention"]) for r in rows] == [
        ("tomita3", "rsa_ii", "auto"), ("tomita3", "rsa_ii", "products")]
    for r in rows:
        assert r["batches_per_epoch"] == 32  # 1000 strings in batches of 32 (quick profile)
        epoch = r["batches_per_epoch"] * r["ms_per_batch"] / 1000 + r["score_bin0_s"] + r["score_bin1_s"]
        assert r["run_s"] == pytest.approx(6 * epoch)  # the quick profile's 6 epochs
        assert r["threads"] == 1


def _mixes_into_weights(n_keys: int) -> bool:
    torch.manual_seed(0)
    layer = RSAFullAttention(20, 5, REMHeadConfig(k=(5, 0, 0, 0, 0, 0)), causal=True)  # heads of 4
    calls = []
    original = layer.mixer.mix_weights
    layer.mixer.mix_weights = lambda *a, **kw: calls.append(1) or original(*a, **kw)
    layer(torch.randn(2, n_keys, 20))
    return bool(calls)


def test_the_products_route_materialises_narrow_heads_and_is_undone_after():
    keys = attention_module.SMALL_HEAD_RSA_MAX_KEYS + 12  # past the narrow heads' limit, within MATH_MAX_KEYS
    assert not _mixes_into_weights(keys)
    with bench.attention_route("products"):
        assert _mixes_into_weights(keys)
    assert not _mixes_into_weights(keys)
    with pytest.raises(RuntimeError), bench.attention_route("products"):
        raise RuntimeError("a failed timing")
    assert attention_module.MATH_MIN_HEAD_DIM == 32


@pytest.mark.parametrize("call, message", [
    (lambda: bench.bench_langs("quick", attention=["fast"]), "attention route 'fast'"),
    (lambda: bench.bench_langs("quick", batches=0), "batches: must be at least 1, got 0"),
    (lambda: bench.bench_langs("quick", languages=["tomita9"]), "unknown language 'tomita9'"),
])
def test_bad_settings_fail_before_anything_is_timed(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


ROWS = [{"language": language, "model": model, "attention": route, "ms_per_batch": 12.3456, "batches_per_epoch": 1032,
         "score_bin0_s": 0.4321, "score_bin1_s": 2.71828, "run_s": 5432.1, "threads": 1}
        for language in ("parity", "d2") for model in ("transformer_rel", "rsa_iii") for route in ("auto", "products")]


def test_the_table_gives_times_in_ms_and_s_within_80_columns():
    # Eight columns do not fit 80 side by side: two parts, each led by the columns that name a row.
    text = rendered(langs_table(ROWS, "paper"))
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text
    assert header(text, 7) == ["language", "model", "attention", "batch", "batches", "bin 0", "bin 1"]
    assert header(text, 4) == ["language", "model", "attention", "run"]
    keys = [[r["language"], r["model"], r["attention"]] for r in ROWS]
    assert body(text, 7) == [[*k, "12.3 ms", "1,032", "432 ms", "2.72 s"] for k in keys]
    assert body(text, 4) == [[*k, "5,432 s"] for k in keys]
    assert "run: the run these imply, epochs x (batches x batch + scoring)" in legend(text)
    assert "(min)" not in text and "run_s" not in text


def test_the_command_prints_the_table_and_json_the_raw_fields(monkeypatch):
    monkeypatch.setattr(bench, "bench_langs", lambda *a, **kw: [dict(r) for r in ROWS])
    table = CliRunner().invoke(app, ["bench", "langs", "--profile", "quick"], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    assert body(table.output, 4)[0] == ["parity", "transformer_rel", "auto", "5,432 s"]
    raw = CliRunner().invoke(app, ["bench", "langs", "--profile", "quick", "--json"])
    assert raw.exit_code == 0, raw.output
    assert json.loads(raw.output) == ROWS
