"""sktime forecasters: Informer, LogSparse, Transformer-XL and their RSA variants.

One adapter base, :class:`WindowedTorchForecaster`, owns everything shared: standard scaling of the
series (fitted on the training data and inverted on the forecast), calendar features from the index,
cutting the series into ``(seq_len, label_len, pred_len)`` windows with stride 1, the Informer-style
training loop (:func:`recurbench.forecasters.training.train`) and seeding. Each estimator is a thin
subclass naming its network and its own hyperparameters.

Conventions: multivariate (every column in and out), ``fh`` required in ``fit`` and out-of-sample
only; the network predicts ``max(fh)`` steps and the requested ones are returned. A series shorter
than ``seq_len + max(fh)`` is handled by shortening the input window to what the data allow
(``seq_len_`` after fitting says which length was used). The estimators ignore exogenous ``X``.

Input rules, checked in ``fit`` and ``update`` before anything changes: every value finite (a NaN or an
infinite value is refused, naming its index label and column) and the index equally spaced (a datetime
index must have a frequency, month ends and the like included; ``update`` checks the rows it is given
and that they continue the fitted input window without a gap),
since the windows and the forecast's index assume one step between rows. Each refusal is a
``ValueError`` that names the first offending row.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
from sktime.forecasting.base import BaseForecaster, ForecastingHorizon

from recurbench.data.protocol import StandardScaler, time_features
from recurbench.devices import resolve_device, rng_devices
from recurbench.errors import ConfigError
from recurbench.forecasters.config import ForecasterConfig, RSASpec
from recurbench.forecasters.models import build_network
from recurbench.forecasters.training import EpochRecord, TrainConfig, ValCheck, model_device, train


class _ArrayWindows(torch.utils.data.Dataset):
    """Windows (stride 1) over one scaled array, as :class:`recurbench.data.protocol.WindowDataset`."""

    def __init__(self, values: np.ndarray, marks: np.ndarray, seq_len: int, label_len: int, pred_len: int) -> None:
        self.values = torch.as_tensor(values, dtype=torch.float32)
        self.marks = torch.as_tensor(marks, dtype=torch.float32)
        self.seq_len, self.label_len, self.pred_len = seq_len, label_len, pred_len

    def __len__(self) -> int:
        return max(0, len(self.values) - self.seq_len - self.pred_len + 1)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        s_end = i + self.seq_len
        y = slice(s_end - self.label_len, s_end + self.pred_len)
        return self.values[i:s_end], self.values[y], self.marks[i:s_end], self.marks[y]


def _calendar(index: pd.Index) -> np.ndarray:
    """Calendar features for a datetime-like index; zero columns for any other index."""
    if isinstance(index, pd.PeriodIndex):
        index = index.to_timestamp()
    if isinstance(index, pd.DatetimeIndex) and len(index) > 0:
        if len(index) > 1:
            step = index[1] - index[0]
        else:
            try:
                step = pd.Timedelta(pd.tseries.frequencies.to_offset(index.freq).nanos, unit="ns")
            except (TypeError, ValueError, AttributeError):  # no freq, or a calendar offset (month, year)
                step = pd.Timedelta(hours=1)
        return time_features(index, step)
    return np.zeros((len(index), 0), dtype=np.float32)


def _label(value: Any) -> str:
    """An index label as a user reads it (a timestamp's text; a MultiIndex row's levels)."""
    if isinstance(value, tuple):
        return "(" + ", ".join(map(str, value)) + ")"
    return str(value)


def _refuse_nonfinite(name: str, y: Any) -> None:
    """Raise a ValueError naming the first NaN or infinite value of ``y`` (row by row): its index label
    and column. ``y`` as given to ``fit``/``update``: a pandas Series or DataFrame, or a 1-D/2-D array
    (labels are then positions). Other containers are left to sktime's own checks."""
    column_names: list[Any] | None = None
    if isinstance(y, pd.Series):
        column_names = [y.name]
        y = y.to_frame()
    elif isinstance(y, np.ndarray) and y.ndim in (1, 2):
        y = pd.DataFrame(y.reshape(len(y), -1))
    if not isinstance(y, pd.DataFrame):
        return
    try:
        values = y.to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError):  # non-numeric columns: sktime refuses them in its own words
        return
    bad = ~np.isfinite(values)
    if not bad.any():
        return
    row, col = np.argwhere(bad)[0]  # row-major: the earliest row, then its first bad column
    column = (column_names or list(y.columns))[col]
    value = values[row, col]
    what = "a missing value (NaN)" if np.isnan(value) else f"an infinite value ({value})"
    where = f"index {_label(y.index[row])}" + ("" if column is None else f", column {column!r}")
    others = int(bad.sum()) - 1
    more = f" ({others} more after it)" if others else ""
    raise ValueError(
        f"{name}: y has {what} at {where}{more}; the network needs finite values: fill or drop them first"
    )


