"""Train and evaluate one agent: typed settings in, a result out (the suite and the benchmark call it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy

from recurbench.agents.ppo import MemoryPPO
from recurbench.config import StrictModel
from recurbench.envs.minigrid import ObsLayout, env_max_steps, make_vec_env
from recurbench.runtime import raise_if_terminated
from recurbench.tracking import RunHandle


class PPOSettings(StrictModel):
    """PPO hyperparameters (defaults: the paper profile, in the spirit of Kerg et al.'s setup)."""

    n_envs: int = Field(16, ge=1, description="parallel environments")
    n_steps: int = Field(128, ge=1, description="steps per environment per rollout")
    n_epochs: int = Field(4, ge=1, description="passes over each rollout")
    batch_size: int = Field(256, ge=1, description="samples per minibatch (batch_size // seq_len sequences)")
    seq_len: int = Field(16, ge=1, description="truncated-BPTT length")
    learning_rate: float = Field(1e-3, gt=0, description="Adam learning rate")
    gamma: float = Field(0.99, gt=0, le=1, description="discount")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda")
    ent_coef: float = Field(0.01, ge=0, description="entropy bonus")
    vf_coef: float = Field(0.5, ge=0, description="value-loss weight")
    clip_range: float = Field(0.2, gt=0, description="PPO clip")
    max_grad_norm: float = Field(0.5, gt=0, description="gradient-norm clip")


MISSION_LEN = 12
"""Mission tokens in a mission-aware observation (the longest shipped mission has 9 words)."""


class CoreSettings(StrictModel):
    """The policy network: what it observes, its sizes and the memory's hyperparameters."""

    hidden_size: int = Field(64, ge=1, description="LSTM width H (64 as in the rl-starter-files agents)")
    features_dim: int = Field(64, ge=1, description="observation embedding width")
    attention_size: int = Field(32, ge=1, description="additive-attention width A")
    nu: int = Field(5, ge=1, description="RelLSTM short-term buffer size")
    rho: int = Field(5, ge=0, description="RelLSTM relevant-set size")
    memory_window: Annotated[int, Field(ge=1)] | Literal["episode"] | None = Field(
        "episode",
        description="MemLSTM window M: 'episode' = every state of the episode, in the train and the test env "
        "(M = the larger of their max_steps); an integer = a window of that many states (sliding beyond); "
        "null = the train env's max_steps (before 'episode' was added: a sliding window on a longer test env)",
    )
    mission: bool = Field(
        True,
        description="the agent sees the mission text (a bag of words) beside the image and its direction; "
        "false: image and direction only, as Kerg et al.'s reference agents",
    )


@dataclass
class AgentResult:
    train_reward: float
    test_reward: float
    generalisation_ratio: float
    curve: list[tuple[int, float]] = field(default_factory=list)
    train_seconds: float = 0.0
    model: MemoryPPO | None = None


def memory_window(core_settings: CoreSettings, env_id: str, test_env_id: str | None = None) -> int:
    """MemLSTM's window M for an agent trained on ``env_id`` and tested on ``test_env_id``: with
    ``memory_window: episode``, the longest episode of either env (so it attends over every state of
    a test episode too); ``null``, the train env's; an integer, itself."""
    window = core_settings.memory_window
    if isinstance(window, int):
        return window
    if window is None or test_env_id is None:
        return env_max_steps(env_id)
    return max(env_max_steps(env_id), env_max_steps(test_env_id))


def mission_len(core_settings: CoreSettings) -> int:
    """Mission tokens in the observation: :data:`MISSION_LEN`, or 0 for image and direction only."""
    return MISSION_LEN if core_settings.mission else 0


AGENT_CORE_SETTINGS = ("attention_size", "nu", "rho", "memory_window")
"""The core settings every agent's core but the LSTM is handed (a core reads those its ``__init__`` names)."""


def make_agent(
    core: str, env_id: str, ppo: PPOSettings, core_settings: CoreSettings, *, seed: int, device: str = "cpu",
    test_env_id: str | None = None, plugin_settings: Mapping[str, Any] | None = None,
) -> MemoryPPO:
    """A ``MemoryPPO`` with ``core`` on ``ppo.n_envs`` copies of ``env_id``, observing the mission or
    not as ``core_settings.mission`` says; ``test_env_id``, the env it will be tested on, sizes
    MemLSTM's window (:func:`memory_window`). ``plugin_settings``: a plugin core's own settings, over
    the shared ones."""
    shared = dict(attention_size=core_settings.attention_size, nu=core_settings.nu, rho=core_settings.rho,
                  memory_window=memory_window(core_settings, env_id, test_env_id)) if core != "lstm" else {}
    policy_kwargs = dict(
        core=core, hidden_size=core_settings.hidden_size, features="minigrid", features_dim=core_settings.features_dim,
        core_kwargs={**shared, **(plugin_settings or {})},
    )
    env = make_vec_env(env_id, ppo.n_envs, seed, mission_len=mission_len(core_settings))
    return MemoryPPO(
        "MemoryPolicy", env, learning_rate=ppo.learning_rate, n_steps=ppo.n_steps,
        batch_size=ppo.batch_size, n_epochs=ppo.n_epochs, seq_len=ppo.seq_len, gamma=ppo.gamma,
        gae_lambda=ppo.gae_lambda, clip_range=ppo.clip_range, ent_coef=ppo.ent_coef, vf_coef=ppo.vf_coef,
        max_grad_norm=ppo.max_grad_norm, policy_kwargs=policy_kwargs, seed=seed, device=device,
    )


class CurveCallback(BaseCallback):
    """Mean episodic reward of recent episodes after each rollout -> ``rollout_reward`` (step = env steps)."""

    def __init__(self, run: RunHandle | None, total: int, progress: Callable[[float, float, str], None],
                 log_every: int = 1) -> None:
        super().__init__()
        self.run, self.total, self.progress, self.log_every = run, total, progress, log_every
        self.curve: list[tuple[int, float]] = []
        self._rollouts = 0

    def _on_step(self) -> bool:
        raise_if_terminated()  # a stop swallowed on its way (see recurbench.runtime)
        return True

    def _on_rollout_end(self) -> None:
        self._rollouts += 1
        episodes = self.model.ep_info_buffer
        if episodes and self._rollouts % self.log_every == 0:
            mean = float(np.mean([ep["r"] for ep in episodes]))
            self.curve.append((self.num_timesteps, mean))
            if self.run is not None:
                self.run.log_metrics({"rollout_reward": mean}, step=self.num_timesteps)
        self.progress(min(self.num_timesteps, self.total), self.total, "train")


def evaluate(model: MemoryPPO, env_id: str, n_episodes: int, *, n_envs: int = 8, seed: int = 10_000,
             deterministic: bool = False) -> float:
    """Mean episodic reward of ``model`` on ``env_id`` over ``n_episodes`` (SB3's ``evaluate_policy``).

    Stochastic actions by default (greedy recurrent MiniGrid policies tend to loop forever).
    Memory is cleared at episode starts through the same ``MemoryCore.step`` as in training. The
    env shows the model what it was trained on: the mission when its observations have it.
    """
    tokens = int(np.prod(model.observation_space.shape)) - ObsLayout(mission_len=0).size
    env = make_vec_env(env_id, min(n_envs, n_episodes), seed, mission_len=tokens)
    try:
        mean, _ = evaluate_policy(model, env, n_eval_episodes=n_episodes, deterministic=deterministic)
    finally:
        env.close()
    return float(mean)


def train_agent(
    core: str,
    train_env: str,
    test_env: str,
    *,
    total_timesteps: int,
    eval_episodes: int,
    ppo: PPOSettings = PPOSettings(),
    core_settings: CoreSettings = CoreSettings(),
    seed: int = 0,
    run: RunHandle | None = None,
    progress: Callable[[float, float, str], None] = lambda *_: None,
    device: str = "cpu",
    plugin_settings: Mapping[str, Any] | None = None,
) -> AgentResult:
    """Train ``core`` on ``train_env`` (on ``device``), then measure mean reward on ``train_env`` and
    ``test_env``. ``plugin_settings``: a plugin core's own settings (:func:`make_agent`)."""
    model = make_agent(core, train_env, ppo, core_settings, seed=seed, device=device, test_env_id=test_env,
                       plugin_settings=plugin_settings)
    rollouts = max(1, total_timesteps // (ppo.n_envs * ppo.n_steps))
    callback = CurveCallback(run, total_timesteps, progress, log_every=max(1, rollouts // 200))
    start = time.perf_counter()
    model.learn(total_timesteps, callback=callback)
    seconds = time.perf_counter() - start
    progress(total_timesteps, total_timesteps, "eval train env")
    train_reward = evaluate(model, train_env, eval_episodes, seed=seed + 10_000)
    progress(total_timesteps, total_timesteps, "eval test env")
    test_reward = evaluate(model, test_env, eval_episodes, seed=seed + 20_000)
    ratio = test_reward / train_reward if train_reward > 0 else float("nan")
    result = AgentResult(train_reward, test_reward, ratio, callback.curve, seconds, model)
    if run is not None:
        run.log_metrics({"train_reward": train_reward, "test_reward": test_reward, "generalisation_ratio": ratio,
                         "train_seconds": seconds, "fps": total_timesteps / seconds})
    return result
