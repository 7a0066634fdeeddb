"""bench langs: one row per language x model x route, the implied run time, and the attention routes."""

import pytest
import torch

from recurbench.bench import langs as bench
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
