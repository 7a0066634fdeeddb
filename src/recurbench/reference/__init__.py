"""The papers' published figures (CSV files shipped in this package; README.md names each source),
with their names mapped explicitly to recurbench's. The suites print them beside their closing
tables and the reports beside their comparisons.

* RSA paper (Huang et al., ICLR 2023), Table 1: test MSE/MAE on ETTh1, ETTh2, ETTm1 and Weather (WTH)
  for Informer, LogSparse, Transformer-XL and their RSA variants, mean and std over 5 repeats.
* Kerg et al. (NeurIPS 2020) supplement, Table 4: mean reward of PPO with MemLSTM and RelLSTM trained
  on a small MiniGrid environment and tested on a larger one. The paper has no LSTM column.
* Kerg et al. (NeurIPS 2020) supplement, Table 5: copy-task accuracy against the delay T for seven
  models, each a memory core of recurbench (:data:`KERG_TABLE5_COLUMNS`).
"""

from __future__ import annotations

import csv
from functools import cache
from importlib import resources

import pandas as pd

from recurbench.envs import ENV_PAIRS

#: recurbench model name -> the name in the RSA paper's Table 1.
LTSF_PAPER_MODELS: dict[str, str] = {
    "informer": "Informer",
    "rsa_informer": "RSA-Informer",
    "logsparse": "LogSparse",
    "rsa_logsparse": "RSA-LogSparse",
    "xl": "XL",
    "rsa_xl": "RSA-XL",
}
#: Baseline -> its RSA variant (the pairs the paper's win counts compare).
RSA_PAIRS: dict[str, str] = {"informer": "rsa_informer", "logsparse": "rsa_logsparse", "xl": "rsa_xl"}
LTSF_MODEL_ORDER: tuple[str, ...] = tuple(LTSF_PAPER_MODELS)
LTSF_DATASET_ORDER: tuple[str, ...] = ("ETTh1", "ETTh2", "ETTm1", "WTH")

#: How Kerg et al.'s Table 4 figures were produced (shared/papers/README.md), printed beside them: their
#: code differs from recurbench's agents there, so the figures are not a like-for-like target.
KERG_TABLE4_CAVEAT = (
    "Kerg et al.'s Table 4 came from agents that saw image and direction only, in code that cleared the "
    "attention memory at every acting step and at the start of every 16-step training chunk; recurbench "
    "clears it at episode starts only"
)

#: recurbench core name -> the column prefix in Kerg et al.'s Table 4 (LSTM: not in the paper).
MINIGRID_PAPER_AGENTS: dict[str, str] = {"memlstm": "memlstm", "rellstm": "rellstm"}
MINIGRID_AGENT_ORDER: tuple[str, ...] = ("lstm", "memlstm", "rellstm")


#: recurbench memory core -> its column in Kerg et al.'s Table 5 (copy accuracy), in the table's order.
#: orth-RNN is ``rnn`` at an orthogonal initialisation, unconstrained after it; MemLSTM has no column
#: (the paper's MemRNN is an RNN: ``memrnn``).
KERG_TABLE5_COLUMNS: dict[str, str] = {
    "lstm": "LSTM",
    "rnn": "orth-RNN",
    "exprnn": "expRNN",
    "memrnn": "MemRNN",
    "sab": "SAB",
    "relrnn": "RelRNN",
    "rellstm": "RelLSTM",
}


def reference_text(name: str) -> str:
    """The text of one shipped table (``README.md`` in this package names each file's source)."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def read_table(name: str) -> pd.DataFrame:
    """One shipped table as a DataFrame."""
    with resources.files(__name__).joinpath(name).open(encoding="utf-8") as handle:
        return pd.read_csv(handle)


@cache
def ltsf_reference() -> pd.DataFrame:
    """Long form: ``dataset, horizon, model`` (recurbench names), ``metric`` (``mse``/``mae``),
    ``paper_mean``, ``paper_std``, ``paper_n``."""
    raw = read_table("rsa_table1_ltsf.csv")
    to_ours = {paper: ours for ours, paper in LTSF_PAPER_MODELS.items()}
    unknown = set(raw["model"]) - set(to_ours)
    if unknown:  # the shipped file and the map must agree; a silent drop would hide a row
        raise ValueError(f"rsa_table1_ltsf.csv has models with no recurbench name: {sorted(unknown)}")
    frames = []
    for metric in ("mse", "mae"):
        frames.append(
            pd.DataFrame(
                {
                    "dataset": raw["dataset"],
                    "horizon": raw["horizon"].astype(int),
                    "model": raw["model"].map(to_ours),
                    "metric": metric,
                    "paper_mean": raw[f"{metric}_mean"].astype(float),
                    "paper_std": raw[f"{metric}_std"].astype(float),
                    "paper_n": raw["repeats"].astype(int),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


@cache
def minigrid_reference() -> pd.DataFrame:
    """Long form: ``env`` (recurbench pair name), ``agent``, ``metric`` (``train_reward``,
    ``test_reward``, ``generalisation_ratio`` = test/train computed from the two), ``paper``."""
    raw = read_table("kerg_table4_minigrid.csv")
    by_train_id = {pair.train: pair for pair in ENV_PAIRS.values()}
    rows = []
    for rec in raw.to_dict("records"):
        pair = by_train_id.get(rec["train_env"])
        if pair is None or pair.test != rec["test_env"]:
            raise ValueError(f"kerg_table4_minigrid.csv: no recurbench env pair for {rec['train_env']} -> {rec['test_env']}")
        for agent, prefix in MINIGRID_PAPER_AGENTS.items():
            train, test = float(rec[f"{prefix}_train"]), float(rec[f"{prefix}_test"])
            rows += [
                (pair.name, agent, "train_reward", train),
                (pair.name, agent, "test_reward", test),
                (pair.name, agent, "generalisation_ratio", test / train if train else float("nan")),
            ]
    return pd.DataFrame(rows, columns=["env", "agent", "metric", "paper"])


@cache
def kerg_table5_reference() -> pd.DataFrame:
    """Long form: ``T``, ``model`` (recurbench core), ``paper`` (accuracy; NaN where the paper ran out
    of memory) and ``paper_text`` (the cell as printed: ``OOM`` there)."""
    records = list(csv.DictReader(reference_text("kerg_table5_copy.csv").splitlines()))
    columns = list(records[0]) if records else []
    if set(columns) != {"T", *KERG_TABLE5_COLUMNS.values()}:  # the shipped file and the map must agree
        raise ValueError(f"kerg_table5_copy.csv has columns {columns}, not T and {list(KERG_TABLE5_COLUMNS.values())}")
    rows = [(int(rec["T"]), core, float("nan") if rec[column] == "OOM" else float(rec[column]), rec[column])
            for rec in records for core, column in KERG_TABLE5_COLUMNS.items()]
    return pd.DataFrame(rows, columns=["T", "model", "paper", "paper_text"])
