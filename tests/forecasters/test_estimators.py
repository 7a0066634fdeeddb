"""sktime interface: conformance through sktime's own checks, and the adapter's scaling hand-off."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sktime.forecasting.model_evaluation import evaluate as sktime_evaluate
from sktime.split import ExpandingWindowSplitter
from sktime.utils.estimator_checks import parametrize_with_checks

from recurbench.forecasters.estimators import (
    ESTIMATORS,
    InformerForecaster,
    LogSparseForecaster,
    RSAInformerForecaster,
)


@pytest.mark.sktime_conformance
@parametrize_with_checks(list(ESTIMATORS.values()))
def test_sktime_conformance(obj, test_name):
    from sktime.utils.estimator_checks import check_estimator

    check_estimator(obj, tests_to_run=test_name, raise_exceptions=True)


def hourly_frame(n: int = 240) -> pd.DataFrame:
    index = pd.date_range("2020-01-01", periods=n, freq="h")
    t = np.arange(n)
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {"a": 100 + 10 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.1, n), "b": -5 + 0.01 * t},
        index=index,
    )


TINY = {"seq_len": 48, "label_len": 24, "d_model": 16, "n_heads": 2, "d_ff": 16, "e_layers": 1, "random_state": 0}


def fitted_state(f) -> list[str]:
    """The fitted attributes an estimator holds (sktime's convention: public names ending in ``_``)."""
    return [name for name in vars(f) if name.endswith("_") and not name.startswith("_")]


def test_forecast_is_on_the_original_scale_with_the_requested_index():
    y = hourly_frame()
    f = InformerForecaster(**TINY, max_epochs=1).fit(y, fh=[1, 3, 6])
    pred = f.predict()
    assert list(pred.columns) == ["a", "b"]
    assert list(pred.index) == list(pd.date_range(y.index[-1], periods=7, freq="h")[[1, 3, 6]])
    # Even a barely trained network forecasts around each series' level, not the scaled 0.
    assert abs(pred["a"].mean() - 100) < 30 and abs(pred["b"].mean() - y["b"].mean()) < 5
    assert f.training_.epochs and f.seq_len_ == 48


def test_predictions_repeat_with_the_same_random_state():
    y = hourly_frame(120)
    a = RSAInformerForecaster(**TINY, max_epochs=1, rem_heads=(0, 1, 1, 0, 0, 0)).fit(y, fh=[1, 2]).predict()
    b = RSAInformerForecaster(**TINY, max_epochs=1, rem_heads=(0, 1, 1, 0, 0, 0)).fit(y, fh=[1, 2]).predict()
    pd.testing.assert_frame_equal(a, b)


def test_works_in_sktime_evaluate():
    y = hourly_frame(150)
    f = InformerForecaster(**{**TINY, "seq_len": 24, "label_len": 12}, max_epochs=1)
    cv = ExpandingWindowSplitter(fh=[1, 2], initial_window=120, step_length=15)
    results = sktime_evaluate(forecaster=f, y=y, cv=cv)
    assert len(results) == 2 and np.isfinite(results.iloc[:, 0]).all()


def test_rsa_lr_factor_reaches_the_gates():
    # The same fit with the RSA parameters at 30x the learning rate moves every layer's gate further.
    y = hourly_frame(120)

    def gates(factor, gate_factor=None):
        f = RSAInformerForecaster(**TINY, max_epochs=1, rem_heads=(2, 0, 0, 0, 0, 0), rsa_lr_factor=factor,
                                  rsa_gate_lr_factor=gate_factor)
        return np.array([float(m.mu.detach()) for m in f.fit(y, fh=[1, 2]).network_.modules() if hasattr(m, "mu")])

    slow, fast = gates(1.0), gates(30.0)
    assert len(slow) == 3  # encoder self-attention, decoder self- and cross-attention
    assert (np.abs(fast - 1.0) > 5 * np.abs(slow - 1.0)).all()
    # rsa_gate_lr_factor holds the gates back while the REM parameters keep the fast rate
    held = gates(30.0, gate_factor=1.0)
    assert (np.abs(fast - 1.0) > 5 * np.abs(held - 1.0)).all()


def test_val_checks_per_epoch_reaches_the_training_loop():
    # Three checks per epoch validate at three points of the epoch, the last at its end; the default
    # validates once, at the end (Informer's protocol).
    y = hourly_frame(200)
    once = InformerForecaster(**TINY, max_epochs=1, batch_size=16, val_size=0.25).fit(y, fh=[1, 2]).training_
    thrice = InformerForecaster(**TINY, max_epochs=1, batch_size=16, val_size=0.25, val_checks_per_epoch=3)
    record = thrice.fit(y, fh=[1, 2]).training_.epochs[0]
    assert [c.batches for c in once.epochs[0].checks] == [once.epochs[0].batches]
    batches = [c.batches for c in record.checks]
    assert len(batches) == 3 and batches == sorted(set(batches)) and batches[-1] == record.batches
    assert record.val_loss == record.checks[-1].val_loss


@pytest.mark.parametrize(
    ("cls", "params", "message"),
    [
        (InformerForecaster, {"seq_len": 0}, "InformerForecaster: seq_len must be an integer >= 1, got 0"),
        (InformerForecaster, {"seq_len": 24.0}, "InformerForecaster: seq_len must be an integer >= 1, got 24.0"),
        (InformerForecaster, {"label_len": 60}, "InformerForecaster: label_len (60) must not exceed seq_len (48)"),
        (InformerForecaster, {"max_epochs": 0}, "InformerForecaster: max_epochs must be an integer >= 1, got 0"),
        (InformerForecaster, {"batch_size": 0}, "InformerForecaster: batch_size must be an integer >= 1, got 0"),
        (InformerForecaster, {"patience": 0}, "InformerForecaster: patience must be an integer >= 1, got 0"),
        (InformerForecaster, {"learning_rate": -1.0}, "InformerForecaster: learning_rate must be a positive finite number, got -1.0"),
        (InformerForecaster, {"learning_rate": float("nan")}, "InformerForecaster: learning_rate must be a positive finite number, got nan"),
        (InformerForecaster, {"dropout": 1.5}, "InformerForecaster: dropout must be a number in [0, 1), got 1.5"),
        (InformerForecaster, {"val_size": 1.0}, "InformerForecaster: val_size must be a number in [0, 1), got 1.0"),
        (InformerForecaster, {"val_size": 0.25, "val_checks_per_epoch": 0},
         "InformerForecaster: TrainConfig.val_checks_per_epoch: must be an integer >= 1, got 0"),
        (InformerForecaster, {"val_checks_per_epoch": 2},
         "InformerForecaster: val_checks_per_epoch=2 validates within an epoch, which needs validation windows: "
         "val_size=0.0 leaves 0 of the 120 rows, and a window needs 2 (the horizon)"),
        (InformerForecaster, {"val_size": 0.005, "val_checks_per_epoch": 2},
         "InformerForecaster: val_checks_per_epoch=2 validates within an epoch, which needs validation windows: "
         "val_size=0.005 leaves 0 of the 120 rows, and a window needs 2 (the horizon)"),
        (InformerForecaster, {"val_size": 0.01, "val_checks_per_epoch": 2},
         "InformerForecaster: val_checks_per_epoch=2 validates within an epoch, which needs validation windows: "
         "val_size=0.01 leaves 1 of the 120 rows, and a window needs 2 (the horizon)"),
        (InformerForecaster, {"factor": 0}, "InformerForecaster: factor must be an integer >= 1, got 0"),
        (InformerForecaster, {"e_layers": 0}, "InformerForecaster: e_layers must be an integer >= 1, got 0"),
        (InformerForecaster, {"d_model": 16.0}, "InformerForecaster: d_model must be an integer >= 1, got 16.0"),
        (LogSparseForecaster, {"conv_kernel": 0}, "LogSparseForecaster: conv_kernel must be an integer >= 1, got 0"),
        (LogSparseForecaster, {"device": "gpu"},
         "LogSparseForecaster: device: unknown device 'gpu'; expected auto, cpu, cuda, cuda:N or mps"),
        (LogSparseForecaster, {"local_window": -1}, "LogSparseForecaster: local_window must be an integer >= 0, got -1"),
        (RSAInformerForecaster, {"rem_heads": (2, 0, 0, 0, 0, 0), "gate_init": float("nan")},
         "RSAInformerForecaster: gate_init: must be a finite number, got nan"),
        (RSAInformerForecaster, {"rem_heads": (0, 1, 0, 1, 0, 0), "rem_dilations": (2,)},
         "RSAInformerForecaster: rem_heads: cyclical REM heads come in pairs: k2=1 != k3=0; give k2 (cos) and k3 "
         "(sin) the same count, one sin head per cos head"),
        (RSAInformerForecaster, {"rem_heads": (1, 0, 0, 0, 0, 0)},
         "RSAInformerForecaster: rem_heads: the head counts [1, 0, 0, 0, 0, 0] sum to 1, but the model has 2 heads"),
        (RSAInformerForecaster, {"rem_heads": (1, 0, 0, 1, 0, 0), "rem_dilations": (2, 3)},
         "RSAInformerForecaster: rem_dilations: 1 dilated heads (k4+k5+k6) need 1 dilation factors, got 2: [2, 3]"),
        (RSAInformerForecaster, {"rem_heads": (2, 0, 0, 0, 0, 0), "rsa_lr_factor": 0.0},
         "RSAInformerForecaster: TrainConfig.rsa_lr_factor: must be a positive number, got 0.0"),
    ],
)
def test_a_bad_hyperparameter_is_refused_by_name_before_training(cls, params, message):
    # Several of these used to train anyway (seq_len 0 ran as 1, a NaN gate gave NaN losses, val_size 1.5
    # validated on nothing) or failed deep in torch (batch_size 0: a ZeroDivisionError).
    f = cls(**{**TINY, "max_epochs": 1, **params})
    with pytest.raises(ValueError) as info:
        f.fit(hourly_frame(120), fh=[1, 2])
    assert str(info.value) == message
    assert not hasattr(f, "network_") and fitted_state(f) == []


def test_the_unpaired_heads_error_suggests_what_works():
    # It used to suggest allow_unpaired, which no estimator parameter (or suite key) accepts.
    y = hourly_frame(120)
    with pytest.raises(ValueError, match="give k2 \\(cos\\) and k3 \\(sin\\) the same count") as info:
        RSAInformerForecaster(**TINY, max_epochs=1, rem_heads=(0, 2, 0, 0, 0, 0)).fit(y, fh=[1, 2])
    assert "allow_unpaired" not in str(info.value)
    assert RSAInformerForecaster(**TINY, max_epochs=1, rem_heads=(0, 1, 1, 0, 0, 0)).fit(y, fh=[1, 2]).is_fitted


def test_update_moves_the_input_window_without_storing_the_series():
    # The estimators keep only their input window (sktime's remember_data off: no FutureWarning per
    # instance, and nothing breaks when sktime 1.3 stops storing _y by default).
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        f = InformerForecaster(**TINY, max_epochs=1)
    y = hourly_frame(160)
    f.fit(y.iloc[:130], fh=[1, 2])
    before = f.predict()
    f.update(y.iloc[130:135])
    f.update(y.iloc[133:140])  # overlapping rows are replaced, not repeated
    after = f.predict()
    assert list(after.index) == list(y.index[140:142]) and not after.equals(before)
    pd.testing.assert_frame_equal(f.history_, y.iloc[140 - 48:140])
    g = InformerForecaster(**TINY, max_epochs=1).fit(y.iloc[:130], fh=[1, 2])
    g.update(y.iloc[130:140])
    pd.testing.assert_frame_equal(g.predict(), after)
    assert getattr(f, "_y", None) is None


def test_works_in_sktime_forecasting_benchmark(tmp_path):
    from sktime.benchmarking.forecasting import ForecastingBenchmark
    from sktime.performance_metrics.forecasting import MeanSquaredError

    def dataset():
        return hourly_frame(150)

    small = {**TINY, "seq_len": 24, "label_len": 12, "max_epochs": 1}
    bench = ForecastingBenchmark()
    bench.add_estimator(InformerForecaster(**small), estimator_id="informer")
    bench.add_estimator(RSAInformerForecaster(**small, rem_heads=(0, 1, 1, 0, 0, 0)), estimator_id="rsa_informer")
    bench.add_task(dataset, ExpandingWindowSplitter(fh=[1, 2], initial_window=120, step_length=15), [MeanSquaredError()])
    results = bench.run(str(tmp_path / "results.csv"))
    assert sorted(results["model_id"]) == ["informer", "rsa_informer"]
    folds = results[["MeanSquaredError_fold_0_test", "MeanSquaredError_fold_1_test"]].to_numpy()
    assert np.isfinite(folds).all() and (folds > 0).all()


@pytest.mark.parametrize(
    ("drop", "culprit"),
    [(50, 50), (1, 1), (118, 118)],  # a gap inside, after the first row, before the last (rows 0..118 left)
)
def test_an_irregular_index_is_refused_in_fit_naming_its_first_off_row(drop, culprit):
    # It used to train, then fail in predict with an unrelated TypeError from sktime's horizon code.
    y = hourly_frame(120).drop(index=hourly_frame(120).index[drop])
    f = InformerForecaster(**{**TINY, "seq_len": 24, "label_len": 12}, max_epochs=1)
    with pytest.raises(ValueError) as info:
        f.fit(y, fh=[1, 2])
    after, before = y.index[culprit], y.index[culprit - 1]  # the row after the gap, and the one before it
    assert str(info.value).startswith(
        f"InformerForecaster: y's index is not equally spaced: {after} (row {culprit}) is not one step after "
        f"{before}, the step of the other rows (h); "
    )
    assert fitted_state(f) == [] and not f.is_fitted


def test_calendar_frequencies_and_gaps_in_other_indexes():
    small = {**TINY, "seq_len": 12, "label_len": 6, "max_epochs": 1}
    # Month ends are one step apart although their days differ: no frequency set, still accepted.
    months = pd.DataFrame({"a": np.arange(60.0)}, index=pd.DatetimeIndex(pd.date_range("2000-01-31", periods=60, freq="ME").values))
    assert months.index.freq is None
    assert len(InformerForecaster(**small).fit(months, fh=[1, 2]).predict()) == 2
    # A period index with a missing month, an integer index with a missing step: refused at the row after.
    periods = pd.period_range("2000-01", periods=61, freq="M").delete(30)
    with pytest.raises(ValueError, match=r"y's index is not equally spaced: 2002-08 \(row 30\) is not one step after 2002-06, .* \(MS\);"):
        InformerForecaster(**small).fit(pd.DataFrame({"a": np.arange(60.0)}, index=periods), fh=[1, 2])
    integers = pd.Index([*range(40), *range(41, 61)])
    with pytest.raises(ValueError, match=r"y's index is not equally spaced: 41 \(row 40\) is not one step after 39, .* \(1\);"):
        InformerForecaster(**small).fit(pd.DataFrame({"a": np.arange(60.0)}, index=integers), fh=[1, 2])


@pytest.mark.parametrize(
    ("value", "what"),
    [(np.inf, "an infinite value (inf)"), (-np.inf, "an infinite value (-inf)"), (np.nan, "a missing value (NaN)")],
)
def test_a_non_finite_value_is_refused_in_fit_naming_its_index_and_column(value, what):
    # inf used to train and forecast NaN without an error; NaN met sktime's check, which does not say where.
    y = hourly_frame(120)
    y.iloc[70, 1] = value  # the first bad value, in column "b"
    y.iloc[90, 0] = np.inf  # a later one
    f = InformerForecaster(**TINY, max_epochs=1)
    with pytest.raises(ValueError) as info:
        f.fit(y, fh=[1, 2])
    assert str(info.value) == (
        f"InformerForecaster: y has {what} at index {y.index[70]}, column 'b' (1 more after it); "
        "the network needs finite values: fill or drop them first"
    )
    assert fitted_state(f) == [] and not f.is_fitted


def test_a_non_finite_value_in_a_series_or_an_array_names_its_position():
    f = InformerForecaster(**TINY, max_epochs=1)
    series = hourly_frame(120)["a"]
    series.iloc[7] = np.inf
    with pytest.raises(ValueError, match=rf"^InformerForecaster: y has an infinite value \(inf\) at index {series.index[7]}, column 'a';"):
        f.fit(series, fh=[1, 2])
    array = np.ones((120, 2))
    array[9, 1] = np.nan
    with pytest.raises(ValueError, match=r"^InformerForecaster: y has a missing value \(NaN\) at index 9, column 1;"):
        f.fit(array, fh=[1, 2])


def test_update_refuses_bad_rows_before_the_cutoff_moves():
    y = hourly_frame(160)
    f = InformerForecaster(**TINY, max_epochs=1).fit(y.iloc[:130], fh=[1, 2])
    cutoff, history = f.cutoff, f.history_.copy()
    new = y.iloc[130:140].copy()
    new.iloc[3, 0] = np.nan
    with pytest.raises(ValueError, match=rf"y has a missing value \(NaN\) at index {new.index[3]}, column 'a'"):
        f.update(new)
    with pytest.raises(ValueError, match=rf"not equally spaced: {y.index[136]} \(row 5\) is not one step after {y.index[134]}, "):
        f.update(y.iloc[130:140].drop(index=y.index[135]))
    assert f.cutoff.equals(cutoff)
    pd.testing.assert_frame_equal(f.history_, history)


def test_update_refuses_rows_that_leave_a_gap_after_the_series():
    # Each update is equally spaced on its own; the gap is between the fitted window and the new rows.
    y = hourly_frame(160)
    f = InformerForecaster(**TINY, max_epochs=1).fit(y.iloc[:130], fh=[1, 2])
    cutoff, history = f.cutoff, f.history_.copy()
    with pytest.raises(ValueError, match=rf"^InformerForecaster: update's y does not continue the series: "
                                         rf"{y.index[135]} is not one step \(h\) after {y.index[129]}, the row before it; "):
        f.update(y.iloc[135:140])
    assert f.cutoff.equals(cutoff)
    pd.testing.assert_frame_equal(f.history_, history)
    f.update(y.iloc[130:140])  # the same rows without the gap are taken, and so is a refit on any rows
    assert f.cutoff[0] == y.index[139]
    refit = InformerForecaster(**TINY, max_epochs=1).fit(y.iloc[:130], fh=[1, 2])
    with pytest.warns(UserWarning, match="series too short for seq_len=48"):  # 25 rows left
        assert refit.fit(y.iloc[135:], fh=[1, 2]).is_fitted


def test_update_with_renamed_columns_and_a_reversed_index_are_refused_by_name():
    """Where numpy's broadcasting error and sktime's generic one said neither what nor how to fix it."""
    y = hourly_frame(160)
    f = InformerForecaster(**TINY, max_epochs=1).fit(y.iloc[:130], fh=[1, 2])
    cutoff = f.cutoff
    renamed = y.iloc[130:140].rename(columns={y.columns[-1]: "renamed"})
    with pytest.raises(ValueError, match=r"^InformerForecaster: update's y has the columns \[.*'renamed'\], the fitted "
                                         r"series \[.*\]: pass the same columns, in the same order$"):
        f.update(renamed)
    assert f.cutoff.equals(cutoff)
    with pytest.raises(ValueError, match=rf"^InformerForecaster: y's index is not in increasing order: {y.index[138]} "
                                         rf"\(row 1\) comes after {y.index[139]}; sort it first"):
        f.update(y.iloc[130:140].iloc[::-1])


def test_verbose_prints_a_line_per_epoch_and_per_validation_check(capsys):
    y = hourly_frame(200)
    quiet = InformerForecaster(**TINY, max_epochs=2, val_size=0.25).fit(y, fh=[1, 2])
    assert capsys.readouterr().out == ""  # the default, and what check_estimator sees
    f = InformerForecaster(**TINY, max_epochs=2, val_size=0.25, verbose=True).fit(y, fh=[1, 2])
    lines = capsys.readouterr().out.splitlines()
    expected = [
        f"InformerForecaster: epoch {e.epoch}/2: train loss {e.train_loss:.4f}, val loss {e.val_loss:.4f}, "
        f"lr {e.learning_rate:.3g} ({e.seconds:.1f} s)"
        for e in f.training_.epochs
    ]
    assert len(lines) == 2 and [line.rsplit(" (", 1)[0] for line in lines] == [x.rsplit(" (", 1)[0] for x in expected]
    assert [e.train_loss for e in f.training_.epochs] == [e.train_loss for e in quiet.training_.epochs]
    g = InformerForecaster(**TINY, max_epochs=1, val_size=0.25, val_checks_per_epoch=3, verbose=True).fit(y, fh=[1, 2])
    lines = capsys.readouterr().out.splitlines()
    checks = g.training_.epochs[0].checks
    assert lines[:3] == [
        f"InformerForecaster: epoch 1/1, batch {c.batches}/{c.epoch_batches}: val loss {c.val_loss:.4f}" for c in checks
    ]
    assert len(lines) == 4 and lines[3].startswith("InformerForecaster: epoch 1/1: train loss ")


def numpydoc_section(doc: str, title: str) -> list[str]:
    """The names documented in a numpydoc section (``name : type`` lines, in order)."""
    lines = doc.splitlines()
    start = lines.index(title) + 2  # the title, then its underline
    assert set(lines[start - 1]) == {"-"}
    names = []
    for line in lines[start:]:
        if line and not line.startswith(" ") and " : " not in line:
            break  # the next section's title
        if line and not line.startswith(" "):
            names.append(line.split(" : ")[0])
    return names


@pytest.mark.parametrize("cls", list(ESTIMATORS.values()))
def test_every_parameter_has_a_numpydoc_entry_in_signature_order(cls):
    import inspect

    doc = inspect.getdoc(cls)
    assert numpydoc_section(doc, "Parameters") == list(inspect.signature(cls).parameters)
    assert numpydoc_section(doc, "Attributes") == ["seq_len_", "label_len_", "pred_len_", "history_", "scaler_",
                                                   "network_", "training_"]
    assert f">>> from recurbench.forecasters.estimators import {cls.__name__}" in doc.split("Examples\n--------\n")[1]
    # The RSA learning-rate factor's documented default is the class's own.
    if "rsa_lr_factor" in inspect.signature(cls).parameters:
        default = inspect.signature(cls).parameters["rsa_lr_factor"].default
        assert f"rsa_lr_factor : float, default={default}\n" in doc
