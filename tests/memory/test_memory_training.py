"""Losses, accuracy and the gradient-norm recorder against hand computations; the kappa variants;
determinism of a training run; attention's gradient paths at initialisation (App. C); stopping when
solved; the orthogonal parameters' own learning rate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from recurbench.errors import ConfigError
from recurbench.memory import training
from recurbench.memory.models import SequenceModelConfig, build_model
from recurbench.memory.tasks import make_task
from recurbench.memory.training import (
    GradientRecord,
    MemoryTrainConfig,
    SolveCheck,
    gradient_norms,
    kappa_variants,
    make_optimizer,
    record_gradients,
    scored_accuracy,
    scored_loss,
    sequence_loss,
    train_memory_task,
)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_gradient_norms_match_a_hand_computation():
    # h_0 = x, h_t = h_{t-1} W (t = 1..5), loss = <G, h_5> + <K, h_2> (a skip path, as attention gives).
    # By hand: dL/dh_5 = G; dL/dh_t = dL/dh_{t+1} W' (+ K at t = 2), i.e. G (W')^(5-t) (+ K (W')^(2-t) for t <= 2).
    rng = np.random.default_rng(0)
    W, G, K, x = (rng.standard_normal(s) for s in [(3, 3), (2, 3), (2, 3), (2, 3)])
    hs = [torch.tensor(x, requires_grad=True)]
    for _ in range(5):
        hs.append(hs[-1] @ torch.tensor(W))
    unused = torch.zeros(2, 3, requires_grad=True)  # no path to the loss: norm 0
    loss = (torch.tensor(G) * hs[5]).sum() + (torch.tensor(K) * hs[2]).sum()
    expected = []
    for t in range(6):
        g = G @ np.linalg.matrix_power(W.T, 5 - t)
        if t <= 2:
            g = g + K @ np.linalg.matrix_power(W.T, 2 - t)
        expected.append(np.sqrt((g**2).sum()))
    norms = gradient_norms(loss, [*hs, unused])
    np.testing.assert_allclose(norms[:6], expected, rtol=1e-10)
    assert norms[6] == 0.0
    assert hs[0].grad is None  # parameter (leaf) gradients are left untouched


def test_a_tiny_float32_gradient_has_its_norm_not_zero():
    # An LSTM's gradient at T = 100 falls below 1e-22 within 15 steps of the end: its float32 norm was 0.
    h = torch.zeros(10, 128, requires_grad=True)  # float32, as the models' states
    for scale in (1e-23, 1e-30, 1e-37):
        (norm,) = gradient_norms((h * scale).sum(), [h])
        np.testing.assert_allclose(norm, np.float64(np.float32(scale)) * np.sqrt(1280), rtol=1e-6)


@pytest.mark.parametrize("core", ["lstm", "rellstm"])
def test_recorded_norms_equal_retain_grad_on_the_step_outputs(core):
    task = make_task("copy", 4, copy_length=3, labels=4)
    torch.manual_seed(0)
    model = build_model(task, SequenceModelConfig(core, hidden_size=8, attention_size=4, nu=2, rho=2))
    x, y = (torch.as_tensor(a) for a in task.sample(5, np.random.default_rng(0)))
    recorded = record_gradients(model, task, x, y)
    outputs = model.step_outputs(x)
    for h in outputs:
        h.retain_grad()
    scored_loss(model.head(torch.stack(outputs, dim=1)), y, task.scored_from).backward()
    np.testing.assert_allclose(recorded, [float(h.grad.norm()) for h in outputs], rtol=1e-6)
    assert len(recorded) == task.seq_len and (recorded > 0).all()


def test_losses_and_accuracy_by_hand():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((2, 4, 3))
    targets = np.array([[0, 0, 1, 2], [0, 0, 2, 2]])
    nll = -(logits - np.log(np.exp(logits).sum(-1, keepdims=True)))  # [B, L, C]
    ce = np.take_along_axis(nll, targets[..., None], -1)[..., 0]  # [B, L]
    lt, tt = torch.tensor(logits), torch.tensor(targets)
    # Training loss: per-step batch mean, summed over the L = 4 steps, over L.
    assert float(sequence_loss(lt, tt)) == pytest.approx(ce.mean(axis=0).sum() / 4)
    # L2: the same over the scored steps 2 and 3 only, still over L.
    assert float(scored_loss(lt, tt, 2)) == pytest.approx(ce[:, 2:].mean(axis=0).sum() / 4)
    hits = logits[:, 2:].argmax(-1) == targets[:, 2:]
    assert scored_accuracy(lt, tt, 2) == pytest.approx(hits.mean())


def test_attention_carries_gradient_to_the_data_steps_at_initialisation():
    # Kerg et al. App. C: with memory attention the data steps have direct paths to the loss; through an
    # LSTM's recurrence alone the gradient decays over the T steps in between.
    task = make_task("copy", 60)
    x, y = (torch.as_tensor(a) for a in task.sample(10, np.random.default_rng(0)))
    ratio = {}
    for core in ("lstm", "memlstm", "rellstm"):
        torch.manual_seed(0)
        g = record_gradients(build_model(task, SequenceModelConfig(core)), task, x, y)
        ratio[core] = g[: task.copy_length].mean() / g[task.scored_from:].mean()
    assert ratio["lstm"] < 1e-8
    assert ratio["memlstm"] > 1e-3 and ratio["rellstm"] > 1e-3


def test_gradient_ratio_is_the_first_step_over_step_T():
    record = GradientRecord(init=[0.5, 1.0, 4.0, 8.0], final=[0.0, 2.0, 0.0, 1.0], first_steps=2)
    assert record.ratio("init", 3) == 0.125  # t = 1 over t = 3, 1-based
    assert record.ratio("final", 2) == 0.0  # the first step's norm underflowed
    assert math.isnan(record.ratio("final", 3))  # nothing reached step T
    with pytest.raises(ValueError, match=r"T must be in \[1, 4\]"):
        record.ratio("init", 5)


def test_kappa_variants_hold_one_of_nu_and_rho():
    base = SequenceModelConfig("rellstm", nu=10, rho=4)
    assert [(c.nu, c.rho, c.kappa) for c in kappa_variants(base, [11, 20])] == [(10, 1, 11), (10, 10, 20)]
    assert [(c.nu, c.rho) for c in kappa_variants(base, [5, 9], fixed="rho")] == [(1, 4), (5, 4)]
    assert all(c.core == "rellstm" for c in kappa_variants(SequenceModelConfig("lstm"), [20]))
    with pytest.raises(ConfigError, match=r"kappa\.kappas\.1: kappa 9 with nu = 10 leaves model\.rho: .* got -1"):
        kappa_variants(base, [12, 9])
    with pytest.raises(ConfigError, match=r"kappa\.kappas\.0: kappa 4 with rho = 4 leaves model\.nu: .* got 0"):
        kappa_variants(base, [4], fixed="rho")


def _tiny(seed: int, **changes):
    task = make_task("copy", 3, copy_length=2, labels=4)
    config = MemoryTrainConfig(**{"updates": 12, "batch_size": 8, "learning_rate": 1e-2, "log_every": 4,
                                  "eval_batches": 2, **changes})
    return train_memory_task(task, SequenceModelConfig("rellstm", hidden_size=8, attention_size=4, nu=2, rho=1),
                             config, seed=seed)


def test_a_seed_fixes_a_training_run():
    a, b, c = _tiny(0), _tiny(0), _tiny(1)
    assert [(p.update, p.loss, p.accuracy) for p in a.curve] == [(p.update, p.loss, p.accuracy) for p in b.curve]
    assert a.gradients.init == b.gradients.init and a.gradients.final == b.gradients.final
    assert a.accuracy == b.accuracy
    assert [p.loss for p in a.curve] != [p.loss for p in c.curve]
    assert [p.update for p in a.curve] == [4, 8, 12]
    assert len(a.gradients.init) == 7 and a.gradients.init != a.gradients.final  # L = 7 steps, trained


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"optimizer": "sgd"}, r"training\.optimizer: unknown optimizer 'sgd'; known: adam, rmsprop"),
        ({"updates": 0}, r"training\.updates: must be at least 1, got 0"),
        ({"learning_rate": 0.0}, r"training\.learning_rate: must be a positive number"),
        ({"orth_learning_rate": -1e-5}, r"training\.orth_learning_rate: must be a positive number"),
        ({"eval_every": 0}, r"training\.eval_every: must be at least 1"),
        ({"solve_threshold": 1.5}, r"training\.solve_threshold: an accuracy in \(0, 1\], got 1.5"),
    ],
)
def test_bad_training_settings_fail_before_training(changes, message):
    with pytest.raises(ConfigError, match=message):
        _tiny(0, **changes)


def test_sweep_kappa_trains_one_rellstm_per_kappa():
    from recurbench.memory.training import sweep_kappa

    task = make_task("copy", 3, copy_length=2, labels=4)
    config = MemoryTrainConfig(updates=3, batch_size=4, log_every=3, eval_batches=1)
    points = sweep_kappa(task, SequenceModelConfig("rellstm", hidden_size=8, attention_size=4, nu=1, rho=0),
                         config, [1, 3], seed=0)
    assert [(p.kappa, p.nu, p.rho) for p in points] == [(1, 1, 0), (3, 1, 2)]
    assert all(0 <= p.accuracy <= 1 and p.grad_first_init > 0 and p.grad_first_final > 0 for p in points)


@pytest.mark.parametrize("core", ["lstm", "memlstm", "rellstm"])
def test_each_core_learns_a_short_copy_task(core):
    # A learning signal for the suite's whole training path (task, model, loss, clip, Adam, scoring):
    # copy 3 symbols from 4 over a delay of 5. Chance is 0.25 at the scored steps; 400 updates bring
    # each core to 0.56-0.74 held out (seed 0), well clear of it. A broken target shift, loss mask or
    # scored-step offset leaves the accuracy at chance.
    task = make_task("copy", 5, copy_length=3, labels=4)
    model = SequenceModelConfig(core, hidden_size=32, attention_size=16, nu=3, rho=3)
    result = train_memory_task(task, model, MemoryTrainConfig(updates=400, batch_size=32, learning_rate=1e-2,
                                                              log_every=80, eval_batches=5), seed=0)
    assert result.accuracy >= 0.45
    first, last = result.curve[0], result.curve[-1]
    assert last.loss < first.loss and last.accuracy > first.accuracy + 0.2


# ---------------------------------------------------------------------------------- stop when solved


def test_solved_means_two_consecutive_evaluations_at_the_threshold():
    check = SolveCheck(0.99)
    outcomes = [check.record(u, a) for u, a in [(10, 0.995), (20, 0.5), (30, 0.99), (40, 0.98), (50, 1.0), (60, 0.99)]]
    assert outcomes == [False, False, False, False, False, True]  # 0.995 then 0.5, 0.99 then 0.98: not solved
    assert check.solved_at == 60


def test_a_run_stops_at_the_second_of_two_solved_evaluations(monkeypatch):
    # The held-out evaluations scripted (dependency injection through the module's evaluate): solved at
    # the 5th evaluation (update 25), the lone 0.995 at the 2nd does not count. The last value is the
    # final held-out accuracy, still measured after the stop.
    scripted = iter([0.5, 0.995, 0.9, 0.99, 1.0, 0.97])
    calls = []

    def scripted_evaluate(model, task, batches, batch_size, rng, device):
        calls.append(batches)
        return next(scripted)

    monkeypatch.setattr(training, "evaluate", scripted_evaluate)
    seen = []
    task = make_task("copy", 3, copy_length=2, labels=4)
    result = train_memory_task(task, SequenceModelConfig("lstm", hidden_size=8),
                               MemoryTrainConfig(updates=100, batch_size=4, log_every=10, eval_batches=3, eval_every=5),
                               seed=0, on_eval=lambda u, a: seen.append((u, a)))
    assert result.solved_at == 25 and result.updates == 25
    assert result.evaluations == seen == [(5, 0.5), (10, 0.995), (15, 0.9), (20, 0.99), (25, 1.0)]
    assert [p.update for p in result.curve] == [10, 20, 25]  # the last window closes at the stop
    assert result.accuracy == 0.97 and calls == [3] * 6


def test_an_unsolved_run_goes_to_the_cap_and_ends_as_without_evaluations():
    # Evaluations draw from a stream of their own: a run that never solves is the run without them.
    evaluated, plain = _tiny(0, eval_every=4), _tiny(0)
    assert evaluated.solved_at is None and evaluated.updates == plain.updates == 12
    assert [u for u, _ in evaluated.evaluations] == [4, 8, 12] and plain.evaluations == []
    assert [(p.update, p.loss) for p in evaluated.curve] == [(p.update, p.loss) for p in plain.curve]
    assert evaluated.accuracy == plain.accuracy and evaluated.gradients.final == plain.gradients.final


def test_an_lstm_solves_a_tiny_copy_task_and_stops():
    # Copy 2 symbols from 4 over a delay of 3: an LSTM solves it in a few hundred updates (seed 0: 250).
    task = make_task("copy", 3, copy_length=2, labels=4)
    result = train_memory_task(task, SequenceModelConfig("lstm", hidden_size=32),
                               MemoryTrainConfig(updates=1000, batch_size=32, learning_rate=0.03, log_every=50,
                                                 eval_batches=4, eval_every=25), seed=0)
    assert result.solved_at is not None and result.solved_at < 1000
    accuracies = [a for _, a in result.evaluations]
    assert [u for u, _ in result.evaluations] == list(range(25, result.solved_at + 1, 25))
    assert min(accuracies[-2:]) >= 0.99
    assert not any(min(a, b) >= 0.99 for a, b in zip(accuracies[:-2], accuracies[1:-1], strict=True))
    assert result.curve[-1].update == result.updates == result.solved_at
    assert result.accuracy >= 0.95  # the final held-out batches, after the stop


# ------------------------------------------------------------------------ orthogonal parameters' rate


def test_orthogonal_parameters_train_at_their_own_rate():
    # Adam's first step moves every parameter by its group's rate (m / sqrt(v) = sign of the gradient).
    task = make_task("copy", 3, copy_length=2, labels=4)
    torch.manual_seed(0)
    model = build_model(task, SequenceModelConfig("exprnn", hidden_size=8))
    orthogonal = model.core.orthogonal_parameters()
    assert orthogonal
    optimizer = make_optimizer(model, MemoryTrainConfig(learning_rate=1e-3, orth_learning_rate=1e-5))
    assert [g["lr"] for g in optimizer.param_groups] == [1e-3, 1e-5]
    assert {id(p) for p in optimizer.param_groups[1]["params"]} == {id(p) for p in orthogonal}
    n_trainable = sum(1 for p in model.parameters() if p.requires_grad)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == n_trainable
    before = [p.detach().clone() for p in model.parameters()]
    x, y = (torch.as_tensor(a) for a in task.sample(4, np.random.default_rng(0)))
    sequence_loss(model(x), y).backward()
    optimizer.step()
    special = {id(p) for p in orthogonal}
    steps = {id(p): float((p.detach() - b).abs().max()) for p, b in zip(model.parameters(), before, strict=True)}
    assert all(steps[i] == pytest.approx(1e-5, rel=1e-2) for i in special)
    assert max(s for i, s in steps.items() if i not in special) == pytest.approx(1e-3, rel=1e-2)
    # Without orthogonal parameters (or without the setting), one group at the rate.
    assert len(make_optimizer(build_model(task, SequenceModelConfig("lstm", hidden_size=8)),
                              MemoryTrainConfig(orth_learning_rate=1e-5)).param_groups) == 1
    assert [g["lr"] for g in make_optimizer(model, MemoryTrainConfig(learning_rate=1e-3)).param_groups] == [1e-3, 1e-3]
