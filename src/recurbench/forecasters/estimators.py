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
from recurbench.forecasters.training import TrainConfig, model_device, train


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


_MINIMUMS = {"seq_len": 1, "label_len": 0, "max_epochs": 1, "batch_size": 1, "patience": 1}
"""The integer hyperparameters checked by the estimator itself: the window lengths (``_fit`` shortens them
to the data before the network's config sees them) and the training's (``TrainConfig`` names them
differently). The network's fields are checked by :meth:`ForecasterConfig.check`."""


class WindowedTorchForecaster(BaseForecaster):
    """Adapter base: windowing, scaling, training and prediction for one network (see module doc)."""

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
        "random_state", "device",
    )

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto",
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

    def _fit(self, y: pd.DataFrame, X: pd.DataFrame | None = None, fh: ForecastingHorizon | None = None):
        self._check_params()
        device = resolve_device(self.device, what=f"{type(self).__name__}: device")
        steps = fh.to_relative(self.cutoff)
        pred_len = int(max(steps))
        n = len(y)
        if n < pred_len + 1:
            raise ValueError(
                f"{type(self).__name__}: the series has {n} rows; forecasting {pred_len} steps ahead needs "
                f"at least {pred_len + 1}"
            )
        n_val = int(n * self.val_size) if self.val_size > 0 else 0
        n_train = n - n_val
        seq_len = max(1, min(self.seq_len, n_train - pred_len))
        if seq_len < self.seq_len:
            warnings.warn(
                f"{type(self).__name__}: series too short for seq_len={self.seq_len} with a horizon of "
                f"{pred_len}; using seq_len={seq_len}", stacklevel=2,
            )
        self.seq_len_ = seq_len
        self.history_ = y.iloc[-seq_len:]
        self.label_len_ = min(self.label_len, seq_len)
        self.pred_len_ = pred_len
        values = y.to_numpy(dtype=np.float64)
        self.scaler_ = StandardScaler.fit(values[:n_train])
        scaled = self.scaler_.transform(values).astype(np.float32)
        marks = _calendar(y.index)
        cfg = ForecasterConfig(
            n_features=values.shape[1], n_marks=marks.shape[1], seq_len=seq_len, label_len=self.label_len_,
            pred_len=pred_len, d_model=self.d_model, n_heads=self.n_heads, e_layers=self.e_layers,
            d_layers=self.d_layers, d_ff=self.d_ff, dropout=self.dropout, rsa=self._rsa(), **self._architecture(),
        )
        try:
            cfg.check()
            train_cfg = TrainConfig(
                epochs=self.max_epochs, batch_size=self.batch_size, learning_rate=self.learning_rate,
                patience=self.patience, val_checks_per_epoch=self.val_checks_per_epoch, **self._training(),
            )
        except ValueError as exc:  # ConfigError is one too
            raise ConfigError(f"{type(self).__name__}: {exc}") from None
        window = (seq_len, self.label_len_, pred_len)
        train_set = _ArrayWindows(scaled[:n_train], marks[:n_train], *window)
        # Validation windows start seq_len early so that their first input is complete (as the protocol).
        val_start = max(0, n_train - seq_len)
        val_set = _ArrayWindows(scaled[val_start:], marks[val_start:], *window) if n_val else None
        if train_cfg.val_checks_per_epoch > 1 and not (val_set is not None and len(val_set) > 0):
            # the training loop's own test for validation (it would skip the checks silently)
            raise ConfigError(
                f"{type(self).__name__}: val_checks_per_epoch={train_cfg.val_checks_per_epoch} validates within an "
                f"epoch, which needs validation windows: val_size={self.val_size!r} leaves {n_val} of the {n} rows, "
                f"and a window needs {pred_len} (the horizon)"
            )
        with torch.random.fork_rng(devices=rng_devices(device)):
            torch.manual_seed(self._seed())
            self.network_ = build_network(self.model_name, cfg).to(device)
            generator = torch.Generator().manual_seed(self._seed())
            self.training_ = train(self.network_, train_set, val_set, pred_len, train_cfg, generator=generator)
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
    """Informer (ProbSparse attention, optional distilling, generative decoder). ``mix``: the reference
    decoder's head-major reshape (:attr:`recurbench.forecasters.config.ForecasterConfig.mix`).

    Examples
    --------
    >>> from sktime.datasets import load_airline
    >>> from recurbench.forecasters.estimators import InformerForecaster
    >>> y = load_airline()
    >>> f = InformerForecaster(seq_len=24, label_len=12, d_model=16, n_heads=2, d_ff=16, max_epochs=1)
    >>> y_pred = f.fit(y, fh=[1, 2, 3]).predict()
    >>> len(y_pred)
    3
    """

    model_name = "informer"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto",
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
    """LogSparse Transformer (causal convolutional attention, log-sparse pattern).

    Examples
    --------
    >>> from sktime.datasets import load_airline
    >>> from recurbench.forecasters.estimators import LogSparseForecaster
    >>> y = load_airline()
    >>> f = LogSparseForecaster(seq_len=24, label_len=12, d_model=16, n_heads=2, d_ff=16, max_epochs=1)
    >>> y_pred = f.fit(y, fh=[1, 2, 3]).predict()
    >>> len(y_pred)
    3
    """

    model_name = "logsparse"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto",
        conv_kernel: int = 3, local_window: int = 0,
    ) -> None:
        self.conv_kernel = conv_kernel
        self.local_window = local_window
        super().__init__(**{k: v for k, v in locals().items() if k in WindowedTorchForecaster._COMMON})

    def _architecture(self) -> dict[str, Any]:
        return {"conv_kernel": self.conv_kernel, "local_window": self.local_window}