def _step_of(index: pd.Index) -> str | None:
    """The one step between the rows of ``index`` (a frequency alias such as ``h`` or ``ME``, or an
    integer step), or None when it has none. A datetime index has one when pandas can name its
    frequency, so month ends or business days pass although their steps differ in days; fewer than three
    rows cannot tell."""
    if len(index) < 3:
        return None
    if pd.api.types.is_integer_dtype(index.dtype):
        steps = np.unique(np.diff(index.to_numpy()))
        return str(steps[0]) if len(steps) == 1 else None
    if index.freq is not None:
        return index.freqstr
    try:
        return pd.infer_freq(index)
    except (TypeError, ValueError):  # e.g. repeated timestamps
        return None


def _off_step(index: pd.Index) -> tuple[int, str | None] | None:
    """``(row, step)``: the first row of ``index`` that is not one step after the row before it, and the
    step (:func:`_step_of`) of the rows that set it; None when the index is equally spaced, or is of a
    kind without steps (sktime's own checks judge those)."""
    if isinstance(index, pd.PeriodIndex):
        index = index.to_timestamp()
    if not (pd.api.types.is_integer_dtype(index.dtype) or isinstance(index, (pd.DatetimeIndex, pd.TimedeltaIndex))):
        return None
    n = len(index)
    if n < 3 or _step_of(index) is not None:
        return None

    def regular(rows: pd.Index) -> bool:
        return len(rows) < 3 or _step_of(rows) is not None

    # The longest equally spaced prefix index[:head] and suffix index[tail:], by bisection (a part of an
    # equally spaced run is one too). The longer one sets the step: a gap after the first row is
    # reported there, not at the row after it.
    lo, hi = 2, n  # index[:lo] regular, index[:hi] not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if regular(index[:mid]) else (lo, mid)
    head = lo
    lo, hi = 0, n - 2  # index[lo:] not regular, index[hi:] regular
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if regular(index[mid:]) else (mid, hi)
    tail = hi
    if head >= n - tail:
        return head, _step_of(index[:head])
    return tail, _step_of(index[tail:])


def _refuse_unsorted(name: str, y: Any) -> None:
    """Raise a ValueError naming the first row at which ``y``'s index goes back (sktime's own error for
    a reversed index does not say which rows, nor how to fix it)."""
    index = getattr(y, "index", None)
    if not isinstance(index, pd.Index) or isinstance(index, pd.MultiIndex) or index.is_monotonic_increasing:
        return
    try:
        back = next(i for i in range(1, len(index)) if not index[i] > index[i - 1])
    except TypeError:
        return  # labels that do not compare: sktime says so
    raise ValueError(f"{name}: y's index is not in increasing order: {_label(index[back])} (row {back}) comes after "
                     f"{_label(index[back - 1])}; sort it first (y.sort_index()), and drop repeated labels")


def _refuse_irregular(name: str, index: pd.Index, *, update: bool = False) -> None:
    """Raise a ValueError naming the first row at which ``index`` is not equally spaced. ``update``: the
    index is the fitted input window joined with ``update``'s rows, and the error says that rows missing
    between them would put a gap inside the next input window."""
    found = _off_step(index)
    if found is None:
        return
    row, step = found
    after, before = _label(index[row]), _label(index[row - 1])
    of = "" if step is None else f" ({step})"
    if update:
        raise ValueError(
            f"{name}: update's y does not continue the series: {after} is not one step{of} after {before}, "
            "the row before it; pass the rows in between too, so that the input window has no gap"
        )
    raise ValueError(
        f"{name}: y's index is not equally spaced: {after} (row {row}) is not one step after {before}, the "
        f"step of the other rows{of}; the windows and the forecast's index need one step between rows: "
        "resample y to a regular frequency first (e.g. y.asfreq(...), then fill the gaps)"
    )


_RSA_PARAMETER_NAMES = {"k": "rem_heads", "dilations": "rem_dilations", "gate_init": "gate_init",
                        "prob_rows": "prob_rows"}
"""The RSA estimators' parameter for each :class:`RSASpec` field, so that its errors name the parameter."""

_MINIMUMS = {"seq_len": 1, "label_len": 0, "max_epochs": 1, "batch_size": 1, "patience": 1}
"""The integer hyperparameters checked by the estimator itself: the window lengths (``_fit`` shortens them
to the data before the network's config sees them) and the training's (``TrainConfig`` names them
differently). The network's fields are checked by :meth:`ForecasterConfig.check`."""


