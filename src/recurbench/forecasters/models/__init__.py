"""One module per architecture; ``ARCHITECTURES`` maps each model name to its class and RSA flag."""

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
    baseline: str | None = None
    """An RSA variant's baseline model (the same network without REMs)."""


ARCHITECTURES: dict[str, Architecture] = {
    "informer": Architecture(Informer, False, "Informer"),
    "rsa_informer": Architecture(Informer, True, "RSA-Informer", "informer"),
    "logsparse": Architecture(LogSparseTransformer, False, "LogSparse"),
    "rsa_logsparse": Architecture(LogSparseTransformer, True, "RSA-LogSparse", "logsparse"),
    "xl": Architecture(TransformerXL, False, "XL"),
    "rsa_xl": Architecture(TransformerXL, True, "RSA-XL", "xl"),
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
