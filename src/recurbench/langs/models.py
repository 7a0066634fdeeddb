"""Recognisers of the regular-language suite (RSA paper, Sec. 4.2, App. E.2, Table 2).

Every model reads the input ids ``[B, T]`` (0 = padding, always at the end) and returns two sigmoid
units per position ``[B, T, 2]`` (fact sheet Sec. 4: a linear head and a sigmoid per unit). All are
causal, so a position never sees the padding after it and batches need no key mask.

* ``transformer`` -- a decoder-only Transformer with Vaswani's sinusoidal absolute positions: the
  shared post-norm :class:`~recurbench.forecasters.layers.blocks.SelfAttentionBlock` over a causal
  :class:`~recurbench.forecasters.layers.attention.FullAttention`.
* ``transformer_rel`` -- the paper's "Transformer*": the same stack with Transformer-XL's learnable
  relative positional encoding (Dai et al. 2019) instead, i.e. the forecasters' XL attention
  (:class:`~recurbench.forecasters.models.transformer_xl.RelativeAttentionLayer`) with no memory.
* ``rsa_i`` .. ``rsa_iv`` -- the Transformer with every self-attention an RSA layer (eq. 4): the
  forecasters' :class:`~recurbench.forecasters.layers.rsa.RSAMixer` with masked (causal) REMs, head
  settings I-IV = (k1..k6) of :data:`PAPER_HEADS`. The RSA paper gives **no dilation factor** for
  Table 2; every dilated head (settings II and IV) uses ``dilation`` (default 2: the languages are
  counters mod 2 -- Parity and Tomita 5 -- or alternate a/b, and App. E.2 credits a dilated pattern
  for Tomita 5). The REMs replace the absolute positions (``rsa_positional`` keeps them), as in the
  project's other RSA variants.
* ``lstm`` -- the recurrent reference: an LSTM of width d_model.

Sizes (Sec. 4.2): 3 layers, 5 heads, embedding 20. Not stated by the paper, chosen here: FFN width
40 (the reference code's 2 x d_model), no dropout (its default), embeddings scaled by sqrt(d_model)
before the positions are added (Vaswani et al.), one LSTM layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from recurbench.errors import ConfigError
from recurbench.forecasters.layers.attention import AttentionLayer, FullAttention
from recurbench.forecasters.layers.blocks import SelfAttentionBlock
from recurbench.forecasters.layers.embedding import sinusoid_table
from recurbench.forecasters.layers.rsa import REMHeadConfig, RSAMixer
from recurbench.forecasters.models.transformer_xl import RelativeAttentionLayer, XLBlock
from recurbench.plugins import KIND_BASES, PluginRegistry, first_doc_line, other_kind

VOCAB = 3
"""Padding plus the two symbols of every language."""
N_OUTPUTS = 2

PAPER_HEADS: dict[str, tuple[int, int, int, int, int, int]] = {
    "rsa_i": (5, 0, 0, 0, 0, 0),
    "rsa_ii": (3, 0, 0, 2, 0, 0),
    "rsa_iii": (3, 1, 1, 0, 0, 0),
    "rsa_iv": (3, 0, 0, 0, 1, 1),
}
"""RSA paper Table 2, head settings I-IV: (regular, cos, sin, dilated regular, dilated cos, dilated sin)."""


@dataclass(frozen=True)
class LangModelConfig:
    """The network's sizes and, for an RSA model, its REM heads."""

    d_model: int = 20
    """Embedding size (the paper's 20)."""
    n_heads: int = 5
    n_layers: int = 3
    d_ff: int = 40
    """Feed-forward width (not in the paper; the reference code's 2 x d_model)."""
    dropout: float = 0.0
    rem_k: tuple[int, int, int, int, int, int] | None = None
    """RSA models: head counts k1..k6, summing to n_heads; None for the others."""
    dilation: int = 2
    """RSA models: the factor of every dilated head (k4 + k5 + k6 of them); not given by the paper."""
    gate_init: float = 1.0
    """RSA models: initial gate-control mu of every layer (sigma(mu) = 0.73 to the REMs)."""
    rsa_positional: bool = False
    """RSA models: keep the sinusoidal absolute positions beside the REMs."""
    lstm_layers: int = 1
    """LSTM: stacked layers (width d_model)."""

    def rem_heads(self) -> REMHeadConfig:
        """The REM head layout (a ConfigError unless it fills exactly ``n_heads`` heads)."""
        if self.rem_k is None:
            raise ConfigError("an RSA model needs REM head counts (rem_k)")
        k = tuple(self.rem_k)
        n_dilated = sum(k[3:]) if len(k) == 6 else 0
        heads = REMHeadConfig(k=k, dilations=(self.dilation,) * n_dilated)  # type: ignore[arg-type]
        heads.validate(self.n_heads)
        return heads

    def check(self, rsa: bool) -> None:
        """Clear errors before anything is built: sizes, divisibility, and an RSA model's head layout."""
        for name in ("d_model", "n_heads", "n_layers", "d_ff", "dilation", "lstm_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: must be an integer >= 1, got {value!r}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout: must be in [0, 1), got {self.dropout!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if rsa:
            try:
                self.rem_heads()
            except ConfigError as exc:
                raise ConfigError(f"rem_k {list(self.rem_k or ())}: {exc}") from None
        elif self.rem_k is not None:
            raise ConfigError(f"rem_k {list(self.rem_k)}: only an RSA model has REM heads")


class Recognizer(nn.Module):
    """Embedding -> ``encode`` (the architecture) -> linear head -> sigmoid, per position.

    The language-model contract, for the built-ins and for plugins (entry-point group
    ``recurbench.langs``, or ``--models module.path:ClassName``; checked by
    :func:`recurbench.testing.check_language_model`). A plugin may subclass this class and write
    :meth:`encode` only, or be any ``nn.Module`` that keeps the contract:

    * **Receives** ``__init__(cfg: LangModelConfig)``: ``d_model``, ``n_heads``, ``n_layers``, ``d_ff``,
      ``dropout``, ... (each model reads those it uses), from the langs suite's ``model`` settings
      (suite file or ``--set model.d_model=40``), logged as ``network.*`` params with the model's
      name as tag ``model``.
    * **Returns** from ``forward(ids [B, T])`` (0 = padding, only at the end; symbols 1 and 2) the
      two units' probabilities ``[B, T, 2]`` in [0, 1], one prediction per prefix.
    * **Its own settings**: keyword parameters of ``__init__`` after ``cfg`` are the plugin's own, set by
      the profile's ``plugin_settings`` (``--set plugin_settings.NAME.layers=2``), checked against the
      signature when the profile loads and logged, defaults included, as ``plugin_settings.*`` params.
    * **Causal and stateless**: position t reads positions <= t only (so the padding after a string
      never changes its predictions), no row reads another, and nothing carries over between calls:
      every string is its own episode.

    Parameters
    ----------
    cfg : LangModelConfig
        Sizes of the network (``d_model`` is the embedding and hidden width).
    """

    def __init__(self, cfg: LangModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(VOCAB, cfg.d_model, padding_idx=0)
        self.head = nn.Linear(cfg.d_model, N_OUTPUTS)

    def encode(self, h: torch.Tensor) -> torch.Tensor:  # [B, T, d] -> [B, T, d]
        raise NotImplementedError

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids`` ``[B, T]`` -> the two units' probabilities ``[B, T, 2]``."""
        return torch.sigmoid(self.head(self.encode(self.embedding(ids))))

    def attention_layers(self) -> dict[str, nn.Module]:
        """The attention of each layer by name (what ``rsa_state`` reads the gates and REMs from)."""
        return {}


KIND_BASES["language model"] = Recognizer  # a plugin class of another group that derives from it is refused


class CausalTransformer(Recognizer):
    """Decoder-only Transformer: sinusoidal positions (``positional``) and, with ``heads``, RSA layers.

    Parameters
    ----------
    cfg : LangModelConfig
        Sizes, dropout and, for RSA layers, ``gate_init``.
    positional : bool
        Add Vaswani's sinusoidal absolute positions to the scaled embeddings.
    heads : REMHeadConfig or None
        The REM head layout of every layer's :class:`RSAMixer` (masked REMs); None for plain attention.
    """

    def __init__(self, cfg: LangModelConfig, *, positional: bool, heads: REMHeadConfig | None) -> None:
        super().__init__(cfg)
        self.positional = positional
        d, H = cfg.d_model, cfg.n_heads
        self.blocks = nn.ModuleList(
            SelfAttentionBlock(
                AttentionLayer(
                    FullAttention(causal=True, dropout=cfg.dropout), d, H,
                    mixer=None if heads is None else RSAMixer(H, heads, masked=True, gate_init=cfg.gate_init),
                ),
                d, cfg.d_ff, cfg.dropout,
            )
            for _ in range(cfg.n_layers)
        )

    def encode(self, h: torch.Tensor) -> torch.Tensor:
        h = h * math.sqrt(self.cfg.d_model)
        if self.positional:
            h = h + sinusoid_table(torch.arange(h.shape[1], device=h.device), self.cfg.d_model).to(h.dtype)
        for block in self.blocks:
            h = block(h)
        return h

    def attention_layers(self) -> dict[str, nn.Module]:
        return {f"layer.{i}": block.attention for i, block in enumerate(self.blocks)}


class RelativeTransformer(Recognizer):
    """"Transformer*": XL's relative attention ``(q + u) k' + (q + v) (W_r R_{i-j})'`` in every layer,
    with no memory and no absolute positions.

    Parameters
    ----------
    cfg : LangModelConfig
        Sizes and dropout.
    """

    def __init__(self, cfg: LangModelConfig) -> None:
        super().__init__(cfg)
        d, H = cfg.d_model, cfg.n_heads
        self.blocks = nn.ModuleList(
            XLBlock(RelativeAttentionLayer(d, H, cfg.dropout, relative=True, mixer=None), d, cfg.d_ff, cfg.dropout)
            for _ in range(cfg.n_layers)
        )

    def encode(self, h: torch.Tensor) -> torch.Tensor:
        h = h * math.sqrt(self.cfg.d_model)
        no_memory = h.new_zeros(h.shape[0], 0, h.shape[2])
        for block in self.blocks:
            h = block(h, no_memory)
        return h

    def attention_layers(self) -> dict[str, nn.Module]:
        return {f"layer.{i}": block.attention for i, block in enumerate(self.blocks)}


class LSTMRecognizer(Recognizer):
    """The recurrent reference: ``lstm_layers`` stacked LSTM layers of width ``d_model``.

    Parameters
    ----------
    cfg : LangModelConfig
        ``d_model``, ``lstm_layers`` and the dropout between stacked layers.
    """

    def __init__(self, cfg: LangModelConfig) -> None:
        super().__init__(cfg)
        self.lstm = nn.LSTM(cfg.d_model, cfg.d_model, num_layers=cfg.lstm_layers, batch_first=True,
                            dropout=cfg.dropout if cfg.lstm_layers > 1 else 0.0)

    def encode(self, h: torch.Tensor) -> torch.Tensor:
        return self.lstm(h)[0]


@dataclass(frozen=True)
class LangArchitecture:
    build: Callable[..., Recognizer]
    """``build(cfg, **settings)``: the built-ins take ``cfg`` only; a plugin class, its own settings too."""
    paper_name: str | None
    """The model's column in the RSA paper's Table 2 (None: not in it)."""
    rsa: bool = False
    description: str = ""
    """What ``recurbench list models`` says of it."""


def _plugin_language_model(obj: object, name: str) -> LangArchitecture:
    """A plugin's entry: a ready :class:`LangArchitecture`, or an ``nn.Module`` class built as ``cls(cfg)``."""
    if isinstance(obj, LangArchitecture):
        return obj
    if isinstance(obj, type) and issubclass(obj, nn.Module):
        other_kind(obj, "language model")
        return LangArchitecture(obj, None, description=first_doc_line(obj) or name)
    raise TypeError(f"{obj!r} is neither an nn.Module subclass nor a LangArchitecture")


LANG_MODELS: PluginRegistry[LangArchitecture] = PluginRegistry("language model", {
    "transformer": LangArchitecture(lambda cfg: CausalTransformer(cfg, positional=True, heads=None), "Transformer",
                                    description="decoder-only Transformer, sinusoidal absolute positions"),
    "transformer_rel": LangArchitecture(RelativeTransformer, "TransformerRelPE",
                                        description="Transformer*: Transformer-XL's relative positions, no memory"),
    **{
        name: LangArchitecture(
            lambda cfg: CausalTransformer(cfg, positional=cfg.rsa_positional, heads=cfg.rem_heads()),
            f"RSA_{name.removeprefix('rsa_').upper()}", rsa=True,
            description=f"RSA-Transformer, head setting {name.removeprefix('rsa_').upper()} (k1..k6 = {PAPER_HEADS[name]})",
        )
        for name in PAPER_HEADS
    },
    "lstm": LangArchitecture(LSTMRecognizer, None, description="the recurrent reference: an LSTM of width d_model"),
}, _plugin_language_model, constructor=lambda arch: arch.build, supplied=1)
"""Model name -> how to build it, its Table 2 column and whether it has RSA layers: the built-ins,
plugins and ``module.path:ClassName`` names."""


def build_recognizer(name: str, cfg: LangModelConfig, **settings: object) -> Recognizer:
    """The network of model ``name``, built as ``build(cfg, **settings)`` (``settings``: a plugin's own,
    :meth:`~recurbench.plugins.PluginRegistry.settings_for`); its config checked first: a ConfigError
    names the problem."""
    if name not in LANG_MODELS:
        raise ConfigError(f"unknown model {name!r}; known: {', '.join(LANG_MODELS)}")
    arch = LANG_MODELS[name]
    try:
        cfg.check(arch.rsa)
    except ConfigError as exc:
        raise ConfigError(f"model {name!r}: {exc}") from None
    return arch.build(cfg, **settings)