# ------------------------------------------------------------------------------------------ docstrings
# numpydoc entries, one home per parameter: each estimator's docstring is composed of the summary of its
# own, the entries it shares with the others and those of its family (``_docstring``).

_SHARED_PARAMETERS = """\
seq_len : int, default=96
    Input window: the network forecasts from the last ``seq_len`` observations. A series too short for
    ``seq_len`` plus the horizon is fitted with the longest window it allows (with a warning;
    ``seq_len_`` says which).
label_len : int, default=48
    Informer: decoder start tokens, the last ``label_len`` steps of the input window (at most
    ``seq_len``). LogSparse and Transformer-XL do not use it.
d_model : int, default=512
    Width of the embeddings and of every attention layer; a multiple of ``n_heads``.
n_heads : int, default=8
    Attention heads per layer.
e_layers : int, default=2
    Informer: encoder layers. LogSparse and Transformer-XL: their single stack has
    ``e_layers + d_layers`` layers.
d_layers : int, default=1
    Informer: decoder layers (see ``e_layers`` for the others).
d_ff : int, default=2048
    Hidden width of each layer's feed-forward block.
dropout : float, default=0.05
    Dropout probability, in [0, 1).
max_epochs : int, default=6
    At most this many epochs. The learning rate is halved after every epoch from the second on
    (Informer's schedule, :class:`recurbench.forecasters.training.TrainConfig`).
batch_size : int, default=32
    Training windows per batch (windows of stride 1 over the scaled series).
learning_rate : float, default=1e-4
    Adam's learning rate, positive and finite.
patience : int, default=3
    Early stopping: stop after this many validation checks without a better validation loss and keep
    the best weights. Only with ``val_size > 0``.
val_size : float, default=0.0
    Share of the series, from its end, held out for validation (early stopping), in [0, 1). 0: no
    validation; all ``max_epochs`` train and the last weights are kept.
random_state : int or None, default=None
    Seed of the weights' initialisation, the batch order and ProbSparse's key sampling (fit and
    predict repeat exactly for one seed); None is seed 0.
val_checks_per_epoch : int, default=1
    Validation checks per epoch, evenly spaced in batches, the last at the epoch's end; ``patience``
    counts checks. More than 1 needs ``val_size > 0``.
device : str, default="auto"
    Where the network trains and predicts: ``"auto"`` (the first CUDA GPU if there is one, else the
    CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``.
verbose : bool, default=False
    Print one line per epoch (training and validation loss, learning rate, seconds) and, with
    ``val_checks_per_epoch > 1``, one per validation check, as training goes.
"""

_INFORMER_PARAMETERS = """\
factor : int, default=5
    ProbSparse sampling factor c: each query is scored on ``c ceil(ln L_K)`` sampled keys, and the
    ``c ceil(ln L_Q)`` queries that score highest are the active ones.
attention : {"prob", "full"}, default="prob"
    Self-attention: ProbSparse or full (canonical) attention.
distil : bool, default=False
    Self-attention distilling (Informer eq. 5) between encoder layers. Off, as the RSA paper runs
    Informer (App. D.4); the RSA variant refuses it (it breaks the REMs' relative positions).
mix : bool, default=False
    The reference decoder's head-major reshape of its self-attention output
    (:attr:`recurbench.forecasters.config.ForecasterConfig.mix`).
"""

_LOGSPARSE_PARAMETERS = """\
conv_kernel : int, default=3
    Kernel of the causal convolution that produces queries and keys (1: plain attention).
local_window : int, default=0
    Also attend to this many most recent steps (0: the pure log-sparse pattern).
"""

_XL_PARAMETERS = """\
segment_len : int or None, default=None
    Segment length, the memory's too (None: the horizon, ``max(fh)``).
"""

_RSA_PARAMETERS = """\
rem_heads : tuple of 6 int or None, default=None
    REM heads per type, the RSA paper's (k1..k6): regular, cyclical cos, cyclical sin, dilated regular,
    dilated cos, dilated sin. They sum to ``n_heads`` and cyclical heads come in pairs (k2 = k3,
    k5 = k6). None: every head regular and undilated, ``(n_heads, 0, 0, 0, 0, 0)``.
rem_dilations : tuple of int or None, default=None
    One dilation factor (>= 1) per dilated head, k4 + k5 + k6 of them: the dilated regular heads
    first, then cos, then sin. None: no dilated heads.
gate_init : float, default=1.0
    The gates' mu at the start; sigma(mu) of each head's output is REM (1: 0.73, the paper's choice).
rsa_lr_factor : float, default={rsa_lr_factor}
    The gates and REM parameters train at ``learning_rate * rsa_lr_factor``
    (:attr:`recurbench.forecasters.training.TrainConfig.rsa_lr_factor`). The default is the ltsf
    suite's for this model (its ``ltsf.yaml`` says why: 1000 for RSA-Informer, 1 for RSA-LogSparse and
    RSA-XL).
rsa_gate_lr_factor : float or None, default=None
    The gates alone at ``learning_rate * rsa_gate_lr_factor``; None: ``rsa_lr_factor`` for them too.
"""

