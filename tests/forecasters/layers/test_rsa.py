"""The RSA layer (eq. 4): gate limits, head configuration, initialisation, non-square use."""

from __future__ import annotations

import math

import pytest
import torch

from recurbench.errors import ConfigError
from recurbench.forecasters.layers.rsa import REMHeadConfig, RSAFullAttention, RSAMixer
from recurbench.kernels.rem import rem_apply

TABLE5 = REMHeadConfig.from_table5("(0,1,1,2,2,2)", "[48,24,48,96,48,96]")


def _mixer(masked=False, **kw):
    return RSAMixer(8, REMHeadConfig.from_table5("(2,1,1,2,1,1)", "[2,3,5,5]"), masked=masked, **kw).double()


@pytest.mark.parametrize("masked", [True, False])
def test_gate_zero_is_the_baseline_and_gate_one_is_pv(masked):
    mixer = _mixer(masked)
    attn = torch.randn(2, 30, 8, 4, dtype=torch.float64)
    v = torch.randn(2, 30, 8, 4, dtype=torch.float64)
    with torch.no_grad():
        mixer.mu.fill_(-math.inf)
        assert torch.equal(mixer(attn, v), attn)
        mixer.mu.fill_(math.inf)
        pv = rem_apply(v, kind=mixer.kinds, eta=mixer._per_head(mixer.eta, mixer.reg_index),
                       nu=mixer._per_head(mixer.nu, mixer.cyc_index), theta=mixer._per_head(mixer.theta, mixer.cyc_index),
                       dilation=mixer.dilations, masked=masked, impl="naive")
        torch.testing.assert_close(mixer(attn, v), pv)


def test_full_attention_with_gate_zero_equals_the_layer_without_rems():
    torch.manual_seed(0)
    base = RSAFullAttention(32, 8, None)
    torch.manual_seed(0)
    rsa = RSAFullAttention(32, 8, REMHeadConfig.regular(8), gate_init=-math.inf)
    x = torch.randn(2, 12, 32)
    torch.testing.assert_close(rsa(x), base(x))


def test_gradients_reach_gate_and_rem_parameters():
    mixer = _mixer()
    attn = torch.randn(1, 20, 8, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 20, 8, 3, dtype=torch.float64, requires_grad=True)
    mixer(attn, v).square().sum().backward()
    for name in ("mu", "eta", "nu", "theta"):
        grad = getattr(mixer, name).grad
        assert grad is not None and torch.all(grad != 0), name


def test_initialisation_follows_section_3():
    mixer = RSAMixer(8, TABLE5, masked=False, gate_init=1.0)
    assert mixer.mu.item() == 1.0 and mixer.gate().item() == pytest.approx(1 / (1 + math.exp(-1)))
    eta = mixer.eta.detach().abs()
    assert torch.all((eta >= 1) & (eta <= 2)) and (mixer.eta > 0).any() and (mixer.eta < 0).any()
    assert torch.all((mixer.nu >= 1) & (mixer.nu <= 2))
    torch.testing.assert_close(mixer.theta.detach(), torch.full((6,), math.pi / 4))
    params = mixer.rem_parameters()
    kinds = TABLE5.head_kinds()
    assert [math.isnan(x) for x in params["lambda"].tolist()] == [k != "regular" for k in kinds]
    assert [math.isnan(x) for x in params["gamma"].tolist()] == [k == "regular" for k in kinds]
    assert params["dilation"].tolist() == [1, 1, 48, 24, 48, 96, 48, 96]


def test_table5_layout():
    assert TABLE5.head_kinds() == ("cos", "sin", "regular", "regular", "cos", "cos", "sin", "sin")
    assert TABLE5.head_dilations() == (1, 1, 48, 24, 48, 96, 48, 96)
    assert REMHeadConfig.from_table5("(4,2,2,0,0,0)", "-").dilations == ()


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: REMHeadConfig.from_table5("(0,0,0,4,4)", "[2,3,6,24,2,3,6,24]"), "need 6 entries"),
        (lambda: REMHeadConfig(k=(1, 2, 1, 0, 0, 0)), "k2=2 != k3=1"),
        (lambda: REMHeadConfig(k=(0, 0, 0, 1, 1, 2)), "k5=1 != k6=2"),
        (lambda: REMHeadConfig(k=(0, 0, 0, 4, 0, 0), dilations=(24, 24)), "k4\\+k5\\+k6 = 4"),
        (lambda: REMHeadConfig(k=(0, 0, 0, 1, 0, 0), dilations=(0,)), "dilation must be an integer >= 1, got 0"),
        (lambda: REMHeadConfig(k=(-1, 0, 0, 0, 0, 0)), "k1 must be an integer >= 0, got -1"),
        (lambda: REMHeadConfig(k=(0, 0, 0, 0, 0, 0)), "all zero"),
        (lambda: REMHeadConfig(k=(1, 0, 0, 0, 0, 0), truncate=-2), "truncate"),
        (lambda: REMHeadConfig.from_table5("(a,b)", "-"), "cannot read k1..k6"),
        (lambda: RSAMixer(8, REMHeadConfig(k=(4, 0, 0, 0, 0, 0)), masked=True), "sum to 4, but the layer has 8"),
    ],
)
def test_invalid_configurations_name_the_bad_value(build, match):
    with pytest.raises(ConfigError, match=match):
        build()


def test_unpaired_cyclical_heads_when_allowed():
    cfg = REMHeadConfig(k=(0, 3, 1, 0, 0, 0), allow_unpaired=True)
    assert cfg.head_kinds() == ("cos", "cos", "cos", "sin")


def test_unpaired_cyclical_heads_are_refused_with_a_fix_every_caller_can_apply():
    # The message used to suggest allow_unpaired, which the suites' files and the estimators refuse; it
    # now asks for what they all accept, equal counts.
    with pytest.raises(ConfigError) as info:
        REMHeadConfig(k=(1, 1, 1, 0, 2, 1), dilations=(2, 3, 4))
    assert str(info.value) == (
        "cyclical REM heads come in pairs: k5=2 != k6=1; give k5 (cos) and k6 (sin) the same count, "
        "one sin head per cos head"
    )
    assert REMHeadConfig(k=(1, 1, 1, 0, 2, 2), dilations=(2, 3, 4, 5)).head_kinds()[-4:] == ("cos", "cos", "sin", "sin")


def test_cross_attention_with_query_positions_matches_dense_rem():
    """Decoder queries offset in the encoder frame (Informer's cross-attention), through the mixer."""
    layer = RSAFullAttention(16, 4, REMHeadConfig(k=(2, 1, 1, 0, 0, 0), truncate=10), gate_init=math.inf).double()
    enc = torch.randn(2, 24, 16, dtype=torch.float64)
    dec = torch.randn(2, 18, 16, dtype=torch.float64)
    pos = torch.arange(12, 30)
    out = layer(dec, enc, query_positions=pos)
    v = layer.v_proj(enc).view(2, 24, 4, 4)
    m = layer.mixer
    pv = rem_apply(v, kind=m.kinds, eta=m._per_head(m.eta, m.reg_index), nu=m._per_head(m.nu, m.cyc_index),
                   theta=m._per_head(m.theta, m.cyc_index), dilation=m.dilations, masked=False,
                   query_positions=pos, truncate=10, impl="naive")
    torch.testing.assert_close(out, layer.out_proj(pv.reshape(2, 18, 16)))
    with pytest.raises(ValueError, match="query_positions is required"):
        layer(dec, enc)
