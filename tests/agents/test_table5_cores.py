"""Table 5's cores beyond the LSTMs: each one's defining property (Kerg et al. App. D; the fact sheet
``shared/reference/kerg_copy_denoise.md``, sections 3 and 7)."""

from __future__ import annotations

import math

import pytest
import torch

from recurbench.agents.cores import AttentiveLSTMCore, AttentiveRNNCore, SABCore, make_core
from recurbench.agents.recurrent_init import initialise, random_rotation, skew_log, skew_start
from recurbench.errors import ConfigError


def _orthogonality_error(w: torch.Tensor) -> float:
    return float((w @ w.T - torch.eye(w.shape[0], dtype=w.dtype)).abs().max())


@pytest.mark.parametrize("scheme", ["henaff", "cayley", "random", "identity"])
def test_orthogonal_schemes_start_orthogonal_and_are_expm_of_a_skew_matrix(scheme):
    g = torch.Generator().manual_seed(0)
    a = skew_start(scheme, 9, g)  # odd: a zero 1x1 block last
    torch.testing.assert_close(a, -a.T)
    w = torch.empty(9, 9, dtype=torch.float64)
    initialise(w, scheme, torch.Generator().manual_seed(0))
    assert _orthogonality_error(w) < 1e-12
    torch.testing.assert_close(w, torch.linalg.matrix_exp(a))


def test_henaff_angles_lie_in_minus_pi_to_zero_and_cayley_in_its_range():
    g = torch.Generator().manual_seed(1)
    a = skew_start("henaff", 64, g)
    s = a[torch.arange(0, 64, 2), torch.arange(1, 64, 2)]
    assert bool(((s > -math.pi) & (s < 0)).all())
    c = skew_start("cayley", 64, g)[torch.arange(0, 64, 2), torch.arange(1, 64, 2)]
    assert bool(((c <= 0) & (c >= -1.0 - 1e-12)).all())  # -sqrt((1 - cos u)/(1 + cos u)), u in [0, pi/2]


def test_skew_log_inverts_the_matrix_exponential():
    q = random_rotation(12, torch.Generator().manual_seed(2))
    assert abs(float(torch.linalg.det(q)) - 1) < 1e-10
    torch.testing.assert_close(torch.linalg.matrix_exp(skew_log(q)), q)


def _train(core, steps: int = 20) -> None:
    torch.manual_seed(0)
    opt = torch.optim.Adam(core.parameters(), lr=0.01)
    x = torch.randn(12, 4, 6)
    for _ in range(steps):
        opt.zero_grad()
        (core.sequence_outputs(x) - 0.5).pow(2).mean().backward()
        opt.step()


def test_orth_rnn_starts_orthogonal_and_is_free_after():
    core = make_core("rnn", 6, 16, nonlinearity="modrelu")
    assert _orthogonality_error(core.rnn.recurrent.weight.detach()) < 1e-5
    assert core.orthogonal_parameters() == []
    _train(core)
    assert _orthogonality_error(core.rnn.recurrent.weight.detach()) > 1e-2  # no constraint after the start


def test_exprnn_stays_orthogonal_through_training_and_names_its_orthogonal_parameter():
    core = make_core("exprnn", 6, 16, nonlinearity="modrelu")
    (orth,) = core.orthogonal_parameters()
    assert orth is core.rnn.recurrent.parametrizations.weight.original
    before = core.rnn.recurrent.weight.detach().clone()
    _train(core)
    after = core.rnn.recurrent.weight.detach()
    assert float((after - before).abs().max()) > 1e-2  # it trained
    assert _orthogonality_error(after) < 1e-5  # and stayed orthogonal


def test_modrelu_is_sign_times_relu_of_magnitude_plus_bias():
    core = make_core("rnn", 2, 4, nonlinearity="modrelu")
    phi = core.rnn.phi
    with torch.no_grad():
        phi.bias.copy_(torch.tensor([-0.5, 0.1, -2.0, 0.0]))
    z = torch.tensor([[1.0, -1.0, 1.0, -3.0]])
    torch.testing.assert_close(phi(z), torch.tensor([[0.5, -1.1, 0.0, -3.0]]))


