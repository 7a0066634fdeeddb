"""Recurrent PPO: stored-and-replayed states equal the acting ones, acting = evaluating, a learning
signal on a memory task, SB3 harness compatibility (evaluate_policy, save/load)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

from recurbench.agents.ppo import MemoryPPO
from recurbench.envs.synthetic import CueRecallEnv

CORE_KWARGS = {
    "lstm": {},
    "memlstm": {"memory_window": 12, "attention_size": 8},
    "rellstm": {"nu": 2, "rho": 2, "attention_size": 8},
}


def _model(core: str, *, delay: int = 3, n_envs: int = 4, n_steps: int = 16, seq_len: int = 4, seed: int = 0, **kw):
    env = make_vec_env(lambda: CueRecallEnv(delay=delay), n_envs=n_envs, seed=seed)
    policy_kwargs = dict(core=core, hidden_size=16, features="mlp", features_dim=16, head_size=16,
                         core_kwargs=CORE_KWARGS[core])
    return MemoryPPO("MemoryPolicy", env, n_steps=n_steps, seq_len=seq_len, batch_size=kw.pop("batch_size", 16),
                     policy_kwargs=policy_kwargs, seed=seed, **kw)


def _collect(model: MemoryPPO) -> None:
    _, callback = model._setup_learn(model.n_steps * model.n_envs, None)
    assert model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps)


@pytest.mark.parametrize("core", ["lstm", "memlstm", "rellstm"])
def test_replayed_sequences_reproduce_the_rollout(core):
    """Episodes (length 4) straddle the 5-step sequences, so the replay must reset mid-sequence exactly
    where acting did; before any update it reproduces the rollout's log-probs and values, and the state
    at the end of sequence k equals the state stored at the start of sequence k + 1."""
    model = _model(core, delay=3, n_steps=20, seq_len=5, batch_size=20)
    _collect(model)
    buf = model.rollout_buffer
    assert buf.episode_starts[1:].any()
    policy = model.policy
    for k in range(buf.n_seq_per_env):
        rows = slice(k * 5, (k + 1) * 5)
        obs = torch.as_tensor(buf.observations[rows])
        starts = torch.as_tensor(buf.episode_starts[rows])
        actions = torch.as_tensor(buf.actions[rows, :, 0])
        with torch.no_grad():
            feats = policy.extract_features(obs.reshape(-1, obs.shape[-1]), policy.features_extractor)
            out, end_state = policy.core.forward_sequence(feats.reshape(5, model.n_envs, -1), buf.start_states[k], starts)
            values, log_prob, _ = policy.evaluate_sequences(obs, actions, buf.start_states[k], starts)
        torch.testing.assert_close(log_prob, torch.as_tensor(buf.log_probs[rows]), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(values, torch.as_tensor(buf.values[rows]), rtol=1e-5, atol=1e-5)
        following = buf.start_states[k + 1] if k + 1 < buf.n_seq_per_env else model._last_state
        for replayed, stored in zip(end_state, following, strict=True):
            torch.testing.assert_close(replayed, stored, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("core", ["lstm", "rellstm"])
def test_minibatches_replay_from_the_stored_states(core):
    model = _model(core, n_steps=16, seq_len=4, batch_size=8)
    _collect(model)
    batches = list(model.rollout_buffer.get(8))
    assert len(batches) == 16 * 4 // 8 and all(b.actions.shape == (4, 2) for b in batches)
    for batch in batches:
        with torch.no_grad():
            _, log_prob, _ = model.policy.evaluate_sequences(batch.observations, batch.actions, batch.states,
                                                             batch.episode_starts)
        torch.testing.assert_close(log_prob, batch.old_log_prob, rtol=1e-5, atol=1e-5)  # ratio 1 at epoch 0


@pytest.mark.parametrize("core", ["lstm", "memlstm", "rellstm"])
def test_predict_follows_the_acting_path_and_resets_at_episode_start(core):
    model = _model(core)
    policy = model.policy
    obs = np.random.default_rng(0).random((5, 3, 3)).astype(np.float32)
    starts = np.array([[1, 1, 1], [0, 0, 0], [0, 1, 0], [0, 0, 0], [1, 0, 0]], dtype=np.float32)
    state, pstate = policy.initial_state(3), None
    for t in range(5):
        torch.manual_seed(t)
        with torch.no_grad():
            actions, _, _, state = policy.act(torch.as_tensor(obs[t]), state, torch.as_tensor(starts[t]))
        torch.manual_seed(t)
        predicted, pstate = model.predict(obs[t], state=pstate, episode_start=starts[t])
        np.testing.assert_array_equal(predicted, actions.numpy())
        for a, b in zip(pstate, state, strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("core,steps", [("lstm", 12288), ("rellstm", 12288)])
def test_learns_to_recall_a_cue_over_a_delay(core, steps):
    """A memoryless policy scores 0.5 on CueRecall; recurrent PPO must remember the cue.

    12288 steps: with 6144 the LSTM solved it for seeds 2 and 3 but was still at chance for seeds 0 and
    1 (stable-baselines3 2.9.2, gymnasium 1.4.0); with 12288 both cores solve it for seeds 0 and 1."""
    torch.set_num_threads(1)
    model = _model(core, delay=3, n_envs=8, n_steps=32, seq_len=8, batch_size=64, learning_rate=3e-3, seed=1)
    before, _ = evaluate_policy(model, make_vec_env(lambda: CueRecallEnv(delay=3), n_envs=4, seed=5),
                                n_eval_episodes=200, deterministic=True)
    model.learn(steps)
    after, _ = evaluate_policy(model, make_vec_env(lambda: CueRecallEnv(delay=3), n_envs=4, seed=5),
                               n_eval_episodes=200, deterministic=True)
    assert before < 0.75 and after >= 0.95, (before, after)


def test_save_and_load_round_trip(tmp_path):
    model = _model("rellstm")
    model.learn(64)
    model.save(tmp_path / "agent.zip")
    loaded = MemoryPPO.load(tmp_path / "agent.zip", device="cpu")
    obs = np.random.default_rng(1).random((4, 3)).astype(np.float32)
    a, s = model.predict(obs, deterministic=True)
    b, t = loaded.predict(obs, deterministic=True)
    np.testing.assert_array_equal(a, b)
    for x, y in zip(s, t, strict=True):
        torch.testing.assert_close(x, y)


def test_bad_sequence_settings_are_rejected():
    with pytest.raises(ValueError, match="multiple of the BPTT length"):
        _model("lstm", n_steps=10, seq_len=4, batch_size=8)
    with pytest.raises(ValueError, match="batch_size"):
        _model("lstm", n_steps=16, seq_len=4, batch_size=6)
