"""The six networks: shapes, RSA reducing to its baseline, XL's memory, and a learning signal."""

from __future__ import annotations

import pytest
import torch

from recurbench.errors import ConfigError
from recurbench.forecasters.config import ForecasterConfig, RSASpec
from recurbench.forecasters.layers import attention as attention_module
from recurbench.forecasters.models import ARCHITECTURES, build_network
from recurbench.forecasters.training import rsa_state

RSA = RSASpec(k=(1, 1, 1, 1, 0, 0), dilations=(2,))
CFG = ForecasterConfig(
    n_features=3, n_marks=2, seq_len=16, label_len=8, pred_len=6, d_model=16, n_heads=4,
    e_layers=1, d_layers=1, d_ff=16, dropout=0.0, segment_len=6, rsa=RSA,
)


def batch(cfg=CFG, b=2):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, cfg.seq_len, cfg.n_features, generator=g)
    x_mark = torch.rand(b, cfg.seq_len, cfg.n_marks, generator=g) - 0.5
    y_mark = torch.rand(b, cfg.label_len + cfg.pred_len, cfg.n_marks, generator=g) - 0.5
    return x, x_mark, y_mark


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_forecast_shape_and_gradients(name):
    torch.manual_seed(0)
    model = build_network(name, CFG)
    out = model(*batch())
    assert out.shape == (2, CFG.pred_len, CFG.n_features)
    out.square().mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads if g is not None)
    gates, rem = rsa_state(model)
    if ARCHITECTURES[name].rsa:
        assert gates and all(abs(v - torch.sigmoid(torch.tensor(1.0)).item()) < 1e-6 for v in gates.values())
        assert all(len(p["lambda"]) == CFG.n_heads for p in rem.values())
        assert all(len(p["kind"]) == CFG.n_heads and set(p["kind"]) <= {"regular", "cos", "sin"} for p in rem.values())
        # Causal layers (decoder self-attention, the decoder-only stacks) apply masked REMs; Informer's
        # encoder and cross-attention two-sided ones (P + P').
        expected = {"encoder.0.self": False, "decoder.0.self": True, "decoder.0.cross": False}
        assert {k: p["masked"] for k, p in rem.items()} == (
            expected if name == "rsa_informer" else {k: True for k in rem}
        )
    else:
        assert gates == {} and rem == {}


@pytest.mark.parametrize("base", ["informer", "logsparse", "xl"])
def test_rsa_with_closed_gate_equals_its_baseline(base):
    """eq. 4 with sigma(mu) = 0 is the baseline attention; with the positional encoding kept, the
    whole RSA network is then its baseline network with the same weights."""
    rsa = RSASpec(k=(2, 1, 1, 0, 0, 0), gate_init=-60.0, keep_positional=True)
    cfg = CFG.with_(rsa=rsa, attention="full") if base == "informer" else CFG.with_(rsa=rsa)
    torch.manual_seed(0)
    rsa_model = build_network(f"rsa_{base}", cfg).eval()
    baseline = build_network(base, cfg).eval()
    missing, unexpected = baseline.load_state_dict(rsa_model.state_dict(), strict=False)
    assert not missing and all(".mixer." in key for key in unexpected)
    torch.testing.assert_close(rsa_model(*batch()), baseline(*batch()))


@pytest.mark.parametrize("weights_path", [True, False])
def test_rsa_informer_cross_attention_gets_key_space_positions(monkeypatch, weights_path):
    """Whether the REMs are mixed into the attention weights (the CPU's short-sequence path) or into
    the output, the cross-attention's REM rows sit at the decoder steps' positions on the encoder's axis."""
    seen = {}
    model = build_network("rsa_informer", CFG).eval()
    cross = model.decoder[0].cross_attention.mixer
    if not weights_path:
        monkeypatch.setattr(attention_module, "MATH_MAX_KEYS", 0)
    for name in ("forward", "mix_weights"):
        original = getattr(cross, name)

        def spy(*args, _name=name, _original=original, query_positions=None, **kwargs):
            seen[_name] = query_positions
            return _original(*args, query_positions=query_positions, **kwargs)

        monkeypatch.setattr(cross, name, spy)
    model(*batch())
    # Decoder step i is time seq_len - label_len + i of the encoder's axis.
    expected = torch.arange(CFG.label_len + CFG.pred_len) + CFG.seq_len - CFG.label_len
    assert set(seen) == {"mix_weights" if weights_path else "forward"}
    torch.testing.assert_close(torch.as_tensor(next(iter(seen.values()))), expected)