_PROB_ROWS_PARAMETER = """\
prob_rows : {"all", "active"}, default="all"
    Which ProbSparse query rows get the REM term: every row, or the active top-u ones only
    (:attr:`recurbench.forecasters.config.RSASpec.prob_rows`).
"""

_FITTED_ATTRIBUTES = """\
seq_len_ : int
    The input window used (``seq_len``, or shorter for a short series).
label_len_ : int
    The decoder start tokens used (``label_len``, at most ``seq_len_``).
pred_len_ : int
    The horizon the network forecasts, ``max(fh)``; ``predict`` accepts any horizon up to it.
history_ : pandas.DataFrame
    The last ``seq_len_`` observations, the input of the next forecast (``update`` moves it).
scaler_ : recurbench.data.protocol.StandardScaler
    Per-column standardisation fitted on the training rows, inverted on the forecast.
network_ : torch.nn.Module
    The trained network (the best validation check's weights with ``val_size > 0``).
training_ : recurbench.forecasters.training.TrainResult
    Per-epoch losses, learning rates, times and validation checks.
"""

_EXAMPLE = """\
>>> from sktime.datasets import load_airline
>>> from recurbench.forecasters.estimators import {name}
>>> y = load_airline()
>>> f = {name}(seq_len=24, label_len=12, d_model=16, n_heads=2, d_ff=16, max_epochs=1{extra})
>>> y_pred = f.fit(y, fh=[1, 2, 3]).predict()
>>> len(y_pred)
3
"""


def _docstring(summary: str, *own: str, example: str | None = None) -> str:
    """A numpydoc docstring: ``summary``, then Parameters (the shared ones, then ``own``), the fitted
    Attributes and, for an estimator, ``example`` as its Examples section."""
    sections = [summary.strip(), "Parameters\n----------\n" + _SHARED_PARAMETERS + "".join(own),
                "Attributes\n----------\n" + _FITTED_ATTRIBUTES]
    if example is not None:
        sections.append("Examples\n--------\n" + example)
    return "\n\n".join(section.rstrip("\n") for section in sections) + "\n"


def _example(name: str, extra: str = "") -> str:
    return _EXAMPLE.format(name=name, extra=extra)


