"""The ``minigrid`` suite: Kerg et al. (2020), App. B, Table 4 -- PPO with memory cores, trained on a
small MiniGrid environment and tested on a larger one.

``plan`` expands a profile into one run per env pair x core x seed, checking names (with their path
in the suite file) and that the installed minigrid registers every id before anything trains.
``execute`` trains :class:`~recurbench.agents.ppo.MemoryPPO` with the core on the pair's train env
and logs, per run: the learning curve ``rollout_reward`` (mean episodic reward of the last 100
episodes, step = env steps), then ``train_reward`` and ``test_reward`` (mean over ``eval_episodes``
episodes each) and ``generalisation_ratio`` = test / train. Tags ``agent`` (core) and ``env`` (pair)
come with the runner's standard tags.

``summary_rows`` gives the mean over seeds per pair x core next to the paper's figures
(``reference/kerg_table4_minigrid.csv``; the paper reports MemLSTM and RelLSTM only).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field

from recurbench.agents import CORES
from recurbench.agents.training import CoreSettings, PPOSettings
from recurbench.config import StrictModel, Unique, known_name
from recurbench.envs import ENV_PAIRS
from recurbench.errors import ConfigError
from recurbench.suites.runner import (
    ProgressFn,
    RunOutcome,
    RunPlan,
    SuiteDefinition,
    selected_names,
    selected_seeds,
)
from recurbench.tracking import RunHandle

if TYPE_CHECKING:
    import torch


class MinigridProfile(StrictModel):
    envs: Annotated[list[known_name(ENV_PAIRS, "env pair")], Unique] = Field(min_length=1)
    models: Annotated[list[known_name(CORES, "memory core")], Unique] = Field(min_length=1)
    seeds: int = Field(1, ge=1)
    total_timesteps: int = Field(ge=1, description="environment steps of training per run")
    eval_episodes: int = Field(100, ge=1, description="episodes on the train env and on the test env")
    ppo: PPOSettings = PPOSettings()
    core: CoreSettings = CoreSettings()


@lru_cache(maxsize=1)
def paper_table() -> dict[tuple[str, str], dict[str, float]]:
    """``{(train_env, core): {"train": r, "test": r}}`` from Kerg et al.'s Table 4."""
    path = resources.files("recurbench.suites").joinpath("reference/kerg_table4_minigrid.csv")
    table: dict[tuple[str, str], dict[str, float]] = {}
    with path.open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            for core in ("memlstm", "rellstm"):
                table[(row["train_env"], core)] = {"train": float(row[f"{core}_train"]), "test": float(row[f"{core}_test"])}
    return table


def _params(profile: MinigridProfile, pair_name: str, core: str) -> dict[str, Any]:
    """The params a run of ``core`` on env pair ``pair_name`` logs (the seed aside)."""
    pair = ENV_PAIRS[pair_name]
    return {
        "train_env": pair.train, "test_env": pair.test, "core": core,
        "total_timesteps": profile.total_timesteps, "eval_episodes": profile.eval_episodes,
        "ppo": profile.ppo.model_dump(), "core_settings": profile.core.model_dump(),
    }


