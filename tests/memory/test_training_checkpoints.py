"""Checkpoints of a memory-task run: a run that dies after a checkpoint and is resumed from it ends
bit for bit as the run never interrupted (parameters, every logged value, the held-out scores, the
stop when solved), for every core; a checkpoint that does not fit the run is refused, naming why,
before anything is logged."""

from __future__ import annotations

import pytest
import torch

from recurbench.errors import ConfigError
from recurbench.memory import training
from recurbench.memory.models import SequenceModelConfig
from recurbench.memory.tasks import make_task
from recurbench.memory.training import (
    CheckpointMismatch,
    MemoryTrainConfig,
    TrainingState,
    resume_settings,
    train_memory_task,
)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


class Died(Exception):
    """Stands for a kill right after a checkpoint was written."""


def _record(task, network, config, *, die_at=None, resume=None, monkeypatch=None):
    """Train, recording what a run logs (every callback, in order), the checkpoints it writes (as
    bytes, as the suite stores them) and the model it trained; ``die_at``: stop right after the
    checkpoint at that update."""
    built = []
    original = training.build_model

    def keep(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(training, "build_model", keep)
    events, saved = [], {}

    def on_checkpoint(state):
        saved[state.update] = state.to_bytes()
        if state.update == die_at:
            raise Died

    try:
        result = train_memory_task(
            task, network, config, seed=3, on_log=lambda p: events.append(("log", p.update, p.loss, p.accuracy)),
            on_eval=lambda u, a: events.append(("eval", u, a)), on_checkpoint=on_checkpoint,
            resume=None if resume is None else TrainingState.from_bytes(resume),
            on_resume=lambda u: events.append(("resumed", u)))
    except Died:
        result = None
    return result, events, saved, built[-1]


def _same_run(resumed, full):
    """Every value both runs produced, compared exactly (no tolerance: bitwise on a CPU)."""
    (a, a_events, _, a_model), (b, b_events, _, b_model) = resumed, full
    assert [e for e in a_events if e[0] != "resumed"] == b_events
    assert a.accuracy == b.accuracy and a.train_accuracy == b.train_accuracy and a.final_loss == b.final_loss
    assert a.gradients.init == b.gradients.init and a.gradients.final == b.gradients.final
    assert a.updates == b.updates and a.solved_at == b.solved_at and a.evaluations == b.evaluations
    assert [(p.update, p.loss, p.accuracy) for p in a.curve] == [(p.update, p.loss, p.accuracy) for p in b.curve]
    a_state, b_state = a_model.state_dict(), b_model.state_dict()
    assert a_state.keys() == b_state.keys()
    assert all(torch.equal(a_state[k], b_state[k]) for k in a_state)


CORES = {  # tiny networks that fit a delay of 3 (L = 7 steps); each core's own optimiser where it has one
    "lstm": {}, "memlstm": {}, "rellstm": {}, "memrnn": {}, "relrnn": {"nonlinearity": "modrelu"},
    "rnn": {"nonlinearity": "modrelu"}, "exprnn": {"nonlinearity": "modrelu"},
    "sab": {"topk": 2, "truncate": 3, "memory_stride": 1},
}


@pytest.mark.parametrize("core", list(CORES))
def test_a_run_killed_after_a_checkpoint_and_resumed_ends_as_the_run_never_killed(core, monkeypatch):
    # A checkpoint every 6 updates and a log window of 4 (one is open at each checkpoint), evaluations
    # every 5; RMSprop with the orthogonal parameters' own rate for expRNN (two parameter groups).
    task = make_task("copy", 3, copy_length=2, labels=4)
    network = SequenceModelConfig(core, hidden_size=8, attention_size=4, nu=2, rho=1, **CORES[core])
    config = MemoryTrainConfig(updates=30, batch_size=4, learning_rate=1e-2, log_every=4, eval_batches=2,
                               eval_every=5, checkpoint_every=6, solve_threshold=1.0,
                               **({"optimizer": "rmsprop", "orth_learning_rate": 1e-3} if core == "exprnn" else {}))
    full = _record(task, network, config, monkeypatch=monkeypatch)
    assert sorted(full[2]) == [6, 12, 18, 24]  # while updates remain: none at the cap
    died = _record(task, network, config, die_at=18, monkeypatch=monkeypatch)
    assert died[0] is None and died[1] == [e for e in full[1] if e[1] <= 18]
    resumed = _record(task, network, config, resume=died[2][18], monkeypatch=monkeypatch)
    assert resumed[1][0] == ("resumed", 18)  # before the history is replayed
    _same_run(resumed, full)
    # The checkpoint the resumed run writes at 24 is the uninterrupted run's, the clock aside.
    a, b = TrainingState.from_bytes(resumed[2][24]), TrainingState.from_bytes(full[2][24])
    assert [(p.update, p.loss, p.accuracy) for p in a.curve] == [(p.update, p.loss, p.accuracy) for p in b.curve]
    assert (a.update, a.streams, a.evaluations, a.window, a.init_gradients) == (
        b.update, b.streams, b.evaluations, b.window, b.init_gradients)
    assert torch.equal(a.torch_rng, b.torch_rng) and all(torch.equal(a.model[k], b.model[k]) for k in b.model)
    assert str(a.optimizer) == str(b.optimizer)  # every moment, step count and group setting


def test_a_run_resumed_between_its_two_solved_evaluations_stops_where_the_uninterrupted_run_did(monkeypatch):
    # An LSTM solves copy 2 of 4 over a delay of 3 within a few hundred updates: the checkpoint at the
    # first of its two solved evaluations must carry that evaluation, or the resumed run would go on.
    task = make_task("copy", 3, copy_length=2, labels=4)
    network = SequenceModelConfig("lstm", hidden_size=32)
    config = MemoryTrainConfig(updates=1000, batch_size=32, learning_rate=0.03, log_every=50, eval_batches=4,
                               eval_every=25, checkpoint_every=25)
    full = _record(task, network, config, monkeypatch=monkeypatch)
    solved_at = full[0].solved_at
    assert solved_at is not None and solved_at < 1000 and full[0].updates == solved_at
    at = solved_at - 25
    assert full[0].evaluations[-2] == (at, pytest.approx(full[0].evaluations[-2][1])) and full[0].evaluations[-2][1] >= 0.99
    state = TrainingState.from_bytes(full[2][at])
    assert state.evaluations[-1][1] >= 0.99 and state.solved_at is None
    resumed = _record(task, network, config, resume=full[2][at], monkeypatch=monkeypatch)
    _same_run(resumed, full)
    assert resumed[0].solved_at == solved_at


def test_no_checkpoints_at_zero_and_a_negative_interval_is_refused(monkeypatch):
    task = make_task("copy", 3, copy_length=2, labels=4)
    network = SequenceModelConfig("lstm", hidden_size=8)
    _, _, saved, _ = _record(task, network, MemoryTrainConfig(updates=12, batch_size=4, log_every=4, eval_batches=1,
                                                              checkpoint_every=0), monkeypatch=monkeypatch)
    assert saved == {}
    with pytest.raises(ConfigError, match=r"^training\.checkpoint_every: must be at least 0 \(0: no checkpoints\), got -1"):
        MemoryTrainConfig(checkpoint_every=-1).check()


def test_a_checkpoint_at_the_papers_width_is_about_three_copies_of_the_parameters(monkeypatch):
    # Parameters and Adam's two moments (float32), plus a few kB of history: small enough to write
    # every 2000 updates into the run's artifacts.
    task = make_task("copy", 20, copy_length=10, labels=8)
    network = SequenceModelConfig("rellstm")
    config = MemoryTrainConfig(updates=4, batch_size=2, log_every=2, eval_batches=1, checkpoint_every=2)
    _, _, saved, model = _record(task, network, config, monkeypatch=monkeypatch)
    n_params = sum(p.numel() for p in model.parameters())
    assert 50_000 < n_params < 200_000
    assert 3 * 4 * n_params < len(saved[2]) < 3 * 4 * n_params + 100_000


# -------------------------------------------------------------------------------- bad checkpoints


def _network(**changes):
    return SequenceModelConfig("rellstm", **{"hidden_size": 8, "attention_size": 4, "nu": 2, "rho": 1, **changes})


def _tiny_state(monkeypatch, **network_changes):
    """A checkpoint (bytes) at update 4 of a tiny RelLSTM run, with the task and training of that run."""
    task = make_task("copy", 3, copy_length=2, labels=4)
    config = MemoryTrainConfig(updates=8, batch_size=4, log_every=4, eval_batches=1, checkpoint_every=4)
    return task, config, _record(task, _network(**network_changes), config, monkeypatch=monkeypatch)[2][4]


def _resume_refused(task, network, config, data):
    calls = []
    with pytest.raises(CheckpointMismatch) as raised:
        train_memory_task(task, network, config, seed=3, resume=TrainingState.from_bytes(data),
                          on_log=calls.append, on_eval=lambda *a: calls.append(a), on_resume=calls.append,
                          on_checkpoint=calls.append)
    assert calls == []  # refused before any callback: the run can still start from 0
    return str(raised.value)


def test_a_checkpoint_of_other_settings_is_refused_naming_them(monkeypatch):
    task, config, data = _tiny_state(monkeypatch, hidden_size=16)
    assert _resume_refused(task, _network(), config, data) == (
        "written at other settings: network.hidden_size 16 there, 8 here")
    other = MemoryTrainConfig(updates=8, batch_size=4, log_every=4, eval_batches=1, learning_rate=1e-3)
    assert _resume_refused(task, _network(), other, data) == (
        "written at other settings: network.hidden_size 16 there, 8 here; training.learning_rate 0.0002 there, "
        "0.001 here")
    # The cap and the interval are not among them: a run may go on to a larger cap, saving as often as it likes.
    assert "updates" not in resume_settings(task, _network(), config, 3)["training"]
    assert "checkpoint_every" not in resume_settings(task, _network(), config, 3)["training"]
    bigger = MemoryTrainConfig(updates=12, batch_size=4, log_every=4, eval_batches=1, checkpoint_every=2)
    assert train_memory_task(task, _network(hidden_size=16), bigger, seed=3,
                             resume=TrainingState.from_bytes(data)).updates == 12



def test_a_checkpoint_at_or_past_the_runs_cap_is_refused(monkeypatch):
    # At update 4 a run capped at 4 logs its last point and stops: a state at 4 of a longer run is not its.
    task, config, data = _tiny_state(monkeypatch)
    for cap in (4, 3):
        short = MemoryTrainConfig(updates=cap, batch_size=4, log_every=4, eval_batches=1, checkpoint_every=4)
        assert _resume_refused(task, _network(), short, data) == (
            f"written at update 4, not before this run's cap ({cap} updates)")

def test_a_checkpoint_whose_tensors_do_not_fit_the_network_is_refused(monkeypatch):
    task, config, data = _tiny_state(monkeypatch, hidden_size=16)
    state = TrainingState.from_bytes(data)
    state.settings = resume_settings(task, _network(), config, 3)  # settings that claim to fit, tensors of width 16
    message = _resume_refused(task, _network(), config, state.to_bytes())
    assert message.startswith("its tensors do not fit this network (Error(s) in loading state_dict")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", r"^not a readable checkpoint \("),
        (b"not a checkpoint at all", r"^not a readable checkpoint \("),
    ],
)
def test_bytes_that_are_no_checkpoint_are_refused_in_one_line(data, message):
    with pytest.raises(CheckpointMismatch, match=message) as raised:
        TrainingState.from_bytes(data)
    assert "\n" not in str(raised.value)


def test_a_checkpoint_cut_short_or_of_another_format_is_refused(monkeypatch):
    _, _, data = _tiny_state(monkeypatch)
    with pytest.raises(CheckpointMismatch, match=r"^not a readable checkpoint \("):
        TrainingState.from_bytes(data[: len(data) // 2])
    import io

    buffer = io.BytesIO()
    torch.save({"format": 99}, buffer)
    with pytest.raises(CheckpointMismatch, match=r"^checkpoint format 99, this version reads format 1$"):
        TrainingState.from_bytes(buffer.getvalue())
    buffer = io.BytesIO()
    torch.save({"format": 1, "update": 4}, buffer)
    with pytest.raises(CheckpointMismatch, match=r"^an incomplete checkpoint \(KeyError: 'curve'\)$"):
        TrainingState.from_bytes(buffer.getvalue())