class TransformerXLForecaster(WindowedTorchForecaster):
    """Transformer-XL (segment recurrence with memory, relative positions).

    Examples
    --------
    >>> from sktime.datasets import load_airline
    >>> from recurbench.forecasters.estimators import TransformerXLForecaster
    >>> y = load_airline()
    >>> f = TransformerXLForecaster(seq_len=24, label_len=12, d_model=16, n_heads=2, d_ff=16, max_epochs=1)
    >>> y_pred = f.fit(y, fh=[1, 2, 3]).predict()
    >>> len(y_pred)
    3
    """

    model_name = "xl"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto",
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
    """REM heads for an RSA estimator: ``rem_heads`` = (k1..k6), ``rem_dilations`` one per dilated head;
    ``gate_init`` the gates' mu at start; ``rsa_lr_factor`` the gates' and REM parameters' learning rate
    as a multiple of ``learning_rate`` (:attr:`recurbench.forecasters.training.TrainConfig.rsa_lr_factor`;
    each estimator's default is the ltsf suite's for its model, whose ``ltsf.yaml`` says why: 1000 for
    RSA-Informer, 1 = one rate for every weight for RSA-LogSparse and RSA-XL);
    ``rsa_gate_lr_factor`` the gates' alone, if given (``TrainConfig.rsa_gate_lr_factor``)."""

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
    """Informer with RSA in every attention (REMs instead of the positional encoding). ``prob_rows``:
    the REM term on every ProbSparse query row (``"all"``) or on the active ones only (``"active"``,
    :attr:`recurbench.forecasters.config.RSASpec.prob_rows`).

    Examples
    --------
    >>> from sktime.datasets import load_airline
    >>> from recurbench.forecasters.estimators import RSAInformerForecaster
    >>> y = load_airline()
    >>> f = RSAInformerForecaster(seq_len=24, label_len=12, d_model=16, n_heads=2, d_ff=16, max_epochs=1, rem_heads=(2, 0, 0, 0, 0, 0))
    >>> y_pred = f.fit(y, fh=[1, 2, 3]).predict()
    >>> len(y_pred)
    3
    """

    model_name = "rsa_informer"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto",
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
    """LogSparse Transformer with RSA.

    Examples
    --------
    >>> from sktime.datasets import load_airline
    >>> from recurbench.forecasters.estimators import RSALogSparseForecaster
    >>> y = load_airline()
    >>> f = RSALogSparseForecaster(seq_len=24, label_len=12, d_model=16, n_heads=2, d_ff=16, max_epochs=1, rem_heads=(2, 0, 0, 0, 0, 0))
    >>> y_pred = f.fit(y, fh=[1, 2, 3]).predict()
    >>> len(y_pred)
    3
    """

    model_name = "rsa_logsparse"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto",
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
    """Transformer-XL with RSA (REMs instead of the learned relative positional encoding).

    Examples
    --------
    >>> from sktime.datasets import load_airline
    >>> from recurbench.forecasters.estimators import RSATransformerXLForecaster
    >>> y = load_airline()
    >>> f = RSATransformerXLForecaster(seq_len=24, label_len=12, d_model=16, n_heads=2, d_ff=16, max_epochs=1, rem_heads=(2, 0, 0, 0, 0, 0))
    >>> y_pred = f.fit(y, fh=[1, 2, 3]).predict()
    >>> len(y_pred)
    3
    """

    model_name = "rsa_xl"

    def __init__(
        self, seq_len: int = 96, label_len: int = 48, d_model: int = 512, n_heads: int = 8, e_layers: int = 2,
        d_layers: int = 1, d_ff: int = 2048, dropout: float = 0.05, max_epochs: int = 6, batch_size: int = 32,
        learning_rate: float = 1e-4, patience: int = 3, val_size: float = 0.0, random_state: int | None = None,
        val_checks_per_epoch: int = 1, device: str = "auto",
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
