"""Informer's long-sequence time-series forecasting (LTSF) protocol, exactly, with strict input checks.

What the protocol is (Zhou et al. 2021, and the facts its reference code implements):

* Splits. ETTh*: train rows [0, 8640), val [8640 - seq_len, 11520), test [11520 - seq_len, 14400):
  12/4/4 months of 30 days. ETTm*: the same borders x4 (15-minute steps). Any other CSV (WTH and a
  user's own file, Informer's ``custom``): train = int(0.7 N), test = int(0.2 N), val = the rest, val
  and test starting ``seq_len`` rows early so that their first window sees a full input.
* Scaling. A standard scaler fitted on the train rows only, applied to every split; metrics are
  computed on scaled data.
* Multivariate 'M' setting: every column in and out; the target column is known and placed last
  (Informer's ``Dataset_Custom`` order).
* Time features in [-0.5, 0.5]: hour of day, day of week, day of month, day of year, and for data
  sampled more often than hourly also minute of hour (first). Informer's own ETTm1 script runs with
  the hourly features and so drops minute-of-hour; recurbench includes it.
* Windows of (seq_len, label_len, pred_len) with stride 1. Every window of every split is used:
  the reference code drops the last partial batch of the test set, recurbench evaluates all of them.
"""

from __future__ import annotations

import csv
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from recurbench.data.registry import DATASETS, SplitKind, get_spec, locate, sha256_of
from recurbench.errors import DataError, DataWarning

DATE_COLUMN = "date"
SPLITS = ("train", "val", "test")

# Informer's borders in hours: 12 months of 30 days train, then 4 + 4 months.
_ETT_HOUR_BORDERS = (12 * 30 * 24, 12 * 30 * 24 + 4 * 30 * 24, 12 * 30 * 24 + 8 * 30 * 24)


@dataclass(frozen=True)
class WindowSpec:
    """Lengths of one forecasting window: the encoder sees ``seq_len`` steps, the decoder is fed the
    last ``label_len`` of them and predicts ``pred_len`` steps."""

    seq_len: int
    label_len: int
    pred_len: int

    def __post_init__(self) -> None:
        for key, minimum, accepted in (
            ("seq_len", 1, "a positive integer"), ("label_len", 0, "a non-negative integer"),
            ("pred_len", 1, "a positive integer"),
        ):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise DataError(f"{key} must be {accepted}, got {value!r}")
        if self.label_len > self.seq_len:
            raise DataError(f"label_len ({self.label_len}) cannot exceed seq_len ({self.seq_len})")


@dataclass(frozen=True)
class Series:
    """A validated multivariate series: strictly increasing dates with one constant step."""

    source: Path
    dates: pd.DatetimeIndex
    values: np.ndarray  # [N, C] float64, target column last
    columns: tuple[str, ...]
    target: str
    step: pd.Timedelta

    @property
    def freq(self) -> str:
        return freq_label(self.step)

    def __len__(self) -> int:
        return len(self.dates)


def freq_label(step: pd.Timedelta) -> str:
    """A pandas offset alias for the step (``h``, ``15min``, ``D`` ...)."""
    return pd.tseries.frequencies.to_offset(step).freqstr


def _where(path: Path, data_row: int, column: str | None = None) -> str:
    # data_row is 0-based over the data; the file's line adds the header and counts from 1.
    col = f", column '{column}'" if column is not None else ""
    return f"{path}: line {data_row + 2} (data row {data_row + 1}){col}"


