"""Agents: recurrent PPO on stable-baselines3 with LSTM, MemLSTM and RelLSTM memory cores.

The cores are registered in :data:`recurbench.agents.cores.CORES` (name -> description and builder),
the PPO algorithm is :class:`recurbench.agents.ppo.MemoryPPO`.
"""