class WindowedTorchForecaster(BaseForecaster):
    __doc__ = _docstring(
        "Adapter base: windowing, scaling, training and prediction for one network (see the module's "
        "docstring). Each estimator names its network (``model_name``) and adds its own parameters."
    )

    _tags: ClassVar[dict[str, Any]] = {
        "authors": ["recurbench"],
        "python_dependencies": "torch",
        "y_inner_mtype": "pd.DataFrame",
        "X_inner_mtype": "pd.DataFrame",
        "capability:multivariate": True,
        "capability:exogenous": False,
        "capability:insample": False,
        "capability:pred_int": False,
        "capability:missing_values": False,
        "requires-fh-in-fit": True,
        "fit_is_empty": False,
        "capability:random_state": True,
    }
    # The estimators keep only the input window they forecast from (``history_``), so sktime need not
    # store the whole series in ``_y`` (its default until 1.3.0, with a FutureWarning on every instance).
    _config: ClassVar[dict[str, Any]] = {"remember_data": False}

    model_name: ClassVar[str]
    _COMMON = (
        "seq_len", "label_len", "d_model", "n_heads", "e_layers", "d_layers", "d_ff", "dropout",
        "max_epochs", "batch_size", "learning_rate", "patience", "val_size", "val_checks_per_epoch",
        "random_state", "device", "verbose",
    )

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto", verbose: bool = False,
    ) -> None:
        self.seq_len = seq_len
        self.label_len = label_len
        self.d_model = d_model
        self.n_heads = n_heads
        self.e_layers = e_layers
        self.d_layers = d_layers
        self.d_ff = d_ff
        self.dropout = dropout
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.patience = patience
        self.val_size = val_size
        self.val_checks_per_epoch = val_checks_per_epoch
        self.random_state = random_state
        self.device = device
        self.verbose = verbose
        super().__init__()
        # sktime (1.2) creates these only when remember_data is on at construction; a later
        # set_config(remember_data=True) then expects them to exist.
        self._y = self._X = None

    # -- what subclasses add -------------------------------------------------------------------------
    def _architecture(self) -> dict[str, Any]:
        """Model-specific ForecasterConfig fields."""
        return {}

    def _rsa(self) -> RSASpec | None:
        return None

    def _training(self) -> dict[str, Any]:
        """Model-specific TrainConfig fields."""
        return {}

    # -- sktime ---------------------------------------------------------------------------------------
    def _seed(self) -> int:
        return 0 if self.random_state is None else int(self.random_state)

    def _check_params(self) -> None:
        """Refuse a hyperparameter that cannot work, by its name, before anything is fitted (the network's
        fields are checked by :meth:`ForecasterConfig.check` in ``_fit``, with the class name added)."""
        name = type(self).__name__
        for param, minimum in _MINIMUMS.items():
            value = getattr(self, param)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
                raise ConfigError(f"{name}: {param} must be an integer >= {minimum}, got {value!r}")
        if self.label_len > self.seq_len:
            raise ConfigError(f"{name}: label_len ({self.label_len}) must not exceed seq_len ({self.seq_len})")
        for param, fits, rule in (
            ("learning_rate", lambda v: 0 < v < math.inf, "a positive finite number"),
            ("dropout", lambda v: 0 <= v < 1, "a number in [0, 1)"),
            ("val_size", lambda v: 0 <= v < 1, "a number in [0, 1)"),
        ):
            value = getattr(self, param)  # NaN fails every comparison, so it is refused too
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not fits(value):
                raise ConfigError(f"{name}: {param} must be {rule}, got {value!r}")

    def _check_X_y(self, X: Any = None, y: Any = None, **kwargs: Any) -> tuple[Any, Any]:
        # sktime calls this first in fit, fit_predict and update, before the cutoff moves or anything is
        # fitted: the input rules (module docstring) are checked here. The values before sktime's own
        # checks, whose error for a NaN does not say where it is; the spacing on the series it returns.
        name = type(self).__name__
        if y is not None:
            _refuse_nonfinite(name, y)
            _refuse_unsorted(name, y)
        X_inner, y_inner = super()._check_X_y(X=X, y=y, **kwargs)
        if isinstance(y_inner, pd.DataFrame):  # a panel is fitted series by series, each checked then
            _refuse_irregular(name, y_inner.index)
            if self.is_fitted and getattr(self, "history_", None) is not None:  # update (fit resets first)
                if list(y_inner.columns) != list(self.history_.columns):
                    raise ValueError(f"{name}: update's y has the columns {list(y_inner.columns)}, the fitted series "
                                     f"{list(self.history_.columns)}: pass the same columns, in the same order")
                _refuse_irregular(name, self.history_.index.union(y_inner.index), update=True)
        return X_inner, y_inner

    def _progress(self, epochs: int, checks: int) -> dict[str, Any]:
        """``train``'s callbacks for ``verbose``: a line per epoch and, with several validation checks per
        epoch, a line per check; none when quiet."""
        if not self.verbose:
            return {}
        name = type(self).__name__

        def on_epoch(record: EpochRecord) -> None:
            val = "" if record.val_loss is None else f", val loss {record.val_loss:.4f}"
            print(f"{name}: epoch {record.epoch}/{epochs}: train loss {record.train_loss:.4f}{val}, "
                  f"lr {record.learning_rate:.3g} ({record.seconds:.1f} s)", flush=True)

        def on_check(check: ValCheck) -> None:
            print(f"{name}: epoch {check.epoch}/{epochs}, batch {check.batches}/{check.epoch_batches}: "
                  f"val loss {check.val_loss:.4f}", flush=True)

        return {"on_epoch": on_epoch, "on_check": on_check} if checks > 1 else {"on_epoch": on_epoch}

    def _fit(self, y: pd.DataFrame, X: pd.DataFrame | None = None, fh: ForecastingHorizon | None = None):
        # Nothing is stored on self until the network has trained: a refused fit leaves no fitted state.
        name = type(self).__name__
        self._check_params()
        device = resolve_device(self.device, what=f"{name}: device")
        pred_len = int(max(fh.to_relative(self.cutoff)))
        n = len(y)
        if n < pred_len + 1:
            raise ValueError(
                f"{name}: the series has {n} rows; forecasting {pred_len} steps ahead needs at least {pred_len + 1}"
            )
        n_val = int(n * self.val_size) if self.val_size > 0 else 0
        n_train = n - n_val
        seq_len = max(1, min(self.seq_len, n_train - pred_len))
        if seq_len < self.seq_len:
            warnings.warn(
                f"{name}: series too short for seq_len={self.seq_len} with a horizon of {pred_len}; using "
                f"seq_len={seq_len}", stacklevel=2,
            )
        label_len = min(self.label_len, seq_len)
        values = y.to_numpy(dtype=np.float64)
        marks = _calendar(y.index)
        cfg = ForecasterConfig(
            n_features=values.shape[1], n_marks=marks.shape[1], seq_len=seq_len, label_len=label_len,
            pred_len=pred_len, d_model=self.d_model, n_heads=self.n_heads, e_layers=self.e_layers,
            d_layers=self.d_layers, d_ff=self.d_ff, dropout=self.dropout, rsa=self._rsa(), **self._architecture(),
        )
        try:
            cfg.check(rsa_names=_RSA_PARAMETER_NAMES)
            train_cfg = TrainConfig(
                epochs=self.max_epochs, batch_size=self.batch_size, learning_rate=self.learning_rate,
                patience=self.patience, val_checks_per_epoch=self.val_checks_per_epoch, **self._training(),
            )
        except ValueError as exc:  # ConfigError is one too
            raise ConfigError(f"{name}: {exc}") from None
        scaler = StandardScaler.fit(values[:n_train])
        scaled = scaler.transform(values).astype(np.float32)
        window = (seq_len, label_len, pred_len)
        train_set = _ArrayWindows(scaled[:n_train], marks[:n_train], *window)
        # Validation windows start seq_len early so that their first input is complete (as the protocol).
        val_start = max(0, n_train - seq_len)
        val_set = _ArrayWindows(scaled[val_start:], marks[val_start:], *window) if n_val else None
        if train_cfg.val_checks_per_epoch > 1 and not (val_set is not None and len(val_set) > 0):
            # the training loop's own test for validation (it would skip the checks silently)
            raise ConfigError(
                f"{name}: val_checks_per_epoch={train_cfg.val_checks_per_epoch} validates within an "
                f"epoch, which needs validation windows: val_size={self.val_size!r} leaves {n_val} of the {n} rows, "
                f"and a window needs {pred_len} (the horizon)"
            )
        with torch.random.fork_rng(devices=rng_devices(device)):
            torch.manual_seed(self._seed())
            network = build_network(self.model_name, cfg).to(device)
            generator = torch.Generator().manual_seed(self._seed())
            training = train(network, train_set, val_set, pred_len, train_cfg, generator=generator,
                             **self._progress(train_cfg.epochs, train_cfg.val_checks_per_epoch))
        self.seq_len_, self.label_len_, self.pred_len_ = seq_len, label_len, pred_len
        self.history_ = y.iloc[-seq_len:]
        self.scaler_ = scaler
        self.network_, self.training_ = network, training
        return self

    def _predict(self, fh: ForecastingHorizon, X: pd.DataFrame | None = None) -> pd.DataFrame:
        y = self.history_
        steps = np.asarray(fh.to_relative(self.cutoff), dtype=int)
        if steps.max() > self.pred_len_:
            raise ValueError(
                f"{type(self).__name__}: fitted for horizons up to {self.pred_len_}, asked for {steps.max()}; "
                "fit again with the longer fh"
            )
        history = y.iloc[-self.seq_len_ :]
        x = self.scaler_.transform(history.to_numpy(dtype=np.float64)).astype(np.float32)
        future_index = ForecastingHorizon(np.arange(1, self.pred_len_ + 1), is_relative=True).to_absolute_index(
            self.cutoff
        )
        marks = _calendar(history.index.append(future_index))
        x_mark = marks[: self.seq_len_]
        y_mark = marks[self.seq_len_ - self.label_len_ :]
        device = model_device(self.network_)
        with torch.random.fork_rng(devices=rng_devices(device)), torch.no_grad():
            torch.manual_seed(self._seed())  # ProbSparse samples keys: repeatable predictions
            self.network_.eval()
            out = self.network_(
                *(torch.from_numpy(a)[None].to(device) for a in (x, x_mark, y_mark))
            )[0].cpu().numpy()
        forecast = self.scaler_.inverse_transform(out.astype(np.float64))[steps - 1]
        return pd.DataFrame(forecast, index=fh.to_absolute_index(self.cutoff), columns=y.columns)

    def _update(self, y: pd.DataFrame, X: pd.DataFrame | None = None, update_params: bool = True):
        # New observations move the cutoff and the input window; the network is not retrained.
        known = self.history_[~self.history_.index.isin(y.index)]
        self.history_ = pd.concat([known, y]).sort_index().iloc[-self.seq_len_ :]
        return self

    @classmethod
    def get_test_params(cls, parameter_set: str = "default") -> list[dict[str, Any]]:
        tiny = {
            "seq_len": 8, "label_len": 4, "d_model": 8, "n_heads": 2, "e_layers": 1, "d_layers": 1,
            "d_ff": 8, "max_epochs": 1, "batch_size": 16, "random_state": 0,
        }
        return [tiny, {**tiny, "seq_len": 6, "label_len": 2, "val_size": 0.25}]


