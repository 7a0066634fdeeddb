"""Training throughput of recurrent PPO per memory core, next to sb3-contrib's ``RecurrentPPO``.

Steps per second of ``learn`` on one MiniGrid env (default DoorKey-5x5, 8 envs, 128 steps per
rollout), every core and the sb3-contrib peer with the same n_envs / n_steps / batch / epochs and the
same LSTM width, measured in the same process one after the other (so they share the same load).
MemLSTM's window is the one a suite run gives it: every state of an episode of the train env or of
the test env of the shipped pair that trains there (DoorKey-5x5 -> DoorKey-16x16: 2560 states), its
memory growing with the episode (:class:`~recurbench.agents.cores.EpisodeMemLSTMCore`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from stable_baselines3.common.logger import Logger

from recurbench.agents.training import CoreSettings, PPOSettings, make_agent
from recurbench.envs import ENV_PAIRS
from recurbench.envs.minigrid import make_vec_env


@dataclass(frozen=True)
class BenchSettings:
    env_id: str = "MiniGrid-DoorKey-5x5-v0"
    n_envs: int = 8
    n_steps: int = 128
    batch_size: int = 256
    n_epochs: int = 4
    total_steps: int = 16384
    """Environment steps timed per agent (after one untimed warm-up rollout)."""
    hidden_size: int = 64
    threads: int = 1
    seed: int = 0
    test_env_id: str | None = None
    """The env MemLSTM's window is also sized for; None: the test env of the shipped pair training on
    ``env_id`` (none: the train env's alone)."""

    def window_env(self) -> str | None:
        if self.test_env_id is not None:
            return self.test_env_id
        return next((pair.test for pair in ENV_PAIRS.values() if pair.train == self.env_id), None)


def _timed_learn(model: Any, steps: int, warmup: int) -> tuple[float, float]:
    """Steps per wall-clock second and per CPU second of this process (the latter is robust to other
    processes sharing the cores: envs and network run in this one thread)."""
    model.learn(warmup)  # first rollout + update: allocations, lazy imports
    start, start_cpu = time.perf_counter(), time.process_time()
    model.learn(steps, reset_num_timesteps=True)
    return steps / (time.perf_counter() - start), steps / (time.process_time() - start_cpu)


def bench_rl(
    cores: Sequence[str] = ("lstm", "memlstm", "rellstm"),
    settings: BenchSettings = BenchSettings(),
    *,
    include_sb3_contrib: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """``{"fps": {core: steps/s}, "fps_sb3_contrib": steps/s, "ratio": {core: fps / fps_sb3_contrib}, ...}``
    (wall clock), and the same per CPU second of this process under ``fps_cpu``, ``fps_sb3_contrib_cpu``
    and ``ratio_cpu``."""
    torch.set_num_threads(settings.threads)
    s = settings
    warmup = s.n_envs * s.n_steps
    ppo = PPOSettings(n_envs=s.n_envs, n_steps=s.n_steps, batch_size=s.batch_size, n_epochs=s.n_epochs)
    fps: dict[str, float] = {}
    fps_cpu: dict[str, float] = {}
    for core in cores:
        progress(core)
        model = make_agent(core, s.env_id, ppo, CoreSettings(hidden_size=s.hidden_size), seed=s.seed,
                           test_env_id=s.window_env())
        fps[core], fps_cpu[core] = _timed_learn(model, s.total_steps, warmup)
    out: dict[str, Any] = {"fps": fps, "fps_cpu": fps_cpu, "settings": {**asdict(s), "test_env_id": s.window_env()},
                           "device": "cpu", "torch_threads": s.threads}
    if include_sb3_contrib:
        from sb3_contrib import RecurrentPPO  # noqa: PLC0415 - sb3-contrib is optional (the dev extra): the peer it is timed against

        progress("sb3-contrib RecurrentPPO")
        peer = RecurrentPPO(
            "MlpLstmPolicy", make_vec_env(s.env_id, s.n_envs, s.seed), n_steps=s.n_steps, batch_size=s.batch_size,
            n_epochs=s.n_epochs, learning_rate=ppo.learning_rate, gamma=ppo.gamma, gae_lambda=ppo.gae_lambda,
            ent_coef=ppo.ent_coef, vf_coef=ppo.vf_coef, clip_range=ppo.clip_range, max_grad_norm=ppo.max_grad_norm,
            policy_kwargs={"lstm_hidden_size": s.hidden_size}, seed=s.seed, device="cpu",
        )
        peer.set_logger(Logger(None, []))  # as MemoryPPO's: SB3's default would leave a tempdir/SB3-* folder
        out["fps_sb3_contrib"], out["fps_sb3_contrib_cpu"] = _timed_learn(peer, s.total_steps, warmup)
        out["ratio"] = {core: v / out["fps_sb3_contrib"] for core, v in fps.items()}
        out["ratio_cpu"] = {core: v / out["fps_sb3_contrib_cpu"] for core, v in fps_cpu.items()}
    return out
