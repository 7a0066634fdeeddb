"""The recurrent actor-critic policy: features -> memory core -> actor and critic heads.

SB3's ``ActorCriticPolicy`` has no room for a recurrent state, and sb3-contrib's recurrent policy
only for an LSTM's ``(h, c)``; this policy carries any core's tuple state. It keeps SB3's
``BasePolicy`` contract (``predict(obs, state, episode_start, deterministic)``, save/load through
``_get_constructor_parameters``) so ``evaluate_policy`` and ``BaseAlgorithm.load`` work unchanged.

Layouts: acting takes ``[B, ...]`` tensors (one row per environment); training replays sequences
as ``[T, N, ...]`` (time first, N sequences).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.type_aliases import Schedule
from torch import Tensor, nn

from recurbench.agents.cores import MemoryCore, State, make_core
from recurbench.envs.minigrid import ObsLayout


class MiniGridFeatures(BaseFeaturesExtractor):
    """Image, direction and (when the observation has it) mission of
    :class:`recurbench.envs.minigrid.MissionObservation`.

    Each image cell's (object, colour, state) integers index a table per cell position: a sum of
    embeddings, which equals a linear layer on the one-hot image but costs 147 look-ups. Direction
    has its own embedding; the mission is a bag of word embeddings. Observations without the mission
    (``mission_len`` 0: image and direction only, as the paper's reference agents saw) have no
    mission embedding.

    Parameters
    ----------
    observation_space : spaces.Box
        The flat observation of :class:`~recurbench.envs.minigrid.MissionObservation`.
    features_dim : int
        Width of the embedding.
    mission_len : int or None
        Mission tokens in the observation; None: what the observation space leaves after the image
        and the direction.
    """

    N_VALUES = 16  # MiniGrid encodes objects 0..10, colours 0..5, states 0..2

    def __init__(self, observation_space: spaces.Box, features_dim: int = 128, mission_len: int | None = None) -> None:
        super().__init__(observation_space, features_dim)
        if mission_len is None:
            mission_len = int(np.prod(observation_space.shape)) - ObsLayout(mission_len=0).size
        self.layout = ObsLayout(mission_len=mission_len)
        if mission_len < 0 or observation_space.shape != (self.layout.size,):
            raise ValueError(
                f"MiniGridFeatures expects flat observations of size {ObsLayout(mission_len=0).size} + mission_len "
                f"(MissionObservation), got shape {observation_space.shape}"
            )
        n_img = self.layout.image_size
        self.image = nn.EmbeddingBag(n_img * self.N_VALUES, features_dim, mode="sum")
        self.register_buffer("offsets", torch.arange(n_img) * self.N_VALUES, persistent=False)
        self.direction = nn.Embedding(4, features_dim)
        self.mission = (nn.EmbeddingBag(self.layout.vocab_size, features_dim, mode="sum", padding_idx=0)
                        if mission_len else None)

    def forward(self, observations: Tensor) -> Tensor:
        obs = observations.long()
        n_img = self.layout.image_size
        image = self.image(obs[:, :n_img].clamp_max(self.N_VALUES - 1) + self.offsets)
        features = image + self.direction(obs[:, n_img].clamp(0, 3))
        if self.mission is not None:
            features = features + self.mission(obs[:, n_img + 1 :])
        return F.relu(features)


class MlpFeatures(BaseFeaturesExtractor):
    """A linear layer and ReLU on flat observations (the synthetic tasks)."""

    def __init__(self, observation_space: spaces.Box, features_dim: int = 64) -> None:
        super().__init__(observation_space, features_dim)
        self.linear = nn.Linear(int(np.prod(observation_space.shape)), features_dim)

    def forward(self, observations: Tensor) -> Tensor:
        return F.relu(self.linear(observations.float().flatten(1)))


FEATURES: dict[str, type[BaseFeaturesExtractor]] = {"minigrid": MiniGridFeatures, "mlp": MlpFeatures}


class RecurrentMemoryPolicy(BasePolicy):
    """Actor-critic over a :class:`MemoryCore` (discrete actions)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        core: str = "lstm",
        hidden_size: int = 128,
        features: str = "mlp",
        features_dim: int = 128,
        head_size: int = 64,
        core_kwargs: dict[str, Any] | None = None,
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
        use_sde: bool = False,
    ) -> None:
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"RecurrentMemoryPolicy supports Discrete action spaces, got {action_space}")
        if use_sde:
            raise ValueError("RecurrentMemoryPolicy does not support gSDE")
        if optimizer_kwargs is None:
            optimizer_kwargs = {"eps": 1e-5}
        super().__init__(
            observation_space,
            action_space,
            features_extractor_class=FEATURES[features],
            features_extractor_kwargs={"features_dim": features_dim},
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=False,
        )
        self.core_name, self.hidden_size, self.features = core, hidden_size, features
        self.features_dim, self.head_size, self.core_kwargs = features_dim, head_size, dict(core_kwargs or {})
        self.features_extractor = self.make_features_extractor()
        self.core: MemoryCore = make_core(core, features_dim, hidden_size, agent=True, **self.core_kwargs)
        n_actions = int(action_space.n)
        self.actor = nn.Sequential(nn.Linear(hidden_size, head_size), nn.Tanh(), nn.Linear(head_size, n_actions))
        self.critic = nn.Sequential(nn.Linear(hidden_size, head_size), nn.Tanh(), nn.Linear(head_size, 1))
        for head in (self.actor, self.critic):  # orthogonal init as in SB3's PPO
            nn.init.orthogonal_(head[0].weight, np.sqrt(2))
            nn.init.zeros_(head[0].bias)
        nn.init.orthogonal_(self.actor[2].weight, 0.01)
        nn.init.zeros_(self.actor[2].bias)
        nn.init.orthogonal_(self.critic[2].weight, 1.0)
        nn.init.zeros_(self.critic[2].bias)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            core=self.core_name, hidden_size=self.hidden_size, features=self.features,
            features_dim=self.features_dim, head_size=self.head_size, core_kwargs=self.core_kwargs,
            optimizer_class=self.optimizer_class, optimizer_kwargs=self.optimizer_kwargs,
        )
        data.pop("features_extractor_class", None)
        data.pop("features_extractor_kwargs", None)
        data.pop("normalize_images", None)
        return data

    def initial_state(self, n_envs: int) -> State:
        return self.core.initial_state(n_envs, self.device)

    # -- acting ------------------------------------------------------------------------------------

    def _core_step(self, obs: Tensor, state: State, episode_starts: Tensor) -> tuple[Tensor, State]:
        return self.core.step(self.extract_features(obs, self.features_extractor), state, episode_starts)

    def act(
        self, obs: Tensor, state: State, episode_starts: Tensor, deterministic: bool = False
    ) -> tuple[Tensor, Tensor, Tensor, State]:
        """One step for B environments -> actions [B], values [B], log-probs [B], new state."""
        out, state = self._core_step(obs, state, episode_starts)
        log_probs = F.log_softmax(self.actor(out), dim=-1)
        if deterministic:
            actions = log_probs.argmax(dim=-1)
        else:
            actions = torch.multinomial(log_probs.exp(), 1).squeeze(-1)
        values = self.critic(out).squeeze(-1)
        return actions, values, log_probs.gather(-1, actions[:, None]).squeeze(-1), state

    def predict_values(self, obs: Tensor, state: State, episode_starts: Tensor) -> Tensor:
        """Values of ``obs`` [B] without touching ``state`` (the fused kernel updates memory in place)."""
        out, _ = self._core_step(obs, tuple(t.clone() for t in state), episode_starts)
        return self.critic(out).squeeze(-1)

    def forward(self, obs: Tensor, state: State, episode_starts: Tensor, deterministic: bool = False):  # type: ignore[override]
        return self.act(obs, state, episode_starts, deterministic)

    def _predict(self, observation: Tensor, deterministic: bool = False) -> Tensor:  # pragma: no cover
        raise NotImplementedError("a recurrent policy needs its state: use predict(obs, state, episode_start)")

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray,
        state: State | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, State]:
        """SB3's ``predict`` with a recurrent state (``None`` = start of episode for every env)."""
        self.set_training_mode(False)
        obs, vectorized = self.obs_to_tensor(observation)
        n = obs.shape[0]
        if state is None:
            state = self.initial_state(n)
        starts = torch.zeros(n) if episode_start is None else torch.as_tensor(np.asarray(episode_start), dtype=torch.float32)
        with torch.no_grad():
            actions, _, _, state = self.act(obs, state, starts.reshape(n).to(self.device), deterministic)
        out = actions.cpu().numpy()
        return (out if vectorized else out[0]), state

    # -- training ----------------------------------------------------------------------------------

    def evaluate_sequences(
        self, obs: Tensor, actions: Tensor, state: State, episode_starts: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Replay N sequences: obs [T, N, ...], actions/episode_starts [T, N] -> values, log-probs,
        entropies, each [T, N]."""
        T, N = actions.shape
        features = self.extract_features(obs.reshape(T * N, *obs.shape[2:]), self.features_extractor)
        out, _ = self.core.forward_sequence(features.reshape(T, N, -1), state, episode_starts)
        log_probs = F.log_softmax(self.actor(out), dim=-1)  # [T, N, n_actions]
        values = self.critic(out).squeeze(-1)
        chosen = log_probs.gather(-1, actions.long()[..., None]).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return values, chosen, entropy
