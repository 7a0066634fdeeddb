"""The conformance kit: every built-in passes it (cores, forecasters, language models, each registry
read at collection, so a model added later is checked too), and a class that breaks the contract is
reported by its first failing property, in one line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from recurbench.agents.cores import CORES, LSTMCore, State
from recurbench.errors import ConfigError
from recurbench.forecasters.models import ARCHITECTURES
from recurbench.langs.models import LANG_MODELS, LangModelConfig, Recognizer
from recurbench.testing import ContractError, check_core, check_forecaster, check_language_model, check_plugin

CORE_PROPERTIES = ["builds", "initial_state", "shapes", "state_carries_over", "episode_start_resets",
                   "acting_training_predict", "rows_independent", "finite_gradients", "deterministic",
                   "serialisation", "orthogonal_parameters"]


@pytest.mark.parametrize("name", list(CORES))
def test_every_core_keeps_the_contract(name):
    assert check_core(name) == CORE_PROPERTIES


@pytest.mark.parametrize("name", [n for n in CORES if CORES[n].build_agent is not None])
def test_every_agent_variant_keeps_the_contract(name):
    assert check_core(name, agent=True) == CORE_PROPERTIES


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_every_forecaster_keeps_the_contract(name):
    assert check_forecaster(name) == ["builds", "shapes", "no_state_between_calls", "rows_independent",
                                      "finite_gradients", "deterministic", "serialisation"]


@pytest.mark.parametrize("name", list(LANG_MODELS))
def test_every_language_model_keeps_the_contract(name):
    assert check_language_model(name) == ["builds", "shapes", "no_state_between_calls", "causal",
                                          "rows_independent", "finite_gradients", "deterministic", "serialisation"]


class ForgetfulResetLSTM(LSTMCore):
    """Ignores episode starts: its memory leaks from one episode into the next."""

    def reset(self, state: State, episode_starts: torch.Tensor) -> State:
        return state


class WrongWidthLSTM(LSTMCore):
    """Returns the state twice over: output [B, 2H]."""

    def cell(self, x, state):
        h, c = self.lstm(x, (state[0], state[1]))
        return torch.cat([h, h], dim=-1), (h, c)


class BatchMeanLSTM(LSTMCore):
    """Mixes rows: every row reads the batch's mean state."""

    def cell(self, x, state):
        h, c = self.lstm(x, (state[0].mean(0, keepdim=True).expand_as(state[0]), state[1]))
        return h, (h, c)


class StatelessLSTM(LSTMCore):
    """Returns the state it was given: every step starts from the initial state, nothing is carried over."""

    def cell(self, x, state):
        h, _ = self.lstm(x, (state[0], state[1]))
        return h, state


class ZeroStateLSTM(LSTMCore):
    """Returns a zeroed state: its memory is wiped at every step."""

    def cell(self, x, state):
        h, c = self.lstm(x, (state[0], state[1]))
        return h, (torch.zeros_like(h), torch.zeros_like(c))


class LayeredLSTM(LSTMCore):
    """Takes a setting of its own, ``layers``."""

    def __init__(self, input_size, hidden_size, *, layers: int = 1, gate_init: str = "pytorch"):
        super().__init__(input_size, hidden_size, gate_init=gate_init)
        self.layers = layers


def test_a_core_that_ignores_episode_starts_fails_on_that_property_in_one_line():
    with pytest.raises(ContractError) as info:
        check_core(ForgetfulResetLSTM)
    message = str(info.value)
    assert message.startswith("check_core(ForgetfulResetLSTM): episode_start_resets: rows after an episode "
                              "start and a fresh episode's first step differ by ")
    assert "\n" not in message


@pytest.mark.parametrize(("cls", "start"), [
    (WrongWidthLSTM, "check_core(WrongWidthLSTM): shapes: step returned output of shape (3, 16), expected (3, 8)"),
    (BatchMeanLSTM, "check_core(BatchMeanLSTM): episode_start_resets: "),
])
def test_the_first_failing_property_is_named(cls, start):
    with pytest.raises(ContractError, match="^" + start.replace("(", r"\(").replace(")", r"\)")):
        check_core(cls)


