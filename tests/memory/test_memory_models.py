"""The sequence model wraps the agents' cores: its outputs are the core stepped as the agents step
it (acting: ``core.step``; training replay: ``core.forward_sequence``), on every path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recurbench.agents.cores import AttentiveLSTMCore, LSTMCore, make_core
from recurbench.errors import ConfigError
from recurbench.memory.models import MemorySequenceModel, SequenceModelConfig, build_model
from recurbench.memory.tasks import make_task
from recurbench.memory.training import sequence_loss

CORES = ["lstm", "memlstm", "rellstm"]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _model(core: str, T: int = 6) -> tuple[MemorySequenceModel, torch.Tensor]:
    task = make_task("denoise", T, copy_length=3, labels=4)
    torch.manual_seed(0)
    model = build_model(task, SequenceModelConfig(core, hidden_size=12, attention_size=6, nu=2, rho=3))
    return model, torch.as_tensor(task.sample(4, np.random.default_rng(0)).inputs)


def _agent_logits(model: MemorySequenceModel, tokens: torch.Tensor) -> torch.Tensor:
    """What an agent's policy does with the same core: features -> core.step per step, with the
    episode starting at t = 0 -- from a state left over by an earlier episode, which the reset clears."""
    core = model.core
    B, L = tokens.shape
    x = model.embed(tokens.t())  # [L, B, F]
    dirty = core.initial_state(B)
    for _ in range(3):  # an earlier episode
        _, dirty = core.step(torch.randn(B, x.shape[-1]), dirty, torch.zeros(B))
    starts = torch.zeros(L, B)
    starts[0] = 1.0
    outputs, state = [], dirty
    for t in range(L):
        out, state = core.step(x[t], state, starts[t])
        outputs.append(out)
    replay, _ = core.forward_sequence(x, dirty, starts)
    torch.testing.assert_close(replay, torch.stack(outputs), rtol=0, atol=0)  # the replay path agrees too
    return model.head(torch.stack(outputs, dim=1))


@pytest.mark.parametrize("core", CORES)
def test_outputs_equal_the_agents_stepping(core):
    model, tokens = _model(core)
    expected = _agent_logits(model, tokens)
    torch.testing.assert_close(model(tokens, fast=False), expected, rtol=0, atol=0)  # the step loop: exact
    torch.testing.assert_close(model(tokens), expected, rtol=1e-5, atol=1e-6)  # the fast path (fused LSTM)
    logits, hidden = model.hidden_states(tokens)
    exact = core != "memlstm"  # MemLSTM's hidden states come from its append-only history
    torch.testing.assert_close(logits, expected, rtol=0 if exact else 1e-5, atol=0 if exact else 1e-6)
    assert len(hidden) == tokens.shape[1] and hidden[0].shape == (4, 12)


def test_memlstm_history_gives_the_step_loops_hidden_state_gradients():
    # what the gradient recorder takes: dL/dh_t for every t, with h_t as the graph holds it
    model, tokens = _model("memlstm")
    targets = torch.randint(0, 6, tokens.shape)
    logits, hidden = model.hidden_states(tokens)
    history = torch.autograd.grad(sequence_loss(logits, targets), hidden)
    stepped = model.step_outputs(tokens)
    loop = torch.autograd.grad(sequence_loss(model.head(torch.stack(stepped, dim=1)), targets), stepped)
    for t, (a, b) in enumerate(zip(history, loop, strict=True)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7, msg=f"t={t}")


def test_the_core_is_the_agents_own_class_and_builder():
    for core, cls in [("lstm", LSTMCore), ("memlstm", AttentiveLSTMCore), ("rellstm", AttentiveLSTMCore)]:
        model, _ = _model(core)
        assert type(model.core) is cls and type(model.core) is type(make_core(core, 4, 4))
    rel, _ = _model("rellstm")
    assert (rel.core.nu, rel.core.rho) == (2, 3)
    mem, _ = _model("memlstm", T=6)
    assert (mem.core.nu, mem.core.rho) == (6 + 2 * 3, 0)  # MemLSTM: every state of the L-step sequence


@pytest.mark.parametrize(("core", "path"), [("lstm", "fast"), ("memlstm", "history"), ("memlstm", "fast"),
                                           ("rellstm", "fast"), ("memrnn", "fast"), ("relrnn", "fast")])
def test_fast_path_gives_the_step_loops_gradients(core, path):
    # lstm: nn.LSTM's fused kernel; memlstm history: the append-only history (episode_outputs); the
    # attentive cores' fast path: the whole-sequence function (float64 checks in tests/kernels)
    model, tokens = _model(core)
    targets = torch.randint(0, 6, tokens.shape)
    grads = []
    for chosen in (path, "step"):
        model.zero_grad()
        sequence_loss(model(tokens, path=chosen), targets).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-6, msg=name)
    assert not any("shell" in n for n, _ in model.named_parameters())  # the nn.LSTM template adds nothing


def test_memlstm_takes_the_history_only_when_it_keeps_the_whole_sequence(monkeypatch):
    model, tokens = _model("memlstm")
    calls = []
    real = model.core.episode_outputs
    monkeypatch.setattr(model.core, "episode_outputs", lambda x: calls.append(x.shape) or real(x))
    model(tokens, path="history")
    model.hidden_states(tokens)
    assert calls == [(tokens.shape[1], tokens.shape[0], model.core.input_size)] * 2
    # a window shorter than the sequence slides: the history would be wrong, so the step loop runs
    task = make_task("denoise", 6, copy_length=3, labels=4)
    torch.manual_seed(0)
    short = build_model(task, SequenceModelConfig("memlstm", hidden_size=12, attention_size=6, memory_window=5))
    assert not short.core.keeps_whole_episode(tokens.shape[1])
    torch.testing.assert_close(short(tokens, path="history"), short(tokens, fast=False), rtol=0, atol=0)
    torch.testing.assert_close(short(tokens), short(tokens, fast=False))  # the sliding window, screened
    with pytest.raises(ValueError, match=r"a 12-step episode leaves this memory \(nu=5, rho=0\)"):
        short.core.episode_outputs(short.embed(tokens.t()))


def test_a_compiled_path_for_a_core_whose_state_changes_shape_is_refused(monkeypatch):
    # SAB's compiled cell recompiled at every stored state until dynamo's limit sent it to eager,
    # with two dozen warnings: asked for explicitly, it is refused before anything is compiled.
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("torch.compile was called"))
    task = make_task("copy", 5)
    model = build_model(task, SequenceModelConfig("sab", hidden_size=12, attention_size=6, topk=2))
    tokens = torch.as_tensor(task.sample(2, np.random.default_rng(0)).inputs)
    with pytest.raises(ValueError, match=r"^MemorySequenceModel: the sab core has no compiled path: its state "
                                         r"changes shape from step to step"):
        model(tokens, path="compiled")


def test_compiled_cell_path_steps_like_the_core(monkeypatch):
    # The compiled path's composition (reset, then cell) checked with dynamo's tracing only: inductor's
    # code generation takes a minute, its numerics are torch's business.
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="eager", **kw))
    torch._dynamo.reset()
    model, tokens = _model("rellstm")
    expected = _agent_logits(model, tokens)
    torch.testing.assert_close(model(tokens, path="compiled"), expected, rtol=1e-6, atol=1e-6)
    assert model._compiled_cell is not None
    torch._dynamo.reset()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"nu": 0}, r"model\.nu: the short-term buffer holds at least the last state \(nu >= 1\), got 0"),
        ({"rho": -1}, r"model\.rho: the relevant set cannot have a negative size \(rho >= 0\), got -1"),
        ({"core": "gru"}, r"model\.core: unknown memory core 'gru'"),
        ({"hidden_size": 0}, r"model\.hidden_size: must be at least 1, got 0"),
        ({"core": "rnn", "nonlinearity": "softsign"}, r"model\.nonlinearity: unknown non-linearity 'softsign'"),
        ({"core": "rnn", "recurrent_init": "orthogonal"}, r"model\.recurrent_init: unknown initialisation 'orthogonal'"),
        ({"core": "exprnn", "recurrent_init": "xavier"},
         r"model\.recurrent_init: this matrix stays orthogonal through training, so it needs an orthogonal start"),
        ({"core": "rnn", "input_init": "glorot"}, r"model\.input_init: unknown initialisation 'glorot'"),
        ({"core": "sab", "topk": 0}, r"model\.topk: must be at least 1, got 0"),
    ],
)
def test_bad_model_settings_name_the_culprit(changes, message):
    config = SequenceModelConfig(**{"core": "rellstm", **changes})
    with pytest.raises(ConfigError, match=message):
        config.check()
    with pytest.raises(ConfigError, match=message):
        build_model(make_task("copy", 5), config)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"core": "rnn", "input_init": "henaff"},
         r"model\.input_init: 'henaff' makes a square orthogonal matrix, but this matrix is 16 x 10"),
        ({"core": "sab", "topk": 20}, r"model\.topk: SAB selects 20 stored states, but a sequence of 25 steps stores "
                                      r"at most 12 \(memory_stride 2\)"),
        ({"core": "sab", "memory_stride": 30}, r"model\.memory_stride: SAB stores every 30-th state, but a sequence "
                                               r"has only 25 steps"),
        ({"core": "sab", "truncate": 26}, r"model\.truncate: SAB truncates backpropagation every 26 steps"),
    ],
)
def test_settings_that_cannot_fit_the_task_are_refused_before_training(changes, message):
    # copy at T = 5: 25 steps, 10 input symbols; the check runs when the model is built, before any update
    config = SequenceModelConfig(**{"hidden_size": 16, **changes})
    config.check()  # each setting is fine on its own
    with pytest.raises(ConfigError, match=message):
        build_model(make_task("copy", 5), config)
