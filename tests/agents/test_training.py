"""Building agents for a train/test pair: MemLSTM's window covers the test episode, the observation
follows ``core.mission``, and evaluation shows a model what it was trained on."""

from __future__ import annotations

import pytest
import torch

from recurbench.agents.cores import EpisodeMemLSTMCore
from recurbench.agents.training import CoreSettings, PPOSettings, evaluate, make_agent
from recurbench.envs.minigrid import ObsLayout

TINY_PPO = PPOSettings(n_envs=1, n_steps=16, batch_size=16, seq_len=16, n_epochs=1)
TINY_CORE = CoreSettings(hidden_size=8, features_dim=8, attention_size=4)
TRAIN, TEST = "MiniGrid-DoorKey-5x5-v0", "MiniGrid-DoorKey-16x16-v0"  # episodes of at most 250 and 2560 steps


def _memory_after(core: EpisodeMemLSTMCore, steps: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``valid`` and the values after ``steps`` steps of one episode, with the hidden states it produced."""
    torch.manual_seed(0)
    state = core.initial_state(1)
    produced = []
    with torch.no_grad():
        for t in range(steps):
            h, state = core.step(torch.randn(1, core.input_size), state, torch.tensor([1.0 if t == 0 else 0.0]))
            produced.append(h)
    return state[7][0], [state[5][0], *produced]


def test_memlstm_window_covers_a_whole_test_episode_longer_than_the_train_envs():
    """Trained on DoorKey-5x5 and tested on DoorKey-16x16, MemLSTM attends over all 2560 states of a
    test episode at its last step: its first state among them. With the train env's window (the
    setting before `episode`, `memory_window: null`), the memory holds the last 250 only."""
    agent = make_agent("memlstm", TRAIN, TINY_PPO, TINY_CORE, seed=0, test_env_id=TEST)
    core = agent.policy.core
    assert isinstance(core, EpisodeMemLSTMCore) and core.max_window == 2560
    valid, (values, *produced) = _memory_after(core, 2560)
    assert int(valid.sum()) == 2559  # every state but the last, which the next step inserts
    torch.testing.assert_close(values[0], produced[0][0])  # the episode's first state is still there
    torch.testing.assert_close(values[2558], produced[2558][0])

    old = make_agent("memlstm", TRAIN, TINY_PPO, TINY_CORE.model_copy(update={"memory_window": None}), seed=0,
                     test_env_id=TEST)
    assert old.policy.core.max_window == 250
    valid, _ = _memory_after(old.policy.core, 2560)
    assert int(valid.sum()) == 250
    fixed = make_agent("memlstm", TRAIN, TINY_PPO, TINY_CORE.model_copy(update={"memory_window": 7}), seed=0,
                       test_env_id=TEST)
    assert fixed.policy.core.max_window == 7


@pytest.mark.parametrize("mission", [True, False])
def test_the_observation_follows_core_mission_and_evaluation_matches_it(mission):
    settings = TINY_CORE.model_copy(update={"mission": mission})
    agent = make_agent("lstm", "MiniGrid-GoToDoor-5x5-v0", TINY_PPO, settings, seed=0)
    size = ObsLayout(mission_len=12 if mission else 0).size
    assert agent.observation_space.shape == (size,)
    assert (agent.policy.features_extractor.mission is not None) == mission
    # The test env is made with the same observation: a mismatch would fail on the first step.
    assert 0.0 <= evaluate(agent, "MiniGrid-GoToDoor-8x8-v0", 1, n_envs=1) <= 1.0
