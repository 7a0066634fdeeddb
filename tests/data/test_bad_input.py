"""Bad CSVs get one clear error naming file, line and column; a user's own CSV is accepted."""

from __future__ import annotations

import re

import pytest

from recurbench.data import WindowSpec, prepare, read_series
from recurbench.errors import DataError

HEADER = "date,a,b,OT\n"


def _rows(n, start="2020-01-01 00:00:00", step="1h"):
    import pandas as pd

    dates = pd.date_range(start, periods=n, freq=step)
    return [f"{d:%Y-%m-%d %H:%M:%S},{i}.5,{2 * i},{i % 7}" for i, d in enumerate(dates)]


def _write(tmp_path, lines, header=HEADER, name="mine.csv"):
    path = tmp_path / name
    path.write_text(header + "\n".join(lines) + "\n")
    return path


def _expect(path, pattern, **kw):
    with pytest.raises(DataError) as info:
        read_series(path, **kw)
    message = str(info.value)
    assert str(path) in message
    assert re.search(pattern, message), message
    return message


def test_missing_date_column(tmp_path):
    path = _write(tmp_path, ["2020-01-01,1,2,3"], header="time,a,b,OT\n")
    _expect(path, r"no 'date' column; the header has 'time', 'a', 'b', 'OT'")


@pytest.mark.parametrize(
    "bad_cell, pattern",
    [("", r"line 5 \(data row 4\), column 'b': empty cell"),
     ("abc", r"line 5 \(data row 4\), column 'b': non-numeric value 'abc'"),
     ("NaN", r"line 5 \(data row 4\), column 'b': NaN 'NaN'"),
     ("inf", r"line 5 \(data row 4\), column 'b': non-finite value 'inf'")],
)
def test_bad_cells_name_line_and_column(tmp_path, bad_cell, pattern):
    lines = _rows(10)
    parts = lines[3].split(",")
    parts[2] = bad_cell
    lines[3] = ",".join(parts)
    _expect(_write(tmp_path, lines), pattern)


@pytest.mark.parametrize("header", ["date,a,b,a\n", "date, a, b, a\n"])
def test_a_repeated_column_name_is_refused(tmp_path, header):
    # pandas would read the second 'a' as 'a.1' and carry on with a column the file does not name.
    _expect(_write(tmp_path, _rows(6), header=header), r"line 1, column 4: the name 'a' repeats column 2$")


def test_short_row_is_a_missing_cell(tmp_path):
    lines = _rows(6)
    lines[2] = ",".join(lines[2].split(",")[:3])
    _expect(_write(tmp_path, lines), r"line 4 \(data row 3\), column 'OT': missing cell")


def test_unparseable_date(tmp_path):
    lines = _rows(6)
    lines[4] = "yesterday" + lines[4][19:]
    _expect(_write(tmp_path, lines), r"line 6 \(data row 5\), column 'date': unparseable date 'yesterday'")


def test_duplicated_timestamp(tmp_path):
    lines = _rows(8)
    lines[5] = lines[4].split(",")[0] + "," + ",".join(lines[5].split(",")[1:])
    _expect(_write(tmp_path, lines), r"line 7 \(data row 6\), column 'date': duplicated timestamp '2020-01-01 04:00:00' \(same as line 6\)")


def test_irregular_timestamp(tmp_path):
    lines = _rows(8)
    del lines[3]  # a gap of two hours between data rows 3 and 4
    _expect(_write(tmp_path, lines), r"line 5 \(data row 4\), column 'date': irregular timestamp '2020-01-01 04:00:00': 0 days 02:00:00 after the previous row, expected the series' step of 0 days 01:00:00")


def test_backwards_timestamp(tmp_path):
    lines = _rows(8)
    lines[2], lines[3] = lines[3], lines[2]
    _expect(_write(tmp_path, lines), r"line 5 \(data row 4\), column 'date': timestamp '2020-01-01 02:00:00' is earlier")


def test_unknown_target(tmp_path):
    _expect(_write(tmp_path, _rows(5)), r"target column 'zz' not in the file's columns", target="zz")


def test_too_few_rows_for_the_window(tmp_path):
    path = _write(tmp_path, _rows(100))  # custom split: 70 / 10 / 20 rows
    with pytest.raises(DataError) as info:
        prepare(str(path), WindowSpec(8, 4, 24))
    message = str(info.value)
    assert str(path) in message
    assert "the val split has 18 rows" in message and "seq_len 8 + pred_len 24" in message


