"""Mission-aware MiniGrid observations and clear errors for bad environments."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from recurbench.envs import ENV_PAIRS
from recurbench.envs.minigrid import MISSION_VOCAB, MissionObservation, ObsLayout, make_env
from recurbench.errors import ConfigError


def test_flat_observation_keeps_image_direction_and_mission():
    env = make_env("MiniGrid-GoToObject-6x6-N2-v0")
    raw_env = env.unwrapped
    obs, _ = env.reset(seed=3)
    layout = ObsLayout()
    raw = raw_env.gen_obs()
    assert obs.shape == env.observation_space.shape == (layout.size,)
    np.testing.assert_array_equal(obs[: layout.image_size].reshape(7, 7, 3), raw["image"])
    assert obs[layout.image_size] == raw["direction"]
    words = raw["mission"].split()
    np.testing.assert_array_equal(obs[layout.image_size + 1 : layout.image_size + 1 + len(words)],
                                  [MISSION_VOCAB[w] for w in words])
    assert not obs[layout.image_size + 1 + len(words) :].any()  # padding


@pytest.mark.parametrize("env_id", ["MiniGrid-GoToObject-6x6-N2-v0", "MiniGrid-GoToDoor-5x5-v0", "MiniGrid-Fetch-5x5-N2-v0"])
def test_mission_names_the_target_so_different_targets_give_different_observations(env_id):
    env = make_env(env_id)
    layout = ObsLayout()
    missions = {}
    for seed in range(30):
        obs, _ = env.reset(seed=seed)
        missions[env.unwrapped.mission] = tuple(obs[layout.image_size + 1 :])
    assert len(missions) > 2
    assert len(set(missions.values())) == len(missions)  # no two targets share an encoding
    assert all(1 not in ids for ids in missions.values())  # every word is in the vocabulary


def test_without_the_mission_the_observation_is_image_and_direction_only():
    env = make_env("MiniGrid-GoToObject-6x6-N2-v0", mission_len=0)
    obs, _ = env.reset(seed=3)
    raw = env.unwrapped.gen_obs()
    assert obs.shape == env.observation_space.shape == (7 * 7 * 3 + 1,)
    np.testing.assert_array_equal(obs, np.append(raw["image"].reshape(-1), raw["direction"]))


def test_every_pair_builds_with_the_same_observation_space():
    spaces = [make_env(pid).observation_space for pair in ENV_PAIRS.values() for pid in (pair.train, pair.test)]
    assert all(space == spaces[0] for space in spaces)  # train and test share a layout: transfer is possible


def test_unknown_env_id_is_a_clear_error_naming_the_closest_registered_ids():
    with pytest.raises(ConfigError, match=r"unknown environment id 'MiniGrid-DoorKey-7x7-v0' \(not in gymnasium's "
                       r"registry\); similar ids: MiniGrid-DoorKey-8x8-v0, MiniGrid-DoorKey-6x6-v0, MiniGrid-DoorKey-5x5-v0"):
        make_env("MiniGrid-DoorKey-7x7-v0")
    with pytest.raises(ConfigError, match=r"'minigrid-memorys9' .*similar ids: MiniGrid-MemoryS9-v0"):
        make_env("minigrid-memorys9")
    with pytest.raises(ConfigError, match=r"unknown environment id 'Pong'[^;]*$"):  # nothing close: no list
        make_env("Pong")


@pytest.mark.parametrize("mission_len,keys", [(12, "'image', 'direction', 'mission'"), (0, "'image', 'direction'")])
def test_env_without_minigrid_observation_keys_is_a_clear_error(mission_len, keys):
    with pytest.raises(ConfigError, match=rf"environment 'CartPole-v1' lacks the observation keys \[{keys}\]"):
        make_env("CartPole-v1", mission_len=mission_len)
    with pytest.raises(ConfigError, match=rf"lacks the observation keys \[{keys}\]"):
        MissionObservation(gym.make("CartPole-v1"), mission_len=mission_len)
