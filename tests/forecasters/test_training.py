"""Informer's training scheme: lr halving, early stopping with the best weights, full-test evaluation."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.utils.data import TensorDataset

from recurbench.forecasters.training import TrainConfig, evaluate, train


class Scale(nn.Module):
    """forecast = w * last input value, repeated: one parameter, easy to reason about."""

    def __init__(self, w: float = 0.0, pred_len: int = 2) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w))
        self.pred_len = pred_len

    def forward(self, x, x_mark, y_mark):
        return self.w * x[:, -1:, :].expand(-1, self.pred_len, -1)


def windows(n: int, target_scale: float = 1.0) -> TensorDataset:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 3, 1, generator=g)
    y = target_scale * x[:, -1:, :].expand(-1, 2, -1)
    return TensorDataset(x, y, torch.zeros(n, 3, 0), torch.zeros(n, 2, 0))


def test_learning_rate_is_held_two_epochs_then_halved_as_informer2020s_loop_and_losses_are_recorded():
    # Informer2020 calls adjust_learning_rate(optimizer, epoch + 1) after each 0-based epoch, with
    # lradj type1 = lr * 0.5 ** (epoch - 1): the rate after epoch 1 is the full one again.
    records = []
    result = train(Scale(), windows(64), windows(16), 2, TrainConfig(epochs=4, batch_size=16), on_epoch=records.append)
    assert [r.learning_rate for r in result.epochs] == [1e-4, 1e-4, 5e-5, 2.5e-5]
    assert records == result.epochs and all(r.batches == 4 for r in records)
    assert all(r.val_loss is not None and r.train_loss > 0 for r in records)


def test_lr_hold_epochs_sets_where_the_halving_starts_and_is_checked():
    import pytest

    for hold, expected in ((1, [1e-4, 5e-5, 2.5e-5]), (3, [1e-4, 1e-4, 1e-4])):
        result = train(Scale(), windows(32), None, 2, TrainConfig(epochs=3, batch_size=16, lr_hold_epochs=hold))
        assert [r.learning_rate for r in result.epochs] == expected
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match=r"TrainConfig.lr_hold_epochs: must be an integer >= 1, got"):
            TrainConfig(lr_hold_epochs=bad)


def test_early_stopping_restores_the_best_weights():
    # Validation wants w = -1 while training pulls w towards +1: val loss gets worse every epoch.
    model = Scale(w=0.0)
    cfg = TrainConfig(epochs=6, batch_size=8, learning_rate=0.02, lr_decay=1.0, patience=3)
    result = train(model, windows(64, 1.0), windows(32, -1.0), 2, cfg)
    assert result.stopped_early and len(result.epochs) == 4 and result.best_epoch == 1
    best_val = result.epochs[0].val_loss
    assert abs(evaluate(model, windows(32, -1.0), 2)["mse"] - best_val) < 1e-9


def test_max_train_batches_caps_an_epoch():
    result = train(Scale(), windows(100), None, 2, TrainConfig(epochs=1, batch_size=10, max_train_batches=3))
    assert result.epochs[0].batches == 3 and result.best_epoch is None


def test_evaluate_averages_over_every_window_whatever_the_batch_size():
    data = windows(37)  # not a multiple of any batch size used
    model = Scale(w=0.5)
    x, y = data.tensors[0], data.tensors[1]
    err = 0.5 * x[:, -1:, :].expand(-1, 2, -1) - y
    expected = {"mse": float(err.pow(2).mean()), "mae": float(err.abs().mean())}
    for batch_size in (1, 8, 256):
        got = evaluate(model, data, 2, batch_size=batch_size)
        assert abs(got["mse"] - expected["mse"]) < 1e-6 and abs(got["mae"] - expected["mae"]) < 1e-6


def test_a_test_stride_scores_every_nth_window_only():
    data = windows(37)
    model = Scale(w=0.5)
    x, y = data.tensors[0][::5], data.tensors[1][::5]  # windows 0, 5, ..., 35
    err = 0.5 * x[:, -1:, :].expand(-1, 2, -1) - y
    got = evaluate(model, data, 2, batch_size=3, stride=5)
    assert abs(got["mse"] - float(err.pow(2).mean())) < 1e-6 and abs(got["mae"] - float(err.abs().mean())) < 1e-6
    assert abs(evaluate(model, data, 2, stride=1)["mse"] - got["mse"]) > 1e-6  # the stride matters here


def _one_step(factor: float, epochs: int = 1, gate_factor: float | None = None):
    from recurbench.forecasters.config import ForecasterConfig, RSASpec
    from recurbench.forecasters.models import build_network

    cfg = ForecasterConfig(
        n_features=2, n_marks=0, seq_len=8, label_len=4, pred_len=2, d_model=12, n_heads=3, e_layers=1,
        d_layers=1, d_ff=8, dropout=0.0, rsa=RSASpec(k=(1, 1, 1, 0, 0, 0)),
    )
    torch.manual_seed(0)
    model = build_network("rsa_informer", cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    g = torch.Generator().manual_seed(1)
    n = 16
    data = TensorDataset(torch.randn(n, 8, 2, generator=g), torch.randn(n, 6, 2, generator=g),
                         torch.zeros(n, 8, 0), torch.zeros(n, 6, 0))
    torch.manual_seed(2)  # ProbSparse samples keys: the same draws for both factors
    cfg_t = TrainConfig(epochs=epochs, batch_size=n, learning_rate=1e-3, rsa_lr_factor=factor,
                        rsa_gate_lr_factor=gate_factor, max_train_batches=1)
    result = train(model, data, None, 2, cfg_t, generator=torch.Generator().manual_seed(3))
    steps = {name: (p.detach() - before[name]) for name, p in model.named_parameters()}
    return steps, result


def test_rsa_lr_factor_scales_only_the_gates_and_rem_parameters():
    # Adam's first step moves every parameter by ~lr (sign of its gradient): with the factor, the RSA
    # parameters (mu, eta, nu, theta of every mixer) move `factor` times as far, everything else the same.
    base, _ = _one_step(1.0)
    fast, _ = _one_step(10.0)
    rsa_names = [n for n in base if n.rsplit(".", 1)[-1] in ("mu", "eta", "nu", "theta")]
    assert {n.rsplit(".", 1)[-1] for n in rsa_names} == {"mu", "eta", "nu", "theta"}
    for name, step in base.items():
        if name in rsa_names:
            assert step.abs().max() > 5e-4, name  # it did move
            torch.testing.assert_close(fast[name], 10 * step, rtol=1e-3, atol=1e-7, msg=name)
        else:
            torch.testing.assert_close(fast[name], step, rtol=0, atol=0, msg=name)


def test_rsa_lr_factor_halves_with_the_learning_rate_and_must_be_positive():
    import pytest

    _, result = _one_step(100.0, epochs=3)
    assert [r.learning_rate for r in result.epochs] == [1e-3, 1e-3, 5e-4]  # the base rate is what epochs report
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"TrainConfig.rsa_lr_factor: must be a positive number, got"):
            TrainConfig(rsa_lr_factor=bad)
        with pytest.raises(ValueError, match=r"TrainConfig.rsa_gate_lr_factor: must be a positive number, got"):
            TrainConfig(rsa_gate_lr_factor=bad)


def test_rsa_gate_lr_factor_sets_the_gates_apart_from_the_rem_parameters():
    # REM parameters at factor 10, gates at 1: mu moves as in the base run, eta/nu/theta 10 times as far.
    base, _ = _one_step(1.0)
    split, _ = _one_step(10.0, gate_factor=1.0)
    gates_fast, _ = _one_step(1.0, gate_factor=10.0)
    for name, step in base.items():
        kind = name.rsplit(".", 1)[-1]
        if kind == "mu":
            torch.testing.assert_close(split[name], step, rtol=0, atol=0, msg=name)
            torch.testing.assert_close(gates_fast[name], 10 * step, rtol=1e-3, atol=1e-7, msg=name)
        elif kind in ("eta", "nu", "theta"):
            torch.testing.assert_close(split[name], 10 * step, rtol=1e-3, atol=1e-7, msg=name)
            torch.testing.assert_close(gates_fast[name], step, rtol=0, atol=0, msg=name)


def test_one_check_per_epoch_is_informers_protocol_and_repeats_the_same_run():
    from recurbench.forecasters.training import check_points

    assert check_points(268, 1) == [268]
    assert check_points(268, 4) == [67, 134, 201, 268]
    assert check_points(3, 5) == [1, 2, 3]  # never more checks than batches, the last at the end
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        result = train(Scale(), windows(64), windows(16), 2, TrainConfig(epochs=3, batch_size=16, learning_rate=0.01))
        runs.append(result)
        assert [len(e.checks) for e in result.epochs] == [1, 1, 1]
        assert [(c.batches, c.epoch_batches) for e in result.epochs for c in e.checks] == [(4, 4)] * 3
        assert result.best_progress == result.best_epoch
    assert [e.val_loss for e in runs[0].epochs] == [e.val_loss for e in runs[1].epochs]


def test_checks_within_an_epoch_keep_the_best_weights_seen_at_any_of_them():
    # Validation wants w = -1, training pulls w from 0 towards +1: the best weights are the very first
    # ones validated, after one batch, which one check per epoch never sees.
    cfg = TrainConfig(epochs=3, batch_size=8, learning_rate=0.02, lr_decay=1.0, patience=3, val_checks_per_epoch=8)
    model = Scale(w=0.0)
    seen = []
    result = train(model, windows(64, 1.0), windows(32, -1.0), 2, cfg, on_check=seen.append)
    losses = [c.val_loss for c in seen]
    assert losses == sorted(losses)  # worse at every check
    assert result.stopped_early and len(seen) == 4  # patience counts checks: best + 3 without improvement
    assert [c.batches for c in seen] == [1, 2, 3, 4] and result.best_progress == 1 / 8 and result.best_epoch == 1
    record = result.epochs[-1]
    assert record.batches == 4 and record.val_loss == seen[-1].val_loss and record.checks == seen
    assert abs(evaluate(model, windows(32, -1.0), 2)["mse"] - seen[0].val_loss) < 1e-9

    one = train(Scale(w=0.0), windows(64, 1.0), windows(32, -1.0), 2, dataclasses.replace(cfg, val_checks_per_epoch=1))
    assert one.best_progress == 1 and one.best_val_loss > result.best_val_loss


def test_val_checks_per_epoch_must_be_a_positive_integer():
    import pytest

    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=r"TrainConfig.val_checks_per_epoch: must be an integer >= 1, got"):
            TrainConfig(val_checks_per_epoch=bad)


class OneChannel(Scale):
    """Breaks the forecaster contract: one channel where the data has three."""

    def forward(self, x, x_mark, y_mark):
        return super().forward(x, x_mark, y_mark)[..., :1]


def test_a_forecast_of_the_wrong_shape_is_refused_not_broadcast():
    import pytest

    from recurbench.errors import ModelOutputError

    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 3, generator=g)
    data = TensorDataset(x, x[:, -2:, :], torch.zeros(8, 3, 0), torch.zeros(8, 2, 0))
    message = (r"^OneChannel returned a forecast of shape \(8, 2, 1\); a forecaster returns \[batch, pred_len, "
               r"channels\], here \(8, 2, 3\)$")
    with pytest.raises(ModelOutputError, match=message):
        train(OneChannel(), data, None, 2, TrainConfig(epochs=1, batch_size=8))
    with pytest.raises(ModelOutputError, match=message):
        evaluate(OneChannel(), data, 2, batch_size=8)
    assert evaluate(Scale(), data, 2, batch_size=8)["mse"] > 0  # three channels: scored