class MinigridSuite(SuiteDefinition):
    name = "minigrid"
    profile_model = MinigridProfile
    default_device = "cpu"  # small recurrent policies: stable-baselines3 advises the CPU for non-CNN policies
    headline_metrics = ("train_reward", "test_reward", "generalisation_ratio")

    def plan(self, profile: BaseModel, selection: Mapping[str, Any], *, data_dir: str | None) -> list[RunPlan]:
        assert isinstance(profile, MinigridProfile)
        envs = selected_names(selection, "envs", profile.envs, ENV_PAIRS, "env pair")
        models = selected_names(selection, "models", profile.models, CORES, "memory core")
        seeds = selected_seeds(selection, profile.seeds)
        if selection.get("total_timesteps"):
            profile = profile.model_copy(update={"total_timesteps": int(selection["total_timesteps"])})
        if profile.ppo.n_steps % profile.ppo.seq_len or profile.ppo.batch_size % profile.ppo.seq_len:
            raise ConfigError(
                f"ppo: n_steps ({profile.ppo.n_steps}) and batch_size ({profile.ppo.batch_size}) must be "
                f"multiples of seq_len ({profile.ppo.seq_len})"
            )
        from recurbench.envs.minigrid import check_env_id

        for pair_name in envs:
            pair = ENV_PAIRS[pair_name]
            for env_id in (pair.train, pair.test):
                try:
                    check_env_id(env_id)
                except ConfigError as exc:
                    raise ConfigError(f"env pair {pair_name!r}: {exc}") from None
        plans = []
        for pair_name in envs:
            for core in models:
                for seed in seeds:
                    plans.append(RunPlan(f"{pair_name}-{core}-s{seed}", seed, {"agent": core, "env": pair_name},
                                         _params(profile, pair_name, core), payload=(ENV_PAIRS[pair_name], core, profile)))
        return plans

    def shipped_settings(self, profile: BaseModel) -> list[tuple[dict[str, str], dict[str, str | None]]]:
        """Every env pair x memory core, at the profile's settings."""
        from recurbench.tracking import flatten, param_value

        assert isinstance(profile, MinigridProfile)
        return [
            ({"env": pair, "agent": core}, {k: param_value(v) for k, v in flatten(_params(profile, pair, core)).items()})
            for pair in ENV_PAIRS for core in CORES
        ]

    def param_defaults(self) -> dict[str, str]:
        """PPO's and the core's default settings, as the runs log them."""
        from recurbench.tracking import flatten, param_value

        defaults = {"ppo": PPOSettings().model_dump(), "core_settings": CoreSettings().model_dump()}
        return {k: param_value(v) for k, v in flatten(defaults).items()}

    def execute(
        self, plan: RunPlan, run: RunHandle, progress: ProgressFn, *, data_dir: str | None, device: torch.device
    ) -> dict[str, float]:
        import torch

        from recurbench.agents.training import train_agent

        pair, core, profile = plan.payload
        torch.set_num_threads(1)  # small networks: one thread is fastest and leaves cores to the envs
        result = train_agent(
            core, pair.train, pair.test, total_timesteps=profile.total_timesteps, eval_episodes=profile.eval_episodes,
            ppo=profile.ppo, core_settings=profile.core, seed=plan.seed, run=run, progress=progress, device=str(device),
        )
        run.log_dict({"curve": result.curve}, "learning_curve.json")
        return {"train_reward": result.train_reward, "test_reward": result.test_reward,
                "generalisation_ratio": result.generalisation_ratio}

    def summary_rows(self, outcomes: Sequence[RunOutcome]) -> tuple[list[str], list[list[str]]]:
        groups: dict[tuple[str, str], list[RunOutcome]] = {}
        for o in outcomes:
            groups.setdefault((o.plan.tags["env"], o.plan.tags["agent"]), []).append(o)
        header = ["env pair", "core", "seeds ok", "train", "test", "test/train", "paper train", "paper test"]
        rows = []
        for (pair_name, core), group in groups.items():
            done = [o for o in group if o.status == "FINISHED"]

            def mean(key: str, done: list[RunOutcome] = done) -> str:
                values = [o.metrics[key] for o in done if not math.isnan(o.metrics.get(key, math.nan))]
                return f"{statistics.fmean(values):.2f}" if values else "-"

            paper = paper_table().get((ENV_PAIRS[pair_name].train, core))
            rows.append([
                pair_name, core, f"{len(done)}/{len(group)}", mean("train_reward"), mean("test_reward"),
                mean("generalisation_ratio"), f"{paper['train']:.2f}" if paper else "-", f"{paper['test']:.2f}" if paper else "-",
            ])
        return header, rows
