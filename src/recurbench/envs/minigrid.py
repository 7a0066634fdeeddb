"""MiniGrid environments with mission-aware observations.

GoToObject, GoToDoor and Fetch name their target only in the mission string ("go to the blue key"),
so an agent that sees only the image is capped near chance on them. :class:`MissionObservation`
turns MiniGrid's dict observation into one flat ``uint8`` vector that keeps all three parts::

    [ image (7 x 7 x 3 = 147: object, colour, state per cell) | direction (1) | mission tokens (L) ]

The mission is tokenised into word ids from a fixed vocabulary (:data:`MISSION_VOCAB`: every word
MiniGrid's missions use), padded with 0 to ``L`` tokens; unknown words map to ``<unk>`` (1). The
policy embeds the tokens as a bag of words (:class:`recurbench.agents.policy.MiniGridFeatures`):
the target's colour and type are what matter, and bags keep it cheap.

``L = 0`` leaves the mission out: image and direction only, what Kerg et al.'s reference agents saw
(rl-starter-files' model without text), under which GoToObject, GoToDoor and Fetch sit near chance.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid and BabyAI ids)
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

from recurbench.errors import ConfigError

_MINIGRID_WORDS = (
    # colours and object types (minigrid.core.constants)
    "red green blue purple yellow grey unseen empty wall floor door key ball box goal lava agent "
    # the words of the missions of the shipped pairs and of the other MiniGrid tasks
    "go to the a an get fetch pick up you must open then use and of at end hallway matching object "
    "put next avoid reach traverse rooms get square"
).split()
MISSION_VOCAB: dict[str, int] = {"<pad>": 0, "<unk>": 1}
for _word in _MINIGRID_WORDS:
    MISSION_VOCAB.setdefault(_word, len(MISSION_VOCAB))

REQUIRED_KEYS = ("image", "direction", "mission")
"""The observation keys read with the mission (``mission_len > 0``); without it, the first two."""


@dataclass(frozen=True)
class ObsLayout:
    """Where each part sits in the flat observation vector."""

    view: int = 7  # agent_view_size
    channels: int = 3  # object, colour, state
    mission_len: int = 12

    @property
    def image_size(self) -> int:
        return self.view * self.view * self.channels

    @property
    def size(self) -> int:
        return self.image_size + 1 + self.mission_len

    @property
    def vocab_size(self) -> int:
        return len(MISSION_VOCAB)


def encode_mission(mission: str, length: int) -> np.ndarray:
    """Word ids of ``mission``, truncated or zero-padded to ``length``."""
    words = re.findall(r"[a-z]+", mission.lower())[:length]
    ids = np.zeros(length, dtype=np.uint8)
    ids[: len(words)] = [MISSION_VOCAB.get(w, 1) for w in words]
    return ids


class MissionObservation(gym.ObservationWrapper):
    """MiniGrid's ``{image, direction, mission}`` as one flat ``uint8`` vector (layout above);
    ``mission_len=0``: image and direction only."""

    def __init__(self, env: gym.Env, mission_len: int = 12) -> None:
        super().__init__(env)
        space = env.observation_space
        required = REQUIRED_KEYS if mission_len else REQUIRED_KEYS[:2]
        missing = [k for k in required if not isinstance(space, spaces.Dict) or k not in space.spaces]
        if missing:
            env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
            raise ConfigError(
                f"environment {env_id!r} lacks the observation keys {missing} (a MiniGrid env with "
                f"{list(required)} is expected; got observation space {space})"
            )
        image = space["image"]
        view, _, channels = image.shape
        self.layout = ObsLayout(view=view, channels=channels, mission_len=mission_len)
        self.observation_space = spaces.Box(0, 255, shape=(self.layout.size,), dtype=np.uint8)
        self._mission: str | None = None
        self._mission_ids = np.zeros(mission_len, dtype=np.uint8)

    def observation(self, observation: dict) -> np.ndarray:
        mission = observation["mission"] if self.layout.mission_len else ""
        if mission != self._mission:  # missions change only on reset: tokenise once per episode
            self._mission = mission
            self._mission_ids = encode_mission(mission, self.layout.mission_len)
        out = np.empty(self.layout.size, dtype=np.uint8)
        out[: self.layout.image_size] = observation["image"].reshape(-1)
        out[self.layout.image_size] = observation["direction"]
        out[self.layout.image_size + 1 :] = self._mission_ids
        return out


def check_env_id(env_id: str) -> None:
    """A clear error for an id gymnasium's registry lacks (with minigrid's ids registered), naming
    the closest registered ids."""
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=5, cutoff=0.6)
        hint = f"; similar ids: {', '.join(close)}" if close else ""
        raise ConfigError(f"unknown environment id {env_id!r} (not in gymnasium's registry){hint}")


def make_env(env_id: str, *, mission_len: int = 12, max_steps: int | None = None) -> gym.Env:
    """One MiniGrid env with flat observations (no Monitor: the VecEnv adds it); an env without the
    observation keys this needs is a :class:`ConfigError` naming them."""
    check_env_id(env_id)
    kwargs = {"max_steps": max_steps} if max_steps is not None else {}
    try:
        env = gym.make(env_id, **kwargs)
    except (gym.error.Error, TypeError, ImportError) as exc:
        raise ConfigError(f"environment {env_id!r} cannot be made: {exc}") from None
    try:
        return MissionObservation(env, mission_len=mission_len)
    except ConfigError:
        env.close()
        raise


def check_env(env_id: str, *, mission_len: int = 12) -> None:
    """Make ``env_id`` once and close it: an unknown id or missing observation keys fail here, before
    any training (the suite calls it while planning)."""
    make_env(env_id, mission_len=mission_len).close()


def make_vec_env(env_id: str, n_envs: int, seed: int, *, mission_len: int = 12, max_steps: int | None = None):
    """``n_envs`` copies in SB3's ``DummyVecEnv`` with ``Monitor`` (episode rewards), seeded ``seed + i``."""
    check_env_id(env_id)
    return sb3_make_vec_env(
        lambda: make_env(env_id, mission_len=mission_len, max_steps=max_steps), n_envs=n_envs, seed=seed
    )


def env_max_steps(env_id: str) -> int:
    """The episode step limit MiniGrid sets for ``env_id``."""
    check_env_id(env_id)
    env = gym.make(env_id)
    try:
        return int(env.unwrapped.max_steps)
    finally:
        env.close()
