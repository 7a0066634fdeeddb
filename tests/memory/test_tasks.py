"""The copy and denoise tasks: layouts worked out by hand from the fact sheet, determinism, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from recurbench.errors import ConfigError
from recurbench.memory.tasks import CopyTask, DenoiseTask, make_task


def test_copy_layout_by_hand():
    # T = 3, c = 2, labels 4: L = 7. Input: data at 0-1, T - 1 = 2 blanks at 2-3, marker 5 at 4,
    # blanks at 5-6. Target: blanks at 0-4, the data at 5-6.
    task = make_task("copy", 3, copy_length=2, labels=4)
    assert (task.seq_len, task.scored_from, task.marker, task.vocab_size, task.n_classes) == (7, 5, 5, 6, 5)
    batch = task.sample(4, np.random.default_rng(1))
    for row in range(4):
        a, b = batch.inputs[row, :2]
        assert 1 <= a <= 4 and 1 <= b <= 4
        assert batch.inputs[row].tolist() == [a, b, 0, 0, 5, 0, 0]
        assert batch.targets[row].tolist() == [0, 0, 0, 0, 0, a, b]
    assert batch.inputs.dtype == np.int64 and batch.inputs.shape == batch.targets.shape == (4, 7)


def test_copy_at_the_papers_sizes_matches_the_fact_sheet():
    # c = 10, 8 labels, T = 300: data 0..9, blanks 10..308 (T - 1 = 299), marker 9 at 309, blanks
    # 310..319; input width 10, 9 output classes, targets at 310..319.
    task = CopyTask(300)
    batch = task.sample(3, np.random.default_rng(0))
    x, y = batch.inputs, batch.targets
    assert x.shape == (3, 320) and task.vocab_size == 10 and task.n_classes == 9
    assert ((x[:, :10] >= 1) & (x[:, :10] <= 8)).all()
    assert (x[:, 10:309] == 0).all() and (x[:, 309] == 9).all() and (x[:, 310:] == 0).all()
    assert (y[:, :310] == 0).all() and (y[:, 310:] == x[:, :10]).all()


def test_denoise_layout_by_hand():
    # T = 3, c = 2, labels 4: the data sit at 2 of the first T + c - 1 = 4 positions, in order; the
    # marker is labels + 2 = 6 at 4 (symbol 5 is never used, as in the reference code); input width 7,
    # 6 output classes.
    task = make_task("denoise", 3, copy_length=2, labels=4)
    assert (task.seq_len, task.marker, task.vocab_size, task.n_classes) == (7, 6, 7, 6)
    batch = task.sample(2000, np.random.default_rng(2))
    x, y = batch.inputs, batch.targets
    assert (x[:, 4] == 6).all() and (x[:, 5:] == 0).all() and (y[:, :5] == 0).all()
    head = x[:, :4]
    assert ((head > 0).sum(axis=1) == 2).all()
    assert ((head == 0) | ((head >= 1) & (head <= 4))).all()  # never symbol 5
    assert (head[head > 0].reshape(-1, 2) == y[:, 5:]).all()  # the data in order
    # Positions: every one of the C(4, 2) = 6 pairs, each about equally often (1/6).
    pairs = [tuple(np.flatnonzero(row)) for row in head]
    counts = {p: pairs.count(p) for p in itertools.combinations(range(4), 2)}
    assert set(counts) == set(pairs) and all(abs(n / 2000 - 1 / 6) < 0.03 for n in counts.values())
    # The data are uniform over 1..4.
    assert all(abs(np.mean(y[:, 5:] == k) - 0.25) < 0.02 for k in range(1, 5))


def test_denoise_at_the_papers_sizes():
    task = DenoiseTask(200)
    x, y = task.sample(5, np.random.default_rng(0))
    assert x.shape == (5, 220) and task.vocab_size == 11 and task.n_classes == 10
    assert (x[:, 209] == 10).all() and (x[:, 210:] == 0).all()
    assert all((row[:209][row[:209] > 0] == target[210:]).all() for row, target in zip(x, y, strict=True))


@pytest.mark.parametrize("name", ["copy", "denoise"])
def test_a_seed_fixes_the_batches(name):
    task = make_task(name, 20)
    a = [task.sample(8, rng) for rng in [np.random.default_rng(7)] for _ in range(3)]
    b = [task.sample(8, rng) for rng in [np.random.default_rng(7)] for _ in range(3)]
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        assert (xa == xb).all() and (ya == yb).all()
    assert not (a[0].inputs == a[1].inputs).all()  # consecutive draws differ
    other = task.sample(8, np.random.default_rng(8))
    assert not (other.inputs == a[0].inputs).all()


@pytest.mark.parametrize(
    ("name", "T", "kwargs", "message"),
    [
        ("copy", 0, {}, r"task 'copy' at T=0: T: the copy task needs an integer of at least 1 .* got 0"),
        ("denoise", -5, {}, r"T: the denoise task needs an integer of at least 1 .* got -5"),
        ("copy", 10, {"copy_length": 0}, r"copy_length: .* got 0"),
        ("copy", 10, {"labels": 0}, r"labels: .* got 0"),
        # One symbol: every output is right by construction (accuracy 1.000 after 20 updates).
        ("denoise", 10, {"labels": 1}, r"labels: the denoise task needs an integer of at least 2 \(with one symbol "
                                       r"there is nothing to remember\), got 1"),
        ("cpy", 10, {}, r"unknown memory task 'cpy'; known: copy, denoise"),
    ],
)
def test_bad_settings_name_the_culprit(name, T, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_task(name, T, where=f"task {name!r} at T={T}", **kwargs)