def _check_row_lengths(path: Path) -> None:
    """Every row must have the header's number of fields (pandas would silently pad short rows), no
    column name may repeat (pandas would silently rename the second ``x`` to ``x.1``), and no blank
    line may come before a data row: pandas skips blank (or whitespace-only) lines, which would shift
    every line number that :func:`_where` reports after one. Blank lines at the end of the file are
    accepted: no row follows them, so they shift nothing."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh, skipinitialspace=True)
            header = next(reader, None)
            if header is None:
                raise DataError(f"{path}: the file is empty")
            if len(header) <= 1 and not "".join(header).strip():
                raise DataError(f"{path}: line 1: blank line where the header should be")
            seen: dict[str, int] = {}
            for i, name in enumerate(header, start=1):
                if name in seen:
                    raise DataError(f"{path}: line 1, column {i}: the name {name!r} repeats column {seen[name]}")
                seen[name] = i
            blank = None  # the first blank line not yet followed by a data row
            for line_no, row in enumerate(reader, start=2):
                if len(row) <= 1 and not "".join(row).strip():
                    blank = blank or line_no
                    continue
                if blank is not None:
                    raise DataError(
                        f"{path}: line {blank}: blank line before the data row on line {line_no}; "
                        "remove it (blank lines are accepted only at the end of the file)"
                    )
                if len(row) != len(header):
                    where = f"{path}: line {line_no} (data row {line_no - 1})"
                    if len(row) < len(header):
                        raise DataError(
                            f"{where}, column {header[len(row)]!r}: missing cell "
                            f"(the row has {len(row)} fields, the header {len(header)})"
                        )
                    raise DataError(f"{where}: {len(row)} fields, the header has {len(header)}")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not a UTF-8 text file ({exc})") from None


def read_series(path: str | os.PathLike[str], target: str | None = None) -> Series:
    """Read and validate a CSV with a ``date`` column and numeric columns.

    Raises :class:`DataError` naming file, line and column for: a missing ``date`` column, a ragged
    row, an empty or non-numeric or non-finite cell, an unparseable date, a duplicated, backwards or
    irregular timestamp, or an unknown target column. Checks run before anything is returned.
    """
    path = Path(path)
    raw = _read_frame(path)
    value_columns = [c for c in raw.columns if c != DATE_COLUMN]
    if target is None:
        target = value_columns[-1]
    if target not in value_columns:
        raise DataError(f"{path}: target column {target!r} not in the file's columns {value_columns}")
    ordered = [c for c in value_columns if c != target] + [target]
    values = np.empty((len(raw), len(ordered)), dtype=np.float64)
    for j, column in enumerate(ordered):
        values[:, j] = _numeric_column(path, raw[column], column)
    dates = _dates(path, raw[DATE_COLUMN])
    step = _time_step(path, dates, raw[DATE_COLUMN])
    return Series(
        source=path, dates=dates, values=values, columns=tuple(ordered), target=target, step=step
    )


def _read_frame(path: Path) -> pd.DataFrame:
    """The file's cells as text, with a ``date`` column, a value column and a data row at least."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    _check_row_lengths(path)
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty") from None
    except pd.errors.ParserError as exc:
        raise DataError(f"{path}: malformed CSV: {exc}") from None
    if DATE_COLUMN not in raw.columns:
        raise DataError(
            f"{path}: no '{DATE_COLUMN}' column; the header has {', '.join(map(repr, raw.columns))}"
        )
    if not [c for c in raw.columns if c != DATE_COLUMN]:
        raise DataError(f"{path}: no value columns besides '{DATE_COLUMN}'")
    if len(raw) == 0:
        raise DataError(f"{path}: no data rows under the header")
    return raw