# ------------------------------------------------------------------------------------------- baselines


class InformerForecaster(WindowedTorchForecaster):
    __doc__ = _docstring(
        "Informer (Zhou et al. 2021): ProbSparse self-attention, a generative decoder, and self-attention "
        "distilling if asked for (``distil``; off by default, as the RSA paper runs it).",
        _INFORMER_PARAMETERS, example=_example("InformerForecaster"),
    )

    model_name = "informer"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto", verbose: bool = False,
        factor: int = 5, attention: str = "prob", distil: bool = False, mix: bool = False,
    ) -> None:
        self.factor = factor
        self.attention = attention
        self.distil = distil
        self.mix = mix
        super().__init__(**{k: v for k, v in locals().items() if k in WindowedTorchForecaster._COMMON})

    def _architecture(self) -> dict[str, Any]:
        return {"factor": self.factor, "attention": self.attention, "distil": self.distil, "mix": self.mix}

    @classmethod
    def get_test_params(cls, parameter_set: str = "default") -> list[dict[str, Any]]:
        params = super().get_test_params(parameter_set)
        return [params[0], {**params[1], "mix": True}]


class LogSparseForecaster(WindowedTorchForecaster):
    __doc__ = _docstring(
        "LogSparse Transformer (Li et al. 2019): causal convolutional attention under the log-sparse pattern.",
        _LOGSPARSE_PARAMETERS, example=_example("LogSparseForecaster"),
    )

    model_name = "logsparse"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto", verbose: bool = False,
        conv_kernel: int = 3, local_window: int = 0,
    ) -> None:
        self.conv_kernel = conv_kernel
        self.local_window = local_window
        super().__init__(**{k: v for k, v in locals().items() if k in WindowedTorchForecaster._COMMON})

    def _architecture(self) -> dict[str, Any]:
        return {"conv_kernel": self.conv_kernel, "local_window": self.local_window}