def test_memrnn_and_relrnn_share_the_lstms_attention():
    # one attention implementation for both cell families: the same step, memory and sequence code
    for name in ("_attend_and_step", "_advance", "episode_outputs", "sequence_outputs", "prepare_replay"):
        assert getattr(AttentiveRNNCore, name) is getattr(AttentiveLSTMCore, name), name
    rel = make_core("relrnn", 6, 8, nu=3, rho=4, attention_size=5)
    mem = make_core("memrnn", 6, 8, memory_window=30, attention_size=5)
    assert (rel.nu, rel.rho, mem.nu, mem.rho) == (3, 4, 30, 0)
    state = rel.initial_state(2)
    assert state[4].shape == (2, 7, 5) and state[1].shape == (2, 0)  # nu + rho slots; an RNN has no cell state


def test_sab_selects_k_states_and_only_they_get_gradient():
    core = make_core("sab", 6, 8, topk=3, truncate=100, memory_stride=1, attention_size=5)
    assert isinstance(core, SABCore)
    e = torch.tensor([[0.3, 2.0, -1.0, 1.5, 0.9, 0.1]], requires_grad=True)
    w = core.sparse_weights(e)
    assert int((w > 0).sum()) == 3 and bool((w[0, [1, 3, 4]] > 0).all())
    torch.testing.assert_close(w.sum(), torch.tensor(1.0))
    (grad,) = torch.autograd.grad((w * torch.arange(6.0)).sum(), e)
    assert bool((grad[0, [0, 2, 5]] == 0).all()) and bool((grad[0, [1, 3, 4]] != 0).any())
    torch.testing.assert_close(w[0, [1, 3, 4]], torch.softmax(e[0, [1, 3, 4]], dim=0))  # a softmax over the selected
    ties = core.sparse_weights(torch.zeros(1, 6, requires_grad=True))  # alike states: still weights that sum to 1
    assert bool(torch.isfinite(ties).all()) and int((ties > 0).sum()) == 3
    few = core.sparse_weights(torch.tensor([[0.0, 1.0]]))  # no more stored states than k: all of them
    torch.testing.assert_close(few, torch.softmax(torch.tensor([[0.0, 1.0]]), dim=1))


def test_sab_truncation_cuts_the_recurrent_path_but_not_the_memory():
    torch.manual_seed(0)
    x = torch.randn(12, 2, 6, requires_grad=True)
    starts = torch.zeros(12, 2)
    starts[0] = 1.0

    def grad_of_last_wrt_first(core) -> torch.Tensor:
        out, _ = core.forward_sequence(x, core.initial_state(2), starts)
        (g,) = torch.autograd.grad(out[-1].sum(), x)
        return g[0]

    no_memory = make_core("sab", 6, 8, topk=2, truncate=4, memory_stride=100, attention_size=5)
    assert float(grad_of_last_wrt_first(no_memory).abs().max()) == 0.0  # truncated: nothing reaches step 0
    with_memory = make_core("sab", 6, 8, topk=2, truncate=4, memory_stride=1, attention_size=5)
    assert float(grad_of_last_wrt_first(with_memory).abs().max()) > 0.0  # through the stored states


def test_sab_is_refused_as_an_agent_core():
    with pytest.raises(ConfigError, match="memory core 'sab' cannot drive an agent: its memory grows"):
        make_core("sab", 6, 8, agent=True)


