"""Per-step memory attention with a short-term buffer and a relevant set: the PyTorch reference.

This is both the readable statement of the recurrence and the runtime path on CPU and whenever
gradients are needed (training replays sequences through it; autograd does the backward).

Layout (one row per environment, ``B`` rows; ``S = nu + rho`` memory slots)::

    query      [B, A]     W s_{t-1} (+ bias): the previous attended state, projected
    keys       [B, S, A]  U h_i of each stored state
    values     [B, S, H]  the stored hidden states h_i
    scores     [B, S]     relevancy score of each slot (sum of detached attention it received in the buffer)
    valid      [B, S]     1.0 where a slot holds a state, 0.0 where it is empty
    steps      [B]        core steps taken since the episode started (float)
    new_key    [B, A]     U h_{t-1}
    new_value  [B, H]     h_{t-1}, the state produced by the previous step, inserted now
    v          [A]        the additive-attention vector

Slots ``[0, nu)`` are the short-term buffer (a ring: state number n goes to slot n mod nu);
slots ``[nu, nu + rho)`` are the relevant set. MemLSTM is the special case ``rho = 0`` with
``nu = M`` (a window over the last M states); RelLSTM uses nu = rho = 5 (Kerg et al. 2020, App. B).

One step, for each environment (Kerg et al. 2020, Sec. 4 and the published RelLSTM cell):

1. Insert h_{t-1} (when ``steps > 0``; at the first step of an episode nothing is pending).
   Its slot is ``pos = (steps - 1) mod nu``. If that slot is occupied, its state leaves the buffer:
   it enters the relevant set at the empty slot (or, with no empty slot, at the lowest-scoring one,
   first index on ties) if its score is higher than that slot's (an empty slot counts as -inf).
2. e_i = v' tanh(query + key_i) over occupied slots; alpha = softmax(e) (all zeros when no slot is
   occupied); read = sum_i alpha_i value_i.
3. Buffer slots accumulate the detached attention they received: scores_i += alpha_i, i < nu.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class MemoryStep(NamedTuple):
    read: Tensor  # [B, H]
    alpha: Tensor  # [B, S]
    keys: Tensor  # [B, S, A]
    values: Tensor  # [B, S, H]
    scores: Tensor  # [B, S]
    valid: Tensor  # [B, S]


def memory_attention_step_reference(
    query: Tensor,
    keys: Tensor,
    values: Tensor,
    scores: Tensor,
    valid: Tensor,
    steps: Tensor,
    new_key: Tensor,
    new_value: Tensor,
    v: Tensor,
    *,
    nu: int,
) -> MemoryStep:
    """Functional (out-of-place, differentiable) version of the step described in the module docstring."""
    B, S, _ = keys.shape
    rho = S - nu
    slot = torch.arange(S, device=keys.device)

    # 1. insert h_{t-1}
    insert = steps > 0  # [B]
    pos = torch.remainder(steps - 1, nu).clamp_min(0).long()  # [B]
    is_pos = slot[None, :] == pos[:, None]  # [B, S]
    evict = insert & (valid.gather(1, pos[:, None])[:, 0] > 0)  # [B]
    is_relevant = torch.zeros_like(is_pos)
    if rho > 0:
        cand_score = scores.gather(1, pos[:, None])  # [B, 1]
        member_scores = torch.where(valid[:, nu:] > 0, scores[:, nu:], float("-inf"))  # [B, rho]
        j = member_scores.argmin(dim=1)  # first minimum
        enters = evict & (cand_score[:, 0] > member_scores.gather(1, j[:, None])[:, 0])
        is_relevant = (slot[None, :] == (nu + j)[:, None]) & enters[:, None]
        cand_key = keys.gather(1, pos[:, None, None].expand(B, 1, keys.shape[2]))
        cand_value = values.gather(1, pos[:, None, None].expand(B, 1, values.shape[2]))
        keys = torch.where(is_relevant[..., None], cand_key, keys)
        values = torch.where(is_relevant[..., None], cand_value, values)
        scores = torch.where(is_relevant, cand_score, scores)
    is_new = is_pos & insert[:, None]
    keys = torch.where(is_new[..., None], new_key[:, None, :], keys)
    values = torch.where(is_new[..., None], new_value[:, None, :], values)
    scores = torch.where(is_new, torch.zeros_like(scores), scores)
    valid = torch.where(is_new | is_relevant, torch.ones_like(valid), valid)

    # 2. additive attention over occupied slots. Empty slots get -1e30 (exp underflows to exactly 0);
    #    a memory with no occupied slot gives a uniform softmax, zeroed by the final mask: alpha = 0.
    occupied = valid > 0
    e = torch.tanh(query[:, None, :] + keys) @ v  # [B, S]
    alpha = torch.softmax(e.masked_fill(~occupied, -1e30), dim=1) * occupied
    read = torch.bmm(alpha[:, None, :], values)[:, 0]  # [B, H]

    # 3. relevancy scores: detached attention received while in the short-term buffer
    in_buffer = (slot < nu).to(alpha.dtype)
    scores = scores + alpha.detach() * in_buffer
    return MemoryStep(read, alpha, keys, values, scores, valid)
