"""The recognisers: causal (padding never reaches a real position), RSA layouts I-IV built from the
shared RSA layer, bad layouts refused; the loss, the all-positions accuracy, the schedule and the
length-grouped batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recurbench.data.langs import LANGUAGES
from recurbench.errors import ConfigError, ModelOutputError
from recurbench.forecasters.layers.rsa import RSAMixer
from recurbench.langs.models import LANG_MODELS, PAPER_HEADS, LangModelConfig, build_recognizer
from recurbench.langs.training import (
    EncodedSplit,
    LangTrainConfig,
    masked_mse,
    score,
    strings_correct,
    train_recognizer,
)


def _cfg(model: str, **changes) -> LangModelConfig:
    return LangModelConfig(rem_k=PAPER_HEADS.get(model), **changes)


@pytest.mark.parametrize("model", list(LANG_MODELS))
def test_every_model_is_causal_and_ignores_padding(model):
    torch.manual_seed(0)
    net = build_recognizer(model, _cfg(model)).eval()
    ids = torch.randint(1, 3, (3, 40))
    changed = ids.clone()
    changed[:, 25:] = 0  # padding, as a shorter string's batch has it
    changed[0, 25:] = 3 - ids[0, 25:]  # other symbols
    out, other = net(ids), net(changed)
    assert out.shape == (3, 40, 2) and ((out > 0) & (out < 1)).all()
    torch.testing.assert_close(out[:, :25], other[:, :25], rtol=0, atol=1e-6)
    assert not torch.allclose(out[:, 25:], other[:, 25:])


def test_rsa_settings_use_the_shared_rsa_layer_with_masked_rems():
    for model, k in PAPER_HEADS.items():
        net = build_recognizer(model, _cfg(model))
        mixers = [m for m in net.modules() if isinstance(m, RSAMixer)]
        assert len(mixers) == 3 and all(m.masked for m in mixers)
        assert mixers[0].heads.k == k
        assert mixers[0].dilations == (1,) * (5 - sum(k[3:])) + (2,) * sum(k[3:])  # dilated heads last
    four = build_recognizer("rsa_iv", _cfg("rsa_iv", dilation=4))
    assert [m for m in four.modules() if isinstance(m, RSAMixer)][0].dilations == (1, 1, 1, 4, 4)
    assert not any(isinstance(m, RSAMixer) for m in build_recognizer("transformer", _cfg("transformer")).modules())


@pytest.mark.parametrize(
    ("model", "cfg", "message"),
    [
        ("rsa_ii", LangModelConfig(rem_k=(3, 0, 0, 1, 0, 0)), r"model 'rsa_ii': rem_k \[3, 0, 0, 1, 0, 0\]: .*sum to 4, but the layer has 5 heads"),
        ("rsa_i", LangModelConfig(), r"model 'rsa_i': rem_k \[\]: an RSA model needs REM head counts"),
        ("lstm", LangModelConfig(rem_k=(5, 0, 0, 0, 0, 0)), r"model 'lstm': rem_k \[5, 0, 0, 0, 0, 0\]: only an RSA model"),
        ("transformer", LangModelConfig(d_model=21), r"d_model \(21\) must be divisible by n_heads \(5\)"),
        ("gru", LangModelConfig(), r"unknown model 'gru'; known: transformer, transformer_rel, rsa_i"),
    ],
)
def test_bad_configurations_are_refused_before_building(model, cfg, message):
    with pytest.raises(ConfigError, match=message):
        build_recognizer(model, cfg)


def test_loss_and_accuracy_ignore_padding_and_need_every_unit():
    targets = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]] * 3)
    mask = torch.tensor([[True, True, False]] * 3)
    probs = torch.tensor([
        [[0.2, 0.9], [0.6, 0.4], [0.9, 0.9]],  # right at both real positions; the pad is ignored
        [[0.2, 0.9], [0.6, 0.5], [0.0, 0.0]],  # one unit at 0.5 counts as 1: wrong
        [[0.4, 0.6], [0.51, 0.49], [0.0, 0.0]],  # right, narrowly
    ])
    assert strings_correct(probs, targets, mask).tolist() == [True, False, True]
    expected = np.mean([(0.04 + 0.01) / 2, (0.16 + 0.16) / 2, (0.04 + 0.01) / 2, (0.16 + 0.25) / 2,
                        (0.16 + 0.16) / 2, (0.49**2 + 0.49**2) / 2])
    assert masked_mse(probs, targets, mask).item() == pytest.approx(expected)


def test_learning_rate_halves_every_five_epochs():
    cfg = LangTrainConfig()
    assert [cfg.learning_rate_at(e) for e in (1, 5, 6, 10, 11, 25)] == [0.005, 0.005, 0.0025, 0.0025, 0.00125, 0.0003125]


def test_batches_group_similar_lengths_and_cover_every_string_once():
    rng = np.random.default_rng(0)
    strings = ["".join(rng.choice(["0", "1"], size=n)) for n in rng.integers(1, 60, size=500)]
    split = EncodedSplit.of(LANGUAGES["tomita6"], strings)
    batches = split.batches(32, np.random.default_rng(1))
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    spans = [int(np.ptp(split.lengths[b])) for b in batches]
    assert max(spans) <= 5  # ~8 strings per length: a batch spans a few lengths (random batches: ~55)
    assert [b.tolist() for b in batches] != [b.tolist() for b in split.batches(32, np.random.default_rng(2))]
    ids, targets, mask = split.tensors(batches[0], torch.device("cpu"))
    assert ids.shape[1] == split.lengths[batches[0]].max() and mask.sum() == split.lengths[batches[0]].sum()


class _OneUnit(torch.nn.Module):
    """A language model that breaks the contract: one output per position, not two."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(4, 1)

    def forward(self, ids):
        return self.embed(ids)


def test_a_model_whose_outputs_have_the_wrong_shape_is_refused_not_trained():
    # [B, T, 1] would broadcast over the targets' two units in the loss and be thresholded in the scores.
    strings = ["01", "110", "1"]
    split = EncodedSplit.of(LANGUAGES["parity"], strings)
    message = r"^_OneUnit returned outputs of shape \(3, 3, 1\) for ids of shape \(3, 3\); a language model returns \[batch, length, 2\], here \(3, 3, 2\)$"
    with pytest.raises(ModelOutputError, match=message):
        train_recognizer(_OneUnit(), split, {"0": split}, LangTrainConfig(epochs=1, batch_size=8), seed=0)
    with pytest.raises(ModelOutputError, match=message):
        score(_OneUnit(), split, 8)
