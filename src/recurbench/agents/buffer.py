"""A rollout buffer for truncated BPTT that stores a core's state only at sequence starts.

A MemLSTM's state holds its whole memory (``M x H`` floats per environment); storing it at every
rollout step would cost ``n_steps x n_envs x M x H`` floats. This buffer keeps SB3's per-step arrays
(observations, actions, rewards, episode starts, values, log-probs, GAE) and, per environment, the
state only every ``seq_len`` steps. Training replays each ``seq_len``-step sequence from its stored
state with the recorded episode starts, so memory is cleared exactly where it was while acting.

A core whose memory grows with the episode (:class:`~recurbench.agents.cores.EpisodeMemLSTMCore`)
stores states of different slot counts; they are padded with zeros (empty slots) to the largest
when a minibatch is drawn, which changes no output of the replay.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from torch import Tensor

from recurbench.agents.cores import State


class SequenceSamples(NamedTuple):
    """N sequences of T steps, time first."""

    observations: Tensor  # [T, N, *obs_shape]
    actions: Tensor  # [T, N]
    old_values: Tensor  # [T, N]
    old_log_prob: Tensor  # [T, N]
    advantages: Tensor  # [T, N]
    returns: Tensor  # [T, N]
    episode_starts: Tensor  # [T, N]
    states: State  # each [N, ...]: the core state before the first step of each sequence


class SequenceRolloutBuffer(RolloutBuffer):
    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
        seq_len: int = 16,
    ) -> None:
        if buffer_size % seq_len:
            raise ValueError(f"n_steps ({buffer_size}) must be a multiple of the BPTT length seq_len ({seq_len})")
        self.seq_len = seq_len
        self.n_seq_per_env = buffer_size // seq_len
        super().__init__(buffer_size, observation_space, action_space, device, gae_lambda, gamma, n_envs)

    def reset(self) -> None:
        super().reset()
        self.start_states: list[State | None] = [None] * self.n_seq_per_env

    def store_state(self, state: State) -> None:
        """Call before each step; keeps a copy of ``state`` when a sequence starts at this step."""
        if self.pos % self.seq_len == 0:
            self.start_states[self.pos // self.seq_len] = tuple(t.detach().clone() for t in state)

    def get(self, batch_size: int | None = None) -> Generator[SequenceSamples, None, None]:  # type: ignore[override]
        """Minibatches of ``batch_size // seq_len`` whole sequences, in random order."""
        assert self.full, "the rollout buffer is not full"
        if any(s is None for s in self.start_states):
            raise RuntimeError("a sequence start has no stored state: call store_state before every add")
        K, T, E = self.n_seq_per_env, self.seq_len, self.n_envs
        n_seq = K * E
        per_batch = n_seq if batch_size is None else max(1, batch_size // T)

        def seq(arr: np.ndarray) -> Tensor:  # [K*T, E, ...] -> [K, T, E, ...]
            return torch.as_tensor(arr.reshape(K, T, E, *arr.shape[2:]), device=self.device)

        obs, actions = seq(self.observations), seq(self.actions[..., 0])
        values, log_probs, advantages = seq(self.values), seq(self.log_probs), seq(self.advantages)
        returns, starts = seq(self.returns), seq(self.episode_starts)
        states = tuple(_stack_padded(parts) for parts in zip(*self.start_states, strict=True))  # each [K, E, ...]

        order = torch.randperm(n_seq)
        for begin in range(0, n_seq, per_batch):
            idx = order[begin : begin + per_batch]
            k, e = idx // E, idx % E

            def pick(x: Tensor, k: Tensor = k, e: Tensor = e) -> Tensor:  # [K, T, E, ...] -> [T, N, ...]
                return x[k, :, e].transpose(0, 1)

            yield SequenceSamples(
                pick(obs), pick(actions), pick(values), pick(log_probs), pick(advantages), pick(returns),
                pick(starts), tuple(s[k, e] for s in states),
            )


def _stack_padded(parts: tuple[Tensor, ...]) -> Tensor:
    """``torch.stack(parts)``, each part first padded at the end of every dimension with zeros to the
    largest shape among them (a grown memory's empty slots)."""
    shape = [max(sizes) for sizes in zip(*(p.shape for p in parts), strict=True)]
    if all(list(p.shape) == shape for p in parts):
        return torch.stack(parts)
    out = parts[0].new_zeros(len(parts), *shape)
    for i, p in enumerate(parts):
        out[(i, *(slice(0, n) for n in p.shape))] = p
    return out
