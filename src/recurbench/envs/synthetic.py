"""Tiny synthetic memory tasks: fast learning-signal checks for the memory cores and recurrent PPO."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class CueRecallEnv(gym.Env):
    """Remember a cue over a delay.

    Step 0 shows one of ``n_cues`` cues (one-hot); the next ``delay`` observations are blank; the last
    one carries a query flag. Reward 1 if the action at the query equals the cue, else 0; actions
    before the query do nothing. A memoryless policy scores ``1 / n_cues`` on average; a policy that
    remembers scores 1. Observation: ``[one-hot cue (n_cues) | query flag]``.
    """

    metadata: dict = {"render_modes": []}

    def __init__(self, n_cues: int = 2, delay: int = 4) -> None:
        self.n_cues, self.delay = n_cues, delay
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n_cues + 1,), dtype=np.float32)
        self.action_space = spaces.Discrete(n_cues)
        self._cue, self._t = 0, 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.n_cues + 1, dtype=np.float32)
        if self._t == 0:
            obs[self._cue] = 1.0
        if self._t == self.delay:
            obs[-1] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._cue, self._t = int(self.np_random.integers(self.n_cues)), 0
        return self._obs(), {}

    def step(self, action):
        if self._t == self.delay:
            return self._obs(), float(int(action) == self._cue), True, False, {}
        self._t += 1
        return self._obs(), 0.0, False, False, {}