def _numeric_column(path: Path, cells: pd.Series, column: str) -> np.ndarray:
    """One value column as floats: an empty, non-numeric or non-finite cell is refused by line."""
    stripped = cells.str.strip()
    empty = stripped == ""
    if empty.any():
        i = int(np.flatnonzero(empty.to_numpy())[0])
        raise DataError(f"{_where(path, i, column)}: empty cell")
    numeric = pd.to_numeric(stripped, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(numeric)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        kind = "NaN" if stripped.iloc[i].lower() in {"nan", "na", "n/a", "null", "none"} else (
            "non-finite value" if np.isinf(numeric[i]) else "non-numeric value"
        )
        raise DataError(f"{_where(path, i, column)}: {kind} {cells.iloc[i]!r}")
    return numeric


def _dates(path: Path, date_cells: pd.Series) -> pd.DatetimeIndex:
    """The ``date`` column parsed: an empty or unparseable date is refused by line."""
    if date_cells.isna().any() or (date_cells.str.strip() == "").any():
        i = int(np.flatnonzero((date_cells.isna() | (date_cells.fillna("").str.strip() == "")).to_numpy())[0])
        raise DataError(f"{_where(path, i, DATE_COLUMN)}: empty date")
    stripped_dates = date_cells.str.strip()
    # Infer one format from the first date (fast); only if that leaves gaps, parse each cell on its own.
    dates = pd.to_datetime(stripped_dates, errors="coerce")
    if dates.isna().any():
        dates = pd.to_datetime(stripped_dates, errors="coerce", format="mixed")
    if dates.isna().any():
        i = int(np.flatnonzero(dates.isna().to_numpy())[0])
        raise DataError(f"{_where(path, i, DATE_COLUMN)}: unparseable date {date_cells.iloc[i]!r}")
    dates = pd.DatetimeIndex(dates)
    if len(dates) < 2:
        raise DataError(f"{path}: need at least two rows to find the time step, found {len(dates)}")
    return dates


def _time_step(path: Path, dates: pd.DatetimeIndex, date_cells: pd.Series) -> pd.Timedelta:
    """The series' step (the most common one): a duplicated, backwards or irregular timestamp is
    refused by line."""
    diffs = dates[1:] - dates[:-1]
    zero = np.flatnonzero(diffs == pd.Timedelta(0))
    if len(zero):
        i = int(zero[0]) + 1
        raise DataError(
            f"{_where(path, i, DATE_COLUMN)}: duplicated timestamp {date_cells.iloc[i]!r} "
            f"(same as line {i + 1})"
        )
    backwards = np.flatnonzero(diffs < pd.Timedelta(0))
    if len(backwards):
        i = int(backwards[0]) + 1
        raise DataError(
            f"{_where(path, i, DATE_COLUMN)}: timestamp {date_cells.iloc[i]!r} is earlier than the "
            f"one before it ({date_cells.iloc[i - 1]!r}); dates must rise strictly"
        )
    step = pd.Series(diffs).mode().iloc[0]
    irregular = np.flatnonzero(diffs != step)
    if len(irregular):
        i = int(irregular[0]) + 1
        raise DataError(
            f"{_where(path, i, DATE_COLUMN)}: irregular timestamp {date_cells.iloc[i]!r}: "
            f"{diffs[i - 1]} after the previous row, expected the series' step of {step}"
        )
    return step


def split_borders(n_rows: int, split: SplitKind, seq_len: int) -> dict[str, tuple[int, int]]:
    """Row ranges ``[start, end)`` of train/val/test under Informer's protocol (see module doc)."""
    if split in ("ett_hour", "ett_minute"):
        scale = 1 if split == "ett_hour" else 4
        b_train, b_val, b_test = (b * scale for b in _ETT_HOUR_BORDERS)
        if n_rows < b_test:
            raise DataError(
                f"the ETT protocol needs {b_test} rows ({split}), the file has {n_rows}"
            )
        starts = (0, b_train - seq_len, b_val - seq_len)
        ends = (b_train, b_val, b_test)
    else:
        num_train = int(n_rows * 0.7)
        num_test = int(n_rows * 0.2)
        num_val = n_rows - num_train - num_test
        starts = (0, num_train - seq_len, n_rows - num_test - seq_len)
        ends = (num_train, num_train + num_val, n_rows)
    borders = dict(zip(SPLITS, zip(starts, ends, strict=True), strict=True))
    for name, (start, _end) in borders.items():
        if start < 0:
            raise DataError(
                f"seq_len {seq_len} is too long for the {name} split: it would start at row {start}"
            )
    return borders


@dataclass(frozen=True)
class StandardScaler:
    """Per-column standardisation (population std, as scikit-learn); constant columns get scale 1."""

    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray) -> StandardScaler:
        mean = values.mean(axis=0)
        std = values.std(axis=0)
        return cls(mean=mean, scale=np.where(std > 0, std, 1.0))

    def transform(self, values: np.ndarray) -> np.ndarray:
        return (values - self.mean) / self.scale

    def inverse_transform(self, values: np.ndarray) -> np.ndarray:
        return values * self.scale + self.mean


