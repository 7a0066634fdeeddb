"""One module per architecture; ``ARCHITECTURES`` maps each model's name (as suites and the command line
use it) to its network class, RSA flag, Table 1 column and description. The sktime estimators wrap
the same networks under the same names (:data:`recurbench.forecasters.estimators.ESTIMATORS`)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from recurbench.forecasters.config import ForecasterConfig
from recurbench.forecasters.models.informer import Informer
from recurbench.forecasters.models.logsparse import LogSparseTransformer
from recurbench.forecasters.models.transformer_xl import TransformerXL


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


ARCHITECTURES: dict[str, Architecture] = {
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
}


def build_network(name: str, cfg: ForecasterConfig) -> nn.Module:
    """The network for model ``name``; an RSA model needs ``cfg.rsa``, a baseline must not have one."""
    arch = ARCHITECTURES[name]
    if arch.rsa and cfg.rsa is None:
        raise ValueError(f"model {name!r} needs REM heads (cfg.rsa)")
    if not arch.rsa and cfg.rsa is not None:
        cfg = cfg.with_(rsa=None)
    return arch.network(cfg)


__all__ = ["ARCHITECTURES", "Architecture", "Informer", "LogSparseTransformer", "TransformerXL", "build_network"]
