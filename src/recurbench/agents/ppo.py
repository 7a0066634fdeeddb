"""Recurrent PPO for any :class:`~recurbench.agents.cores.MemoryCore`, on SB3's ``OnPolicyAlgorithm``.

sb3-contrib's ``RecurrentPPO`` carries only an LSTM's ``(h, c)``. ``MemoryPPO`` generalises it to
any tuple state and keeps SB3's harness: VecEnvs, callbacks, logger, ``learn``, ``predict`` with
state, ``evaluate_policy``, save/load. Truncated backpropagation through time: the rollout is cut
into ``seq_len``-step sequences; the buffer stores the core's state at each sequence start and
training replays each sequence from it (:class:`~recurbench.agents.buffer.SequenceRolloutBuffer`).
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import HumanOutputFormat, Logger
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from stable_baselines3.common.utils import FloatSchedule, explained_variance, obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from recurbench.agents.buffer import SequenceRolloutBuffer
from recurbench.agents.policy import RecurrentMemoryPolicy

SelfMemoryPPO = TypeVar("SelfMemoryPPO", bound="MemoryPPO")


class MemoryPPO(OnPolicyAlgorithm):
    """PPO with a recurrent memory core and truncated BPTT over ``seq_len``-step sequences.

    :param batch_size: samples per minibatch; a minibatch holds ``batch_size // seq_len`` sequences.
    :param seq_len: BPTT length; ``n_steps`` must be a multiple of it.
    """

    policy_aliases: ClassVar[dict[str, type]] = {"MemoryPolicy": RecurrentMemoryPolicy}
    policy: RecurrentMemoryPolicy

    def __init__(
        self,
        policy: str | type[RecurrentMemoryPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 1e-3,
        n_steps: int = 128,
        batch_size: int = 256,
        n_epochs: int = 4,
        seq_len: int = 16,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_range: float | Schedule = 0.2,
        normalize_advantage: bool = True,
        ent_coef: float = 0.01,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        target_kl: float | None = None,
        stats_window_size: int = 100,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        _init_setup_model: bool = True,
    ) -> None:
        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            n_steps=n_steps,
            gamma=gamma,
            gae_lambda=gae_lambda,
            ent_coef=ent_coef,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            use_sde=False,
            sde_sample_freq=-1,
            rollout_buffer_class=SequenceRolloutBuffer,
            rollout_buffer_kwargs={"seq_len": seq_len},
            stats_window_size=stats_window_size,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
            supported_action_spaces=(spaces.Discrete,),
        )
        if batch_size < seq_len or batch_size % seq_len:
            raise ValueError(f"batch_size ({batch_size}) must be a positive multiple of seq_len ({seq_len})")
        self.batch_size, self.n_epochs, self.seq_len = batch_size, n_epochs, seq_len
        self.clip_range, self.normalize_advantage, self.target_kl = clip_range, normalize_advantage, target_kl
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        self.clip_range = FloatSchedule(self.clip_range)
        self._last_state = self.policy.initial_state(self.n_envs)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_last_state"]

    # -- rollout -----------------------------------------------------------------------------------

    def collect_rollouts(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        assert isinstance(rollout_buffer, SequenceRolloutBuffer)
        assert self._last_obs is not None
        self.policy.set_training_mode(False)
        n_steps = 0
        rollout_buffer.reset()
        callback.on_rollout_start()
        state = self._last_state
        if self._last_state is None or self._last_state[0].shape[0] != env.num_envs:
            state = self.policy.initial_state(env.num_envs)
        while n_steps < n_rollout_steps:
            rollout_buffer.store_state(state)  # the state *before* this step's episode-start reset
            starts = torch.as_tensor(self._last_episode_starts, dtype=torch.float32, device=self.device)
            with torch.no_grad():
                obs_tensor = obs_as_tensor(self._last_obs, self.device)
                actions, values, log_probs, state = self.policy.act(obs_tensor, state, starts)
            actions_np = actions.cpu().numpy()
            new_obs, rewards, dones, infos = env.step(actions_np)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            n_steps += 1
            # A time-limit truncation is not a terminal state: bootstrap with the value of the last
            # observation under the state that saw the episode so far.
            for idx, done in enumerate(dones):
                if done and infos[idx].get("terminal_observation") is not None and infos[idx].get("TimeLimit.truncated", False):
                    terminal_obs = self.policy.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                    with torch.no_grad():
                        terminal_value = self.policy.predict_values(
                            terminal_obs, tuple(t[idx : idx + 1] for t in state), torch.zeros(1, device=self.device)
                        )[0]
                    rewards[idx] += self.gamma * float(terminal_value)
            rollout_buffer.add(self._last_obs, actions_np.reshape(-1, 1), rewards, self._last_episode_starts, values, log_probs)
            self._last_obs = new_obs
            self._last_episode_starts = dones
        with torch.no_grad():
            last_values = self.policy.predict_values(
                obs_as_tensor(new_obs, self.device), state, torch.as_tensor(dones, dtype=torch.float32, device=self.device)
            )
        rollout_buffer.compute_returns_and_advantage(last_values=last_values, dones=dones)
        self._last_state = state
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    # -- update ------------------------------------------------------------------------------------

    def train(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)
        pg_losses, value_losses, entropy_losses, clip_fractions, approx_kls = [], [], [], [], []
        continue_training = True
        for _epoch in range(self.n_epochs):
            for batch in self.rollout_buffer.get(self.batch_size):
                values, log_prob, entropy = self.policy.evaluate_sequences(
                    batch.observations, batch.actions, batch.states, batch.episode_starts
                )  # each [T, N]
                advantages = batch.advantages
                if self.normalize_advantage and advantages.numel() > 1:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
                ratio = torch.exp(log_prob - batch.old_log_prob)
                policy_loss = -torch.min(advantages * ratio, advantages * ratio.clamp(1 - clip_range, 1 + clip_range)).mean()
                value_loss = F.mse_loss(batch.returns, values)
                entropy_loss = -entropy.mean()
                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
                with torch.no_grad():
                    log_ratio = log_prob - batch.old_log_prob
                    approx_kl = float(((ratio - 1) - log_ratio).mean())
                pg_losses.append(policy_loss.item())
                value_losses.append(value_loss.item())
                entropy_losses.append(entropy_loss.item())
                clip_fractions.append(float(((ratio - 1).abs() > clip_range).float().mean()))
                approx_kls.append(approx_kl)
                if self.target_kl is not None and approx_kl > 1.5 * self.target_kl:
                    continue_training = False
                    break
                self.policy.optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
            self._n_updates += 1
            if not continue_training:
                break
        explained_var = explained_variance(self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten())
        self.logger.record("train/entropy_loss", np.mean(entropy_losses))
        self.logger.record("train/policy_gradient_loss", np.mean(pg_losses))
        self.logger.record("train/value_loss", np.mean(value_losses))
        self.logger.record("train/approx_kl", np.mean(approx_kls))
        self.logger.record("train/clip_fraction", np.mean(clip_fractions))
        self.logger.record("train/explained_variance", explained_var)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)

    def learn(  # type: ignore[override]
        self: SelfMemoryPPO,
        total_timesteps: int,
        callback: Any = None,
        log_interval: int = 1,
        tb_log_name: str = "MemoryPPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfMemoryPPO:
        if not self._custom_logger and self.tensorboard_log is None:
            # SB3's own default writes the same (to stdout with verbose >= 1, else nowhere), but first
            # makes an empty folder tempdir/SB3-<date and time> on every learn().
            self.set_logger(Logger(None, [HumanOutputFormat(sys.stdout)] if self.verbose >= 1 else []))
        return super().learn(total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar)