def time_feature_names(step: pd.Timedelta) -> tuple[str, ...]:
    """Informer's ``timeenc=1`` feature set for a sampling step."""
    if step < pd.Timedelta(hours=1):
        return ("minute_of_hour", "hour_of_day", "day_of_week", "day_of_month", "day_of_year")
    if step < pd.Timedelta(days=1):
        return ("hour_of_day", "day_of_week", "day_of_month", "day_of_year")
    return ("day_of_week", "day_of_month", "day_of_year")


def time_features(dates: pd.DatetimeIndex, step: pd.Timedelta) -> np.ndarray:
    """Calendar features scaled to [-0.5, 0.5], shape ``[N, F]`` (float32)."""
    formulas = {
        "minute_of_hour": lambda d: d.minute / 59.0 - 0.5,
        "hour_of_day": lambda d: d.hour / 23.0 - 0.5,
        "day_of_week": lambda d: d.dayofweek / 6.0 - 0.5,
        "day_of_month": lambda d: (d.day - 1) / 30.0 - 0.5,
        "day_of_year": lambda d: (d.dayofyear - 1) / 365.0 - 0.5,
    }
    names = time_feature_names(step)
    return np.stack([np.asarray(formulas[n](dates), dtype=np.float64) for n in names], axis=1).astype(np.float32)


def window_slices(i: int, window: WindowSpec) -> tuple[slice, slice]:
    """Rows of window ``i`` within its split: the encoder input, then the decoder's label + horizon."""
    s_end = i + window.seq_len
    return slice(i, s_end), slice(s_end - window.label_len, s_end + window.pred_len)