def test_a_users_csv_is_a_custom_dataset_with_target_last(tmp_path):
    path = _write(tmp_path, _rows(200), header="date,OT,a,b\n")
    data = prepare(str(path), WindowSpec(12, 6, 4), target="OT")
    assert data.series.columns == ("a", "b", "OT")
    assert (data.train.start, data.train.end) == (0, 140)
    assert (data.val.start, data.val.end) == (140 - 12, 160)
    assert (data.test.start, data.test.end) == (160 - 12, 200)
    assert data.test.n_windows == 40 + 12 - 12 - 4 + 1


def test_window_spec_rejects_label_longer_than_input():
    with pytest.raises(DataError, match=r"label_len \(50\) cannot exceed seq_len \(10\)"):
        WindowSpec(10, 50, 5)


@pytest.mark.parametrize(
    ("window", "message"),
    [
        # 0 used to read "pred_len must be a non-negative integer", though 0 is refused too
        ((96, 48, 0), "pred_len must be a positive integer, got 0"),
        ((96, 48, -1), "pred_len must be a positive integer, got -1"),
        ((96, 48, 2.0), "pred_len must be a positive integer, got 2.0"),
        ((0, 0, 24), "seq_len must be a positive integer, got 0"),
        ((96, -1, 24), "label_len must be a non-negative integer, got -1"),
    ],
)
def test_window_spec_says_which_lengths_it_accepts(window, message):
    with pytest.raises(DataError) as info:
        WindowSpec(*window)
    assert str(info.value) == message
    assert WindowSpec(1, 0, 1).label_len == 0  # the smallest window each message allows


def test_a_missing_registered_dataset_says_where_it_looked_and_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RECURBENCH_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "explicit").mkdir()
    with pytest.raises(DataError) as info:
        prepare("ETTh2", WindowSpec(96, 48, 24), data_dir=tmp_path / "explicit")
    message = str(info.value)
    assert "ETTh2.csv not found" in message
    for folder in ("explicit", "env", "cache/recurbench/data"):
        assert str(tmp_path / folder / "ETTh2.csv") in message
    assert "recurbench data fetch ETTh2" in message


def _read_exact(path, message):
    with pytest.raises(DataError) as info:
        read_series(path)
    assert str(info.value) == f"{path}: {message}"


def _blank_line_message(blank, data_line):
    return (f"line {blank}: blank line before the data row on line {data_line}; "
            "remove it (blank lines are accepted only at the end of the file)")


def test_a_blank_line_between_data_rows_is_refused_by_its_line(tmp_path):
    # pandas skips a blank line, so a later bad cell would be reported one line too early: the
    # 'abc' below is on line 9 of the file, which the old check called line 8.
    lines = _rows(10)
    lines[6] = lines[6].rsplit(",", 1)[0] + ",abc"
    lines.insert(3, "")  # file line 5
    _read_exact(_write(tmp_path, lines), _blank_line_message(5, 6))


def test_a_row_replaced_by_a_blank_line_is_refused_by_its_line(tmp_path):
    # without the check: an irregular timestamp at the line after the blank, one line off
    lines = _rows(10)
    lines[4] = ""  # file line 6
    _read_exact(_write(tmp_path, lines), _blank_line_message(6, 7))


@pytest.mark.parametrize("blank", ["   ", "\t", " \t "])
def test_a_whitespace_only_line_is_a_blank_line(tmp_path, blank):
    lines = _rows(8)
    lines.insert(2, blank)  # file line 4
    _read_exact(_write(tmp_path, lines), _blank_line_message(4, 5))


def test_a_blank_line_under_the_header_is_refused(tmp_path):
    _read_exact(_write(tmp_path, ["", "", *_rows(6)]), _blank_line_message(2, 4))


def test_a_blank_first_line_is_not_a_header(tmp_path):
    # pandas would skip it and read line 2 as the header, and every line number after it one off
    _read_exact(_write(tmp_path, _rows(6), header="\n" + HEADER), "line 1: blank line where the header should be")


@pytest.mark.parametrize(
    ("newline", "bom", "tail"),
    [("\n", "", ""), ("\n", "", "\n"), ("\n", "", "\n\n  \n"), ("\r\n", "", ""), ("\r\n", "", "\r\n"),
     ("\n", "\ufeff", ""), ("\r\n", "\ufeff", "\r\n")],
)
def test_blank_lines_at_the_end_crlf_and_a_bom_are_accepted(tmp_path, newline, bom, tail):
    path = tmp_path / "mine.csv"
    text = bom + newline.join([HEADER.rstrip("\n"), *_rows(12)]) + newline + tail
    path.write_bytes(text.encode("utf-8"))
    series = read_series(path)
    assert len(series) == 12
    assert series.columns == ("a", "b", "OT")
    assert series.values[-1].tolist() == [11.5, 22.0, 4.0]
