"""How much memory a forecaster takes to train and to evaluate, known before it runs.

A window's activations kept for the backward pass grow with the square of its length in the
attention maps: the ``paper`` profile's LogSparse on WTH at horizon 336 (1,056-step windows, 5 layers)
keeps about 770 MiB per window, so its batch of 32 needs about 30 GiB. On a CPU such a run is not
refused by PyTorch: the kernel's OOM killer ends the process (or, under Ray, whatever else it picks).

:func:`kept_bytes` counts what a training step keeps: the network runs once on PyTorch's ``meta``
device (shapes, no data, well under a second) and every tensor autograd saves for the backward pass is
added up, at the run's batch size. :func:`over_budget` adds :data:`HEADROOM` and the weights with their
gradients and Adam's state. Measured against the peak resident size of real steps (two steps of Adam,
one thread, ``resource.getrusage``, above the process's size before the first step):

* Informer, ETTh1-48, batch 256: 4,692 MiB kept by this count, a peak of 4,748 MiB;
* LogSparse, WTH-336, batch 4: 3,137 MiB kept, a peak of 3,703 MiB;
* LogSparse, WTH-336, batch 8: 6,194 MiB kept, a peak of 7,337 MiB (1.18 times).

The count takes about half a second per network, so :func:`bound_bytes`, a closed form counted high
for the three architectures, decides first whether it is needed at all.

Evaluation (no gradients) peaks far lower per window (LogSparse WTH-336: 1,433 MiB at 16 windows,
791 MiB at 8, about 80 MiB per window against the 770 MiB a training window keeps) but runs at
``eval_batch_size`` (256): :func:`eval_batch` caps that batch where a quarter of the machine would not
hold it, counting each window at its training size (high). Results do not depend on the evaluation
batch.
"""

from __future__ import annotations

from typing import Any

import torch

from recurbench.forecasters.config import ForecasterConfig
from recurbench.forecasters.models import build_network

HEADROOM = 1.25
"""A real step's peak over the saved tensors' total (7,337 / 6,194 MiB for LogSparse WTH-336 at batch 8,
the largest of the three measured): the step's transient tensors and the allocator's slack."""

WEIGHT_COPIES = 4
"""Weights, gradients and Adam's two moments."""


def bound_bytes(cfg: ForecasterConfig, batch: int) -> int:
    """A closed-form upper bound of what training keeps at ``batch`` (with :data:`HEADROOM`): per layer
    (a decoder layer counted twice, for its cross-attention) 16 float maps of heads x L x L and L x (32
    d_model + 8 d_ff) floats, L the whole window (seq_len + label_len + pred_len). Over every network
    of the shipped profiles at batch 2 it is at least 1.87 times what :func:`over_budget` counts for
    the kept tensors with their headroom (RSA-LogSparse at ETTh1-24 of ``paper``; a larger batch
    raises the ratio), and twice that over ``small`` and ``quick`` (tested)."""
    length = cfg.seq_len + cfg.label_len + cfg.pred_len
    layers = cfg.e_layers + 2 * cfg.d_layers
    per_layer = cfg.n_heads * length * length * 16 + length * (32 * cfg.d_model + 8 * cfg.d_ff)
    return 4 * batch * layers * per_layer


def kept_bytes(model: str, cfg: ForecasterConfig, batch: int, settings: dict[str, Any]) -> tuple[int, int] | None:
    """(bytes autograd keeps for the backward pass of one step at ``batch``, bytes of the weights),
    counted on the ``meta`` device; None for a network that cannot run there (a plugin's, say)."""
    kept: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        kept[id(tensor)] = tensor.numel() * tensor.element_size()
        return tensor

    try:
        with torch.device("meta"):
            network = build_network(model, cfg, **settings)
            length = cfg.label_len + cfg.pred_len
            inputs = (torch.empty(batch, cfg.seq_len, cfg.n_features), torch.empty(batch, cfg.seq_len, cfg.n_marks),
                      torch.empty(batch, length, cfg.n_marks))
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
                network(*inputs)
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return None
    return sum(kept.values()), sum(p.numel() * p.element_size() for p in network.parameters())


def over_budget(model: str, cfg: ForecasterConfig, batch: int, budget: int, **settings: Any) -> tuple[int, int] | None:
    """None where a training step of ``model`` at ``batch`` fits in ``budget`` bytes (or cannot be
    counted); else (the bytes it needs, the largest batch that fits, 0 for none). :func:`bound_bytes`
    spares the count where the bound itself fits."""
    if bound_bytes(cfg, batch) <= budget or (counted := kept_bytes(model, cfg, batch, settings)) is None:
        return None
    kept, weights = counted
    need = int(HEADROOM * kept) + WEIGHT_COPIES * weights
    if need <= budget:
        return None
    return need, max(0, int((budget - WEIGHT_COPIES * weights) // (HEADROOM * kept / batch)))


def eval_batch(model: str, cfg: ForecasterConfig, requested: int, budget: int, **settings: Any) -> int:
    """The evaluation batch to use: ``requested``, or fewer windows where ``requested`` windows at their
    training size (what a training step keeps per window, high for evaluation) would pass ``budget``
    bytes."""
    if bound_bytes(cfg, requested) <= budget or (counted := kept_bytes(model, cfg, 1, settings)) is None:
        return requested
    return max(1, min(requested, int(budget // (HEADROOM * counted[0]))))


__all__ = ["HEADROOM", "WEIGHT_COPIES", "bound_bytes", "eval_batch", "kept_bytes", "over_budget"]