@dataclass(frozen=True)
class Split:
    """One split's rows, already scaled, and its window arithmetic."""

    name: str
    start: int
    end: int
    data: np.ndarray  # [rows, C] float32, scaled
    marks: np.ndarray  # [rows, F] float32 time features
    window: WindowSpec

    @property
    def rows(self) -> int:
        return self.end - self.start

    @property
    def n_windows(self) -> int:
        return max(0, self.rows - self.window.seq_len - self.window.pred_len + 1)

    def window_at(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Window ``i``: encoder input x, decoder target y (label_len + pred_len), and their marks."""
        if not 0 <= i < self.n_windows:
            raise IndexError(f"window {i} out of range for the {self.name} split ({self.n_windows} windows)")
        x, y = window_slices(i, self.window)
        return self.data[x], self.data[y], self.marks[x], self.marks[y]

    def dataset(self) -> WindowDataset:
        return WindowDataset(self)


def _writable(array: np.ndarray) -> np.ndarray:
    """``array`` contiguous and writable, copied only where it is not: one a Ray task received is
    read-only, and ``torch.from_numpy`` warns of that on every run."""
    array = np.ascontiguousarray(array)
    return array if array.flags.writeable else array.copy()


class WindowDataset(Dataset):
    """A torch dataset over every window of a split (stride 1): ``(x, y, x_mark, y_mark)``."""

    def __init__(self, split: Split) -> None:
        self.split = split
        self._data = torch.from_numpy(_writable(split.data))
        self._marks = torch.from_numpy(_writable(split.marks))

    def __len__(self) -> int:
        return self.split.n_windows

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        x, y = window_slices(i, self.split.window)
        return self._data[x], self._data[y], self._marks[x], self._marks[y]


@dataclass(frozen=True)
class LTSFData:
    """A dataset prepared under the protocol for one window shape."""

    name: str
    series: Series
    window: WindowSpec
    scaler: StandardScaler
    splits: dict[str, Split] = field(repr=False)
    time_feature_names: tuple[str, ...]
    sha256: str = ""
    """Of the file read."""
    registry_sha256: str | None = None
    """What the registry pins for a registered dataset (None for a user's CSV)."""

    def provenance(self) -> dict[str, str]:
        """Which file the data came from, as tags for a tracked run: ``data_path``, ``data_sha256`` and,
        for a registered dataset, ``data_registry`` (``match`` or ``differs``)."""
        out = {"data_path": str(self.series.source), "data_sha256": self.sha256}
        if self.registry_sha256 is not None:
            out["data_registry"] = "match" if self.sha256 == self.registry_sha256 else "differs"
        return out

    @property
    def train(self) -> Split:
        return self.splits["train"]

    @property
    def val(self) -> Split:
        return self.splits["val"]

    @property
    def test(self) -> Split:
        return self.splits["test"]

    @property
    def n_features(self) -> int:
        return len(self.series.columns)

    def describe(self) -> dict[str, object]:
        """The facts ``recurbench data info --json`` prints."""
        info: dict[str, object] = {
            "name": self.name,
            "path": str(self.series.source),
            "sha256": self.sha256,
            "rows": len(self.series),
            "columns": list(self.series.columns),
            "target": self.series.target,
            "freq": self.series.freq,
            "first_date": str(self.series.dates[0]),
            "last_date": str(self.series.dates[-1]),
            "time_features": list(self.time_feature_names),
            "seq_len": self.window.seq_len,
            "label_len": self.window.label_len,
            "pred_len": self.window.pred_len,
        }
        for name, split in self.splits.items():
            info[f"{name}_start"] = split.start
            info[f"{name}_end"] = split.end
            info[f"{name}_rows"] = split.rows
            info[f"{name}_windows"] = split.n_windows
        return info


def resolve(name_or_path: str, data_dir: str | os.PathLike[str] | None = None) -> tuple[str, Path, SplitKind, str | None]:
    """A registered name or a CSV path -> (name, path, split kind, target)."""
    if name_or_path in DATASETS:
        spec = get_spec(name_or_path)
        return spec.name, locate(spec.name, data_dir), spec.split, spec.target
    path = Path(name_or_path).expanduser()
    if path.suffix.lower() == ".csv" or path.exists():
        return path.stem, path, "custom", None
    raise DataError(
        f"unknown dataset {name_or_path!r}: not a registered name ({', '.join(DATASETS)}) "
        "and not a path to a CSV file"
    )


def prepare(
    name_or_path: str,
    window: WindowSpec,
    data_dir: str | os.PathLike[str] | None = None,
    target: str | None = None,
) -> LTSFData:
    """Load, validate, split, scale and window a dataset under Informer's protocol.

    ``name_or_path`` is a registered dataset or a user's CSV with a ``date`` column (split 0.7/0.1/0.2
    as Informer's ``custom``; its target defaults to the last column).
    """
    name, path, split_kind, default_target = resolve(name_or_path, data_dir)
    series = read_series(path, target=target or default_target)
    digest = sha256_of(path)
    pinned = get_spec(name_or_path).sha256 if name_or_path in DATASETS else None
    if pinned is not None and digest != pinned:
        warnings.warn(
            f"{path}: sha256 {digest} is not the registry's {pinned} for {name}; its results need not compare "
            f"with the published ones (`recurbench data verify {name}`)", DataWarning, stacklevel=2,
        )
    borders = split_borders(len(series), split_kind, window.seq_len)
    train_start, train_end = borders["train"]
    scaler = StandardScaler.fit(series.values[train_start:train_end])
    scaled = scaler.transform(series.values).astype(np.float32)
    marks = time_features(series.dates, series.step)
    splits = {
        s: Split(s, start, end, scaled[start:end], marks[start:end], window) for s, (start, end) in borders.items()
    }
    for split in splits.values():
        if split.n_windows < 1:
            raise DataError(
                f"{path}: the {split.name} split has {split.rows} rows (rows {split.start}..{split.end - 1}), "
                f"too few for seq_len {window.seq_len} + pred_len {window.pred_len}"
            )
    return LTSFData(
        name=name,
        series=series,
        window=window,
        scaler=scaler,
        splits=splits,
        time_feature_names=time_feature_names(series.step),
        sha256=digest,
        registry_sha256=pinned,
    )