@pytest.mark.parametrize("cls", [StatelessLSTM, ZeroStateLSTM])
def test_a_core_whose_state_carries_nothing_over_fails_state_carries_over(cls):
    with pytest.raises(ContractError) as info:
        check_core(cls)
    assert str(info.value) == (f"check_core({cls.__name__}): state_carries_over: row 0's outputs at steps >= 1 do "
                               "not change when its input at step 0 does (the state carries nothing over)")


def test_a_misspelt_setting_of_a_core_class_fails_builds_naming_it_and_the_class():
    with pytest.raises(ContractError) as info:
        check_core(LayeredLSTM, settings={"layerz": 2})
    assert str(info.value) == ("check_core(LayeredLSTM): builds: unknown setting 'layerz' of LayeredLSTM; "
                               "its settings: layers, gate_init")
    # its own settings and the suites' shared core settings (which it does not name) are taken
    assert check_core(LayeredLSTM, settings={"layers": 2, "attention_size": 8, "nu": 2, "topk": 3}) == CORE_PROPERTIES


@pytest.mark.parametrize("name", ["nope", "nomodule:Cls"])
def test_a_name_of_no_model_raises_config_error_before_any_property(name):
    for check in (check_core, check_forecaster, check_language_model):
        with pytest.raises(ConfigError, match=repr(name)):
            check(name)


class PeekingRecognizer(Recognizer):
    """Reads the next position: not causal."""

    def encode(self, h):
        return h + torch.roll(h, -1, dims=1)


class ForgetsTheDeviceForecaster(nn.Module):
    """Returns the forecast with the horizon and the series swapped."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.linear = nn.Linear(cfg.seq_len, cfg.pred_len)

    def forward(self, x, x_mark, y_mark):
        return self.linear(x.transpose(1, 2))  # [B, C, P]: the axes the wrong way round


class CachedWindowForecaster(nn.Module):
    """Reads the window of its previous call (of the batch's shape) as its memory."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg, self.cache = cfg, None
        self.linear, self.memory = nn.Linear(cfg.n_features, cfg.n_features), nn.Linear(cfg.n_features, cfg.n_features)

    def forward(self, x, x_mark, y_mark):
        memory = self.cache if self.cache is not None and self.cache.shape == x.shape else x
        self.cache = x.detach()
        out = self.linear(x[:, -1:]) + self.memory(memory.mean(1, keepdim=True))
        return out.expand(-1, self.cfg.pred_len, -1)


class PreviousMeanForecaster(nn.Module):
    """Adds the previous batch's mean to its forecast."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg, self.previous = cfg, 0.0
        self.linear = nn.Linear(cfg.n_features, cfg.n_features)

    def forward(self, x, x_mark, y_mark):
        out = self.linear(x[:, -1:]).expand(-1, self.cfg.pred_len, -1) + self.previous
        self.previous = x.detach().mean()
        return out


@pytest.mark.parametrize("cls", [CachedWindowForecaster, PreviousMeanForecaster])
def test_a_forecaster_that_keeps_the_previous_call_fails_no_state_between_calls(cls):
    with pytest.raises(ContractError, match=rf"^check_forecaster\({cls.__name__}\): no_state_between_calls: a "
                                            r"window's forecast before and after another window's differ by "):
        check_forecaster(cls)


def test_a_language_model_that_reads_ahead_is_not_causal():
    with pytest.raises(ContractError, match=r"^check_language_model\(PeekingRecognizer\): causal: outputs at "
                                            r"positions < 5 when positions >= 5 change differ by "):
        check_language_model(PeekingRecognizer, cfg=LangModelConfig(d_model=8, n_heads=2, n_layers=1, d_ff=8))


def test_a_forecaster_of_the_wrong_shape_is_reported_with_both_shapes():
    with pytest.raises(ContractError) as info:
        check_forecaster(ForgetsTheDeviceForecaster)
    assert str(info.value) == ("check_forecaster(ForgetsTheDeviceForecaster): shapes: forward returned (3, 3, 6), "
                               "expected [B, pred_len, C] = (3, 6, 3)")


def test_check_plugin_runs_the_kit_of_each_kind_with_that_name():
    results = check_plugin("lstm")  # a memory core and a language model
    assert set(results) == {"memory core", "language model"}
    with pytest.raises(ContractError, match=r"check_plugin\('nope'\): no memory core, forecaster or language model"):
        check_plugin("nope")
