"""Informer's protocol, checked against values derived independently from the raw CSVs and the
calendar (12/4/4 months of 30 days), not against the implementation's own arithmetic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from torch.utils.data import DataLoader

from recurbench.data import WindowSpec, prepare, split_borders, time_features


def _raw(data_dir, name):
    return pd.read_csv(data_dir / f"{name}.csv", parse_dates=["date"])


def _row_of(df, timestamp):
    return int(np.flatnonzero(df["date"].to_numpy() == np.datetime64(timestamp))[0])


@pytest.mark.parametrize("name, step", [("ETTh1", "1h"), ("ETTm1", "15min")])
def test_ett_borders_are_twelve_four_four_months_of_thirty_days(data_dir, name, step):
    raw = _raw(data_dir, name)
    start = raw["date"].iloc[0]
    # The borders, found by date: 360, 480 and 600 days after the first timestamp.
    train_end = _row_of(raw, start + pd.Timedelta(days=360))
    val_end = _row_of(raw, start + pd.Timedelta(days=480))
    test_end = _row_of(raw, start + pd.Timedelta(days=600))
    seq_len = 96
    data = prepare(name, WindowSpec(seq_len, 48, 24), data_dir)
    assert (data.train.start, data.train.end) == (0, train_end)
    assert (data.val.start, data.val.end) == (train_end - seq_len, val_end)
    assert (data.test.start, data.test.end) == (val_end - seq_len, test_end)
    assert data.series.step == pd.Timedelta(step)


def test_etth1_window_counts_match_brute_force_enumeration(data_dir):
    window = WindowSpec(96, 48, 24)
    data = prepare("ETTh1", window, data_dir)
    raw = _raw(data_dir, "ETTh1")
    start = raw["date"].iloc[0]
    test_first_target = start + pd.Timedelta(days=480)  # the first forecast point in the test period
    test_last_row_date = start + pd.Timedelta(days=600) - pd.Timedelta(hours=1)
    # Enumerate every window whose forecast starts inside the test period and stays inside it.
    count = 0
    for first_pred in pd.date_range(test_first_target, test_last_row_date, freq="h"):
        if first_pred + pd.Timedelta(hours=window.pred_len - 1) <= test_last_row_date:
            count += 1
    assert count == 2857
    assert data.test.n_windows == count
    assert data.describe()["test_windows"] == 2857


def test_every_test_window_is_evaluated_including_the_last_partial_batch(data_dir):
    window = WindowSpec(96, 48, 24)
    data = prepare("ETTh1", window, data_dir)
    loader = DataLoader(data.test.dataset(), batch_size=32, shuffle=False)
    seen = 0
    last_y = None
    for x, y, x_mark, y_mark in loader:
        assert x.shape[1:] == (96, 7) and y.shape[1:] == (72, 7)
        assert x_mark.shape[1:] == (96, 4) and y_mark.shape[1:] == (72, 4)
        seen += x.shape[0]
        last_y = y[-1]
    assert seen == 2857 and 2857 % 32 != 0  # the last batch is partial and still there
    # The very last forecast point is the last row of the test period (row 14399 of the file).
    raw = _raw(data_dir, "ETTh1")
    values = raw.drop(columns="date").to_numpy()
    expected = (values[14399] - data.scaler.mean) / data.scaler.scale
    np.testing.assert_allclose(last_y[-1].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_scaler_is_fitted_on_train_rows_only(data_dir):
    data = prepare("ETTh1", WindowSpec(96, 48, 24), data_dir)
    raw = _raw(data_dir, "ETTh1").drop(columns="date").to_numpy()
    train = raw[:8640]
    np.testing.assert_allclose(data.scaler.mean, train.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(data.scaler.scale, train.std(axis=0), rtol=1e-12)
    # Scaled train rows are standardised; the test rows are not (distribution shift is kept).
    np.testing.assert_allclose(data.train.data.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(data.train.data.std(axis=0), 1, atol=1e-4)
    assert np.abs(data.test.data[96:].mean(axis=0)).max() > 0.05
    # Every split is scaled with the same statistics.
    np.testing.assert_allclose(data.test.data, (raw[11424:14400] - train.mean(0)) / train.std(0), atol=1e-5)


def test_wth_custom_split_seventy_ten_twenty(data_dir):
    raw = _raw(data_dir, "WTH")
    n = len(raw)
    seq_len = 168
    data = prepare("WTH", WindowSpec(seq_len, 168, 24), data_dir)
    n_train, n_test = int(n * 0.7), int(n * 0.2)
    assert (data.train.start, data.train.end) == (0, n_train)
    assert (data.val.start, data.val.end) == (n_train - seq_len, n - n_test)
    assert (data.test.start, data.test.end) == (n - n_test - seq_len, n)
    assert data.series.target == "WetBulbCelsius" and data.series.columns[-1] == "WetBulbCelsius"
    assert data.n_features == 12


def test_time_features_are_calendar_positions_in_half_unit_range():
    dates = pd.DatetimeIndex(["2016-07-01 00:00", "2016-07-01 23:45", "2016-12-31 12:30"])
    feats = time_features(dates, pd.Timedelta("15min"))
    assert feats.shape == (3, 5)
    assert feats.min() >= -0.5 and feats.max() <= 0.5
    # minute, hour, weekday (Fri=4, Sat=5), day of month, day of year
    np.testing.assert_allclose(feats[0], [-0.5, -0.5, 4 / 6 - 0.5, -0.5, 182 / 365 - 0.5], atol=1e-6)
    np.testing.assert_allclose(feats[1], [45 / 59 - 0.5, 0.5, 4 / 6 - 0.5, -0.5, 182 / 365 - 0.5], atol=1e-6)
    np.testing.assert_allclose(feats[2], [30 / 59 - 0.5, 12 / 23 - 0.5, 5 / 6 - 0.5, 0.5, 365 / 365 - 0.5], atol=1e-6)
    hourly = time_features(dates[:1], pd.Timedelta("1h"))
    assert hourly.shape == (1, 4)  # no minute-of-hour for hourly data


def test_ettm1_includes_minute_of_hour(data_dir):
    data = prepare("ETTm1", WindowSpec(96, 48, 24), data_dir)
    assert data.time_feature_names[0] == "minute_of_hour"
    np.testing.assert_allclose(data.train.marks[:8, 0], [m / 59 - 0.5 for m in (0, 15, 30, 45) * 2], atol=1e-6)


def test_split_borders_reject_a_seq_len_longer_than_train():
    from recurbench.errors import DataError

    with pytest.raises(DataError, match="seq_len 9000 is too long for the val split"):
        split_borders(17420, "ett_hour", 9000)
    with pytest.raises(DataError, match="needs 14400 rows"):
        split_borders(1000, "ett_hour", 96)


def test_windows_share_the_label_part_with_the_input(data_dir):
    data = prepare("ETTh1", WindowSpec(96, 48, 24), data_dir)
    x, y, _, _ = data.train.window_at(10)
    np.testing.assert_array_equal(x[-48:], y[:48])
    np.testing.assert_array_equal(y[48:], data.train.data[10 + 96 : 10 + 96 + 24])
    with pytest.raises(IndexError):
        data.train.window_at(data.train.n_windows)


def test_prepared_data_says_which_file_it_came_from_and_warns_when_it_is_not_the_registered_one(tmp_path, data_dir):
    import hashlib
    import warnings

    from recurbench.data.registry import get_spec
    from recurbench.errors import DataWarning

    window = WindowSpec(96, 48, 24)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)  # the registered file: no warning
        data = prepare("ETTh1", window, data_dir)
    assert data.provenance() == {"data_path": str(data_dir / "ETTh1.csv"), "data_sha256": get_spec("ETTh1").sha256,
                                 "data_registry": "match"}
    # One value changed: the file is read and used as before, with a warning naming it and both digests.
    text = (data_dir / "ETTh1.csv").read_text().splitlines()
    text[1] = text[1].rsplit(",", 1)[0] + ",30.5"
    changed = tmp_path / "ETTh1.csv"
    changed.write_text("\n".join(text) + "\n")
    digest = hashlib.sha256(changed.read_bytes()).hexdigest()
    with pytest.warns(DataWarning) as caught:
        other = prepare("ETTh1", window, tmp_path)
    (message,) = [str(w.message) for w in caught]
    assert message == (f"{changed}: sha256 {digest} is not the registry's {get_spec('ETTh1').sha256} for ETTh1; its "
                       "results need not compare with the published ones (`recurbench data verify ETTh1`)")
    assert other.provenance()["data_registry"] == "differs" and other.describe()["sha256"] == digest
    # A user's CSV, given by path, has no registry entry to compare with.
    assert prepare(str(changed), window).provenance() == {"data_path": str(changed), "data_sha256": digest}


def test_a_read_only_split_gives_windows_without_a_warning():
    # A Ray task receives the split's arrays read-only: torch.from_numpy warned on every run.
    import warnings

    from recurbench.data.protocol import Split, WindowDataset

    data, marks = np.arange(40, dtype=np.float32).reshape(20, 2), np.zeros((20, 1), dtype=np.float32)
    data.flags.writeable = marks.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        windows = WindowDataset(Split("train", 0, 20, data, marks, WindowSpec(4, 2, 3)))
    x, y, _, _ = windows[1]
    assert x[:, 0].tolist() == [2.0, 4.0, 6.0, 8.0] and y[:, 0].tolist() == [6.0, 8.0, 10.0, 12.0, 14.0]