class TransformerXLForecaster(WindowedTorchForecaster):
    __doc__ = _docstring(
        "Transformer-XL (Dai et al. 2019) for forecasting: segment recurrence with memory, relative positions.",
        _XL_PARAMETERS, example=_example("TransformerXLForecaster"),
    )

    model_name = "xl"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto", verbose: bool = False,
        segment_len: int | None = None,
    ) -> None:
        self.segment_len = segment_len
        super().__init__(**{k: v for k, v in locals().items() if k in WindowedTorchForecaster._COMMON})

    def _architecture(self) -> dict[str, Any]:
        return {"segment_len": self.segment_len}

    @classmethod
    def get_test_params(cls, parameter_set: str = "default") -> list[dict[str, Any]]:
        params = super().get_test_params(parameter_set)
        return [{**params[0], "segment_len": 4}, {**params[1], "segment_len": 3}]


# ------------------------------------------------------------------------------------------ RSA variants


_RSA_ONLY = ("rem_heads", "rem_dilations", "gate_init", "rsa_lr_factor", "rsa_gate_lr_factor", "prob_rows", "self",
             "__class__")


class _RSAMixin:
    """REM heads and their learning rates for an RSA estimator (the parameters: ``_RSA_PARAMETERS``)."""

    rem_heads: tuple[int, ...] | None
    rem_dilations: tuple[int, ...] | None
    gate_init: float
    rsa_lr_factor: float
    rsa_gate_lr_factor: float | None
    n_heads: int

    def _training(self) -> dict[str, Any]:
        gate = None if self.rsa_gate_lr_factor is None else float(self.rsa_gate_lr_factor)
        return {"rsa_lr_factor": float(self.rsa_lr_factor), "rsa_gate_lr_factor": gate}

    def _rsa(self) -> RSASpec:
        k = tuple(self.rem_heads) if self.rem_heads is not None else (self.n_heads, 0, 0, 0, 0, 0)
        return RSASpec(k=k, dilations=tuple(self.rem_dilations or ()), gate_init=self.gate_init,  # type: ignore[arg-type]
                       prob_rows=getattr(self, "prob_rows", "all"))

    @classmethod
    def _rsa_test_params(cls, params: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Two heads: one regular REM, or one dilated regular REM with factor 2.
        return [{**params[0], "rem_heads": (2, 0, 0, 0, 0, 0)}, {**params[1], "rem_heads": (1, 0, 0, 1, 0, 0),
                                                                  "rem_dilations": (2,)}]


class RSAInformerForecaster(_RSAMixin, InformerForecaster):
    __doc__ = _docstring(
        "Informer with RSA in every attention: REMs mixed in through a learned gate per layer, in place "
        "of the positional encoding (RSA paper, Sec. 4.1).",
        _INFORMER_PARAMETERS, _RSA_PARAMETERS.format(rsa_lr_factor=1000.0), _PROB_ROWS_PARAMETER,
        example=_example("RSAInformerForecaster", ", rem_heads=(2, 0, 0, 0, 0, 0)"),
    )

    model_name = "rsa_informer"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto", verbose: bool = False,
        factor: int = 5, attention: str = "prob", distil: bool = False, mix: bool = False,
        rem_heads: tuple[int, ...] | None = None, rem_dilations: tuple[int, ...] | None = None, gate_init: float = 1.0,
        rsa_lr_factor: float = 1000.0, rsa_gate_lr_factor: float | None = None, prob_rows: str = "all",
    ) -> None:
        self.rem_heads = rem_heads
        self.rem_dilations = rem_dilations
        self.gate_init = gate_init
        self.rsa_lr_factor = rsa_lr_factor
        self.rsa_gate_lr_factor = rsa_gate_lr_factor
        self.prob_rows = prob_rows
        super().__init__(**{k: v for k, v in locals().items() if k not in _RSA_ONLY})

    @classmethod
    def get_test_params(cls, parameter_set: str = "default") -> list[dict[str, Any]]:
        params = cls._rsa_test_params(super().get_test_params(parameter_set))
        return [params[0], {**params[1], "prob_rows": "active", "factor": 1}]  # factor 1: 2 of 6 rows active


