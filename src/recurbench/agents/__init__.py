"""Agents: recurrent PPO on stable-baselines3 with LSTM, MemLSTM and RelLSTM memory cores.

``CORES`` maps each core's name (as used in suites and on the command line) to a description.
"""

CORES: dict[str, str] = {
    "lstm": "LSTM baseline",
    "memlstm": "MemLSTM: LSTM + additive attention over all past hidden states of the episode",
    "rellstm": "RelLSTM: LSTM + relevancy-screened sparse attention (short-term buffer nu, relevant set rho)",
}
