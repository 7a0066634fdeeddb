"""Memory cores: episode-start resets, the MemLSTM / RelLSTM memories, sequence replay."""

from __future__ import annotations

import pytest
import torch

from recurbench.agents.cores import AttentiveLSTMCore, EpisodeMemLSTMCore, LSTMCore, make_core
from recurbench.errors import ConfigError


def _cores():
    torch.manual_seed(0)
    return {
        "lstm": make_core("lstm", 6, 8),
        "memlstm": make_core("memlstm", 6, 8, attention_size=4, memory_window=20),
        "rellstm": make_core("rellstm", 6, 8, attention_size=4, nu=2, rho=3),
        "episode_memlstm": EpisodeMemLSTMCore(6, 8, max_window=20, attention_size=4),
        "rnn": make_core("rnn", 6, 8),
        "exprnn": make_core("exprnn", 6, 8),
        "memrnn": make_core("memrnn", 6, 8, attention_size=4, memory_window=20, nonlinearity="modrelu"),
        "relrnn": make_core("relrnn", 6, 8, attention_size=4, nu=2, rho=3),
    }


NAMES = ["lstm", "memlstm", "rellstm", "episode_memlstm", "rnn", "exprnn", "memrnn", "relrnn"]


@pytest.mark.parametrize("name", NAMES)
def test_episode_start_clears_only_the_starting_rows(name):
    core = _cores()[name]
    B, x = 3, torch.randn(12, 3, 6)
    state = core.initial_state(B)
    no_start = torch.zeros(B)
    for t in range(7):
        _, state = core.step(x[t], state, no_start)
    starts = torch.tensor([0.0, 1.0, 0.0])
    out, after = core.step(x[7], state, starts)
    fresh_out, fresh = core.step(x[7, 1:2], core.initial_state(1), torch.zeros(1))
    cont_out, _ = core.step(x[7], state, no_start)
    torch.testing.assert_close(out[1:2], fresh_out)  # row 1 behaves as a brand-new episode
    torch.testing.assert_close(out[[0, 2]], cont_out[[0, 2]])  # the others are untouched
    for a, b in zip(after, fresh, strict=True):
        torch.testing.assert_close(a[1:2], b)


@pytest.mark.parametrize("name", NAMES)
def test_forward_sequence_equals_stepping_with_resets(name):
    core = _cores()[name]
    T, B = 10, 4
    x = torch.randn(T, B, 6)
    starts = (torch.rand(T, B) < 0.2).float()
    state0 = core.initial_state(B)
    for _ in range(3):
        _, state0 = core.step(torch.randn(B, 6), state0, torch.zeros(B))
    outs, state = [], state0
    for t in range(T):
        o, state = core.step(x[t], state, starts[t])
        outs.append(o)
    seq_out, seq_state = core.forward_sequence(x, state0, starts)
    torch.testing.assert_close(seq_out, torch.stack(outs))
    for a, b in zip(seq_state, state, strict=True):
        torch.testing.assert_close(a, b)


def test_memlstm_attends_over_every_state_since_the_episode_started():
    core = _cores()["memlstm"]
    assert isinstance(core, AttentiveLSTMCore) and core.nu == 20 and core.rho == 0
    state = core.initial_state(2)
    for t in range(9):
        _, state = core.step(torch.randn(2, 6), state, torch.tensor([0.0, 1.0 if t == 5 else 0.0]))
    valid = state[7]
    # h_t is stored at step t+1: env 0 holds h_1..h_8; env 1 restarted at t=5 and holds h_1..h_3
    assert valid.sum(1).tolist() == [8, 3]


def test_episode_memlstm_is_the_fixed_window_memlstm_with_a_memory_that_grows_and_shrinks():
    """Same parameters, same inputs and episode starts: the growing core gives the fixed window's
    outputs and memory (its slots beyond the ones it holds are the fixed core's empty ones), through
    growth (16 -> 32 -> the cap 40), a wrapping window (episodes past 40 steps) and a shrink after
    every row restarted."""
    torch.manual_seed(0)
    fixed = make_core("memlstm", 6, 8, attention_size=4, memory_window=40)
    growing = EpisodeMemLSTMCore(6, 8, max_window=40, attention_size=4)
    growing.load_state_dict(fixed.state_dict())
    T, B = 110, 3
    x = torch.randn(T, B, 6)
    starts = torch.zeros(T, B)
    starts[0] = 1.0
    starts[30, 1] = starts[75, 2] = 1.0  # row 0 runs 110 steps (wraps at 40); the others restart
    starts[100] = 1.0  # every row restarts: the memory can shrink to 16 slots again
    a, b = fixed.initial_state(B), growing.initial_state(B)
    widths = []
    for t in range(T):
        out_a, a = fixed.step(x[t], a, starts[t])
        out_b, b = growing.step(x[t], b, starts[t])
        widths.append(b[4].shape[1])
        torch.testing.assert_close(out_b, out_a)
        for ta, tb in zip(a[:4], b[:4], strict=True):  # h, c, s, steps
            torch.testing.assert_close(tb, ta)
        S = widths[-1]
        for ta, tb in zip(a[4:], b[4:], strict=True):  # keys, values, scores, valid
            torch.testing.assert_close(tb, ta[:, :S])
            assert not ta[:, S:].any()  # what the growing core does not hold is empty in the fixed one
        if t == 99:
            assert b[7][0].sum() == 40 and b[3][0] == 100  # row 0's window wrapped: its last 40 states
    assert widths[0] == 16 and 32 in widths and max(widths) == 40 and widths[-1] == 16


def test_rellstm_memory_is_bounded_and_keeps_stored_hidden_states():
    core = _cores()["rellstm"]
    state = core.initial_state(1)
    seen = []
    for _ in range(15):
        seen.append(state[0].clone())
        _, state = core.step(torch.randn(1, 6), state, torch.zeros(1))
    h, c, s, steps, keys, values, scores, valid = state
    assert valid.sum() == 5 and steps.item() == 15
    stored = values[0][valid[0] > 0]
    assert all(any(torch.equal(v, h_i[0]) for h_i in seen) for v in stored)  # memory holds past h's
    torch.testing.assert_close(keys, core.key(values))  # cached keys are U h_i
    assert (scores[0, :2] > 0).all()  # buffer members accumulate attention


def test_unknown_core_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown memory core 'gru'"):
        make_core("gru", 4, 4)


def test_lstm_core_is_an_lstm():
    core = LSTMCore(3, 5)
    x = torch.randn(4, 2, 3)
    out, _ = core.forward_sequence(x, core.initial_state(2), torch.zeros(4, 2))
    ref = torch.nn.LSTM(3, 5)
    ref.load_state_dict({k + "_l0": v for k, v in core.lstm.state_dict().items()})
    torch.testing.assert_close(out, ref(x)[0])
