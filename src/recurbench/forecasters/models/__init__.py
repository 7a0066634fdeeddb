"""One module per architecture; ``ARCHITECTURES`` maps each model's name (as suites and the command line
use it) to its network class, RSA flag, Table 1 column and description. The sktime estimators wrap
the same networks under the same names (:data:`recurbench.forecasters.estimators.ESTIMATORS`).

The forecaster contract, for the built-ins and for plugins (entry-point group
``recurbench.forecasters``, or ``--models module.path:ClassName``; checked by
:func:`recurbench.testing.check_forecaster`):

* **Receives** ``__init__(cfg: ForecasterConfig)``: the window (``seq_len``, ``label_len``,
  ``pred_len``), the series and calendar widths (``n_features``, ``n_marks``) and the network sizes
  (``d_model``, ``n_heads``, ``e_layers``, ``d_layers``, ``d_ff``, ``dropout``, ...; each model reads
  those it uses). The ltsf suite fills it from its ``model`` settings (suite file or ``--set
  model.d_model=32``) and logs them as ``network.*`` params, with the model's name as tag ``model``.
* **Returns** from ``forward(x [B, seq_len, C], x_mark [B, seq_len, F], y_mark [B, label_len +
  pred_len, F])`` the forecast ``[B, pred_len, C]`` (scaled, as ``x``), on ``x``'s device.
* **Its own settings**: keyword parameters of ``__init__`` after ``cfg`` (``def __init__(self, cfg, *,
  layers: int = 1)``) are the plugin's own; the suite file's or the command line's ``plugin_settings``
  set them (``--set plugin_settings.NAME.layers=2``), checked against the signature and its annotations
  when the profile loads, and every run logs them, defaults included, as ``plugin_settings.*`` params.
* **State**: none between calls. Each window (row) is forecast on its own: no row reads another, and
  the same window gives the same forecast whatever else is in the batch or was forecast before.
  There are no episodes; "reset" is that nothing carries over.
* An RSA variant is an :class:`Architecture` with ``rsa=True`` and its ``baseline``; a plugin may give
  a ready :class:`Architecture` instead of a class.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from recurbench.forecasters.config import ForecasterConfig
from recurbench.forecasters.models.informer import Informer
from recurbench.forecasters.models.logsparse import LogSparseTransformer
from recurbench.forecasters.models.transformer_xl import TransformerXL
from recurbench.plugins import PluginRegistry, first_doc_line, other_kind


@dataclass(frozen=True)
class Architecture:
    network: type[nn.Module]
    rsa: bool
    paper_name: str
    """The model's column in the RSA paper's Table 1."""
    description: str
    """What ``recurbench list models`` says of it."""
    baseline: str | None = None
    """An RSA variant's baseline model (the same network without REMs)."""


def _plugin_architecture(obj: object, name: str) -> Architecture:
    """A plugin's entry: a ready :class:`Architecture`, or an ``nn.Module`` class built as ``cls(cfg)``."""
    if isinstance(obj, Architecture):
        return obj
    if isinstance(obj, type) and issubclass(obj, nn.Module):
        other_kind(obj, "forecaster")
        return Architecture(obj, False, name, first_doc_line(obj) or name)
    raise TypeError(f"{obj!r} is neither an nn.Module subclass nor an Architecture")


ARCHITECTURES: PluginRegistry[Architecture] = PluginRegistry("forecaster", {
    "informer": Architecture(Informer, False, "Informer", "Informer (Zhou et al. 2021): ProbSparse attention, "
                             "generative decoder; self-attention distilling off, as in the RSA paper (App. D.4)"),
    "rsa_informer": Architecture(Informer, True, "RSA-Informer", "Informer with RSA (REMs mixed into every "
                                 "attention through a learned gate; no distilling)", "informer"),
    "logsparse": Architecture(LogSparseTransformer, False, "LogSparse", "LogSparse Transformer (Li et al. 2019): "
                              "causal convolutional, log-sparse attention"),
    "rsa_logsparse": Architecture(LogSparseTransformer, True, "RSA-LogSparse", "LogSparse Transformer with RSA",
                                  "logsparse"),
    "xl": Architecture(TransformerXL, False, "XL", "Transformer-XL for forecasting: segment recurrence, relative "
                       "positions"),
    "rsa_xl": Architecture(TransformerXL, True, "RSA-XL", "Transformer-XL with RSA", "xl"),
}, _plugin_architecture, constructor=lambda arch: arch.network, supplied=1)
"""Every forecaster by name: the built-ins, plugins and ``module.path:ClassName`` names."""


def build_network(name: str, cfg: ForecasterConfig, **settings: object) -> nn.Module:
    """The network for model ``name``, built as ``network(cfg, **settings)`` (``settings``: a plugin's
    own, :meth:`~recurbench.plugins.PluginRegistry.settings_for`); an RSA model needs ``cfg.rsa``, a
    baseline must not have one."""
    arch = ARCHITECTURES[name]
    if arch.rsa and cfg.rsa is None:
        raise ValueError(f"model {name!r} needs REM heads (cfg.rsa)")
    if not arch.rsa and cfg.rsa is not None:
        cfg = cfg.with_(rsa=None)
    return arch.network(cfg, **settings)


__all__ = ["ARCHITECTURES", "Architecture", "Informer", "LogSparseTransformer", "TransformerXL", "build_network"]