@pytest.mark.parametrize("name", ["xl", "rsa_xl"])
def test_xl_memory_carries_earlier_segments(name):
    torch.manual_seed(0)
    model = build_network(name, CFG).eval()
    x, x_mark, y_mark = batch()
    x2 = x.clone()
    x2[:, 0] += 5.0  # first segment only (segments of 6 over 16 + 6 steps: [0,4) [4,10) [10,16) [16,22))
    assert not torch.allclose(model(x, x_mark, y_mark), model(x2, x_mark, y_mark))


def test_rsa_configuration_errors():
    with pytest.raises(ConfigError, match="sum to 3, but the model has 4 heads"):
        CFG.with_(rsa=RSASpec(k=(3, 0, 0, 0, 0, 0))).check()
    with pytest.raises(ConfigError, match="need 2 dilation factors"):
        CFG.with_(rsa=RSASpec(k=(2, 0, 0, 2, 0, 0), dilations=(24,))).check()
    with pytest.raises(ConfigError, match="pairs"):
        CFG.with_(rsa=RSASpec(k=(1, 2, 1, 0, 0, 0))).check()
    with pytest.raises(ConfigError, match="distil"):
        CFG.with_(distil=True).check()
    with pytest.raises(ConfigError, match=r"rsa\.prob_rows: must be one of all, active, got 'top'"):
        CFG.with_(rsa=RSASpec(k=(4, 0, 0, 0, 0, 0), prob_rows="top")).check()


@pytest.mark.parametrize("name", ["informer", "rsa_informer"])
def test_learns_a_periodic_signal(name):
    """A few dozen Adam steps on a noisy sine cut the forecast error well below predicting zero."""
    from recurbench.forecasters.training import TrainConfig, evaluate, train

    from .windows import sine_windows

    torch.manual_seed(0)
    cfg = CFG.with_(n_features=1, n_marks=0, seq_len=24, label_len=12, pred_len=6)
    train_set, test_set = sine_windows(cfg, 400), sine_windows(cfg, 120, offset=400)
    model = build_network(name, cfg)
    before = evaluate(model, test_set, cfg.pred_len)["mse"]
    train(model, train_set, None, cfg.pred_len, TrainConfig(epochs=6, learning_rate=5e-3, lr_decay=0.8))
    after = evaluate(model, test_set, cfg.pred_len)["mse"]
    assert after < 0.25 * before and after < 0.25


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_each_network_compiles_into_one_graph(name):
    # fullgraph=True fails on any graph break (a tensor read back to Python, an op dynamo cannot trace);
    # the eager backend keeps it to graph capture, so the test is quick and needs no compiler.
    torch.manual_seed(0)
    model = build_network(name, CFG).eval()
    with torch.no_grad():
        torch.manual_seed(1)  # ProbSparse samples keys: the same draws in both calls
        compiled = torch.compile(model, fullgraph=True, backend="eager")(*batch())
        torch.manual_seed(1)
        eager = model(*batch())
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)


def test_the_model_list_describes_what_the_code_runs():
    # `recurbench list models` said Informer distils, while the estimators and the ltsf suite run without.
    import dataclasses
    import re
    from importlib import resources

    import yaml

    from recurbench.forecasters.estimators import ESTIMATORS, InformerForecaster

    assert set(ARCHITECTURES) == set(ESTIMATORS)
    suite = yaml.safe_load(resources.files("recurbench.suites").joinpath("ltsf.yaml").read_text())
    distil = {field.name: field.default for field in dataclasses.fields(ForecasterConfig)}["distil"]
    assert {distil, InformerForecaster().distil, suite["profiles"]["paper"]["model"]["distil"]} == {False}
    for name in ("informer", "rsa_informer"):
        assert re.search(r"distilling off|no distilling", ARCHITECTURES[name].description), name