class _ReferenceGates(torch.nn.Module):
    """The reference code's LSTM gates (``LSTM.py``): four ``nn.Linear(H + I, H)`` over ``[h, x]``,
    each weight drawn by ``nn.init.xavier_normal_``, each bias left at ``nn.Linear``'s default."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.gates = torch.nn.ModuleList(torch.nn.Linear(input_size + hidden_size, hidden_size) for _ in range(4))
        for gate in self.gates:
            torch.nn.init.xavier_normal_(gate.weight)


@pytest.mark.parametrize("core", ["lstm", "memlstm", "rellstm", "sab"])
def test_xavier_gate_init_draws_the_reference_lstms_start(core):
    """``gate_init = xavier`` draws each gate's weight over ``[h, x]`` as the reference's Xavier-normal
    does and one bias per gate as its ``nn.Linear``; ``pytorch`` keeps ``nn.LSTMCell``'s, which differs."""
    hidden, inputs = 128, 10
    torch.manual_seed(0)
    cell = make_core(core, inputs, hidden, gate_init="xavier").lstm.requires_grad_(False)
    ours = torch.cat([cell.weight_hh, cell.weight_ih], dim=1).detach()  # [4H, H + I], the reference's [h, x] order
    reference = _ReferenceGates(inputs, hidden)
    theirs = torch.cat([g.weight for g in reference.gates]).detach()
    assert float(ours.std()) == pytest.approx(float(theirs.std()), rel=0.02)  # 141,312 draws each: ~0.3 %
    assert abs(float(ours.mean())) < 1e-3
    assert bool((cell.bias_hh == 0).all())  # one bias per gate, as the reference has
    theirs_bias = torch.cat([g.bias for g in reference.gates]).detach()
    assert float(cell.bias_ih.abs().max()) <= 1 / math.sqrt(hidden + inputs) and float(theirs_bias.abs().max()) <= 1 / math.sqrt(hidden + inputs)
    assert float(cell.bias_ih.std()) == pytest.approx(float(theirs_bias.std()), rel=0.15)  # 512 draws
    torch.manual_seed(0)
    default = make_core(core, inputs, hidden).lstm.requires_grad_(False)
    assert float(default.weight_hh.std()) == pytest.approx(1 / math.sqrt(3 * hidden), rel=0.02)  # U(-1/sqrt(H), 1/sqrt(H))
    assert float(default.weight_hh.std()) < 0.7 * float(theirs.std())


@pytest.mark.parametrize("core", ["lstm", "memlstm", "rellstm", "sab"])
def test_chrono_gate_init_spreads_the_units_memory_over_1_to_n_steps(core):
    """``chrono:N`` (Tallec & Ollivier 2018): with the input and forget gates' biases alone (zero input
    and state), a unit keeps ``f = sigmoid(b_f)`` of its cell each step and writes ``i = 1 - f`` (since
    ``b_i = -b_f``), so its memory decays over ``1 / (1 - f) = 1 + u`` steps, ``u ~ U(1, N - 1)``: from 2
    to N, spread evenly. The weights and the cell and output gates keep PyTorch's start."""
    hidden, longest = 512, 120
    torch.manual_seed(0)
    cell = make_core(core, 10, hidden, gate_init=f"chrono:{longest}").lstm.requires_grad_(False)
    torch.manual_seed(0)
    default = make_core(core, 10, hidden).lstm.requires_grad_(False)
    bias = cell.bias_ih + cell.bias_hh
    forget, write = torch.sigmoid(bias[hidden:2 * hidden]), torch.sigmoid(bias[:hidden])
    torch.testing.assert_close(write, 1 - forget)
    steps = 1 / (1 - forget.double())
    assert 2 <= float(steps.min()) and float(steps.max()) <= longest
    # Evenly spread: each quarter of [2, N] holds about a quarter of the 512 units (sd ~10).
    counts = torch.histc(steps, bins=4, min=2, max=longest)
    assert all(abs(float(c) - hidden / 4) < 50 for c in counts), counts
    torch.testing.assert_close(cell.weight_hh, default.weight_hh)
    torch.testing.assert_close(cell.bias_ih[2 * hidden:], default.bias_ih[2 * hidden:])


def test_an_unknown_gate_init_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^gate_init: unknown LSTM gate initialisation 'orthogonal'; known: pytorch, xavier, chrono:N$"):
        make_core("rellstm", 10, 16, gate_init="orthogonal")
    for bad in ("chrono:2", "chrono:", "chrono:ten"):
        with pytest.raises(ConfigError, match=rf"^gate_init: '{bad}': chrono:N needs N, the longest dependency in steps, a whole number of at least 3$"):
            make_core("lstm", 10, 16, gate_init=bad)