class RSALogSparseForecaster(_RSAMixin, LogSparseForecaster):
    __doc__ = _docstring(
        "LogSparse Transformer with RSA: REMs mixed into every attention through a learned gate, in place "
        "of the positional encoding.",
        _LOGSPARSE_PARAMETERS, _RSA_PARAMETERS.format(rsa_lr_factor=1.0),
        example=_example("RSALogSparseForecaster", ", rem_heads=(2, 0, 0, 0, 0, 0)"),
    )

    model_name = "rsa_logsparse"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto", verbose: bool = False,
        conv_kernel: int = 3, local_window: int = 0,
        rem_heads: tuple[int, ...] | None = None, rem_dilations: tuple[int, ...] | None = None, gate_init: float = 1.0,
        rsa_lr_factor: float = 1.0, rsa_gate_lr_factor: float | None = None,
    ) -> None:
        self.rem_heads = rem_heads
        self.rem_dilations = rem_dilations
        self.gate_init = gate_init
        self.rsa_lr_factor = rsa_lr_factor
        self.rsa_gate_lr_factor = rsa_gate_lr_factor
        super().__init__(**{k: v for k, v in locals().items() if k not in _RSA_ONLY})

    @classmethod
    def get_test_params(cls, parameter_set: str = "default") -> list[dict[str, Any]]:
        return cls._rsa_test_params(super().get_test_params(parameter_set))


class RSATransformerXLForecaster(_RSAMixin, TransformerXLForecaster):
    __doc__ = _docstring(
        "Transformer-XL with RSA: REMs mixed into every attention through a learned gate, in place of the "
        "learned relative positional encoding.",
        _XL_PARAMETERS, _RSA_PARAMETERS.format(rsa_lr_factor=1.0),
        example=_example("RSATransformerXLForecaster", ", rem_heads=(2, 0, 0, 0, 0, 0)"),
    )

    model_name = "rsa_xl"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto", verbose: bool = False,
        segment_len: int | None = None,
        rem_heads: tuple[int, ...] | None = None, rem_dilations: tuple[int, ...] | None = None, gate_init: float = 1.0,
        rsa_lr_factor: float = 1.0, rsa_gate_lr_factor: float | None = None,
    ) -> None:
        self.rem_heads = rem_heads
        self.rem_dilations = rem_dilations
        self.gate_init = gate_init
        self.rsa_lr_factor = rsa_lr_factor
        self.rsa_gate_lr_factor = rsa_gate_lr_factor
        super().__init__(**{k: v for k, v in locals().items() if k not in _RSA_ONLY})

    @classmethod
    def get_test_params(cls, parameter_set: str = "default") -> list[dict[str, Any]]:
        return cls._rsa_test_params(super().get_test_params(parameter_set))


ESTIMATORS: dict[str, type[WindowedTorchForecaster]] = {
    cls.model_name: cls
    for cls in (
        InformerForecaster, RSAInformerForecaster, LogSparseForecaster, RSALogSparseForecaster,
        TransformerXLForecaster, RSATransformerXLForecaster,
    )
}
