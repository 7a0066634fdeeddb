"""The ``minigrid`` suite: Kerg et al. (2020), App. B, Table 4 -- PPO with memory cores, trained on a
small MiniGrid environment and tested on a larger one.

``plan`` expands a profile into one run per env pair x core x seed, checking names (with their path
in the suite file), that gymnasium registers every id and that each env has the observation keys
the agent reads, before anything trains. A pair is a shipped one (:data:`recurbench.envs.ENV_PAIRS`),
one the suite file defines under ``pairs`` (name -> train and test id), or one given on the command
line as ``TRAIN_ID:TEST_ID`` (selection key ``pairs``; named by its ids unless they are a shipped
pair's). ``execute`` trains :class:`~recurbench.agents.ppo.MemoryPPO` with the core on the pair's
train env and logs, per run: the learning curve ``rollout_reward`` (mean episodic reward of the last
100 episodes, step = env steps), then ``train_reward`` and ``test_reward`` (mean over
``eval_episodes`` episodes each) and ``generalisation_ratio`` = test / train. Tags ``agent`` (core),
``env`` (pair) and ``observation`` (``image+direction`` or ``image+direction+mission``) come with the
runner's standard tags.

``summary_rows`` gives the means over seeds per pair x core (test/train: the ratio of the two means)
next to the paper's figures (``reference/kerg_table4_minigrid.csv``; the paper reports MemLSTM and
RelLSTM only), with how the paper's code produced them (:data:`recurbench.reference.KERG_TABLE4_CAVEAT`).
"""

from __future__ import annotations

import math
import re
import statistics
import warnings
from collections.abc import Collection, Mapping, Sequence
from functools import lru_cache
from typing import Annotated, Any

import torch
from pydantic import AfterValidator, BaseModel, Field, ValidationInfo

from recurbench.agents.cores import CORES
from recurbench.agents.training import (
    AGENT_CORE_SETTINGS,
    CoreSettings,
    PPOSettings,
    mission_len,
    train_agent,
)
from recurbench.config import StrictModel, Unique, check_names, check_unique, known_name
from recurbench.envs import ENV_PAIRS, EnvPair, parse_pair
from recurbench.envs.minigrid import check_env, check_env_id
from recurbench.errors import ConfigError, DataWarning
from recurbench.plugins import planned_settings, plugin_settings_field
from recurbench.records import logged_settings
from recurbench.reference import KERG_TABLE4_CAVEAT, read_table
from recurbench.suites.base import (
    ProgressFn,
    RunOutcome,
    RunPlan,
    SuiteDefinition,
    selected_names,
    selected_seeds,
)
from recurbench.suites.paper_settings import footnote_row, outcomes_caveat
from recurbench.tracking import RunHandle


class PairIds(StrictModel):
    """A train/test pair a suite file defines: gymnasium ids (checked against the registry by ``plan``)."""

    train: str = Field(min_length=1, description="the env trained on")
    test: str = Field(min_length=1, description="the env tested on")


def _new_pair_names(pairs: dict[str, PairIds]) -> dict[str, PairIds]:
    for name in pairs:
        if name in ENV_PAIRS:
            raise ValueError(f"{name!r} is a shipped env pair's name; give this pair another")
    return pairs


def _known_pair(name: str, info: ValidationInfo) -> str:
    """An env pair name: a shipped pair or one of the profile's ``pairs`` (validated before ``envs``)."""
    if name not in ENV_PAIRS and name not in info.data.get("pairs", {}):
        known = [*ENV_PAIRS, *info.data.get("pairs", {})]
        raise ValueError(f"unknown env pair {name!r}; known: {', '.join(known)}")
    return name


def observation_tag(core: CoreSettings) -> str:
    """What the agent observes, as runs tag it."""
    return "image+direction+mission" if core.mission else "image+direction"


class MinigridProfile(StrictModel):
    pairs: Annotated[dict[str, PairIds], AfterValidator(_new_pair_names)] = Field(
        default_factory=dict, description="env pairs of this file: name -> {train: id, test: id}"
    )
    envs: Annotated[list[Annotated[str, AfterValidator(_known_pair)]], Unique] = Field(min_length=1)
    models: Annotated[list[known_name(CORES, "memory core")], Unique] = Field(min_length=1)
    seeds: int = Field(1, ge=1)
    total_timesteps: int = Field(ge=1, description="environment steps of training per run")
    eval_episodes: int = Field(100, ge=1, description="episodes on the train env and on the test env")
    ppo: PPOSettings = PPOSettings()
    core: CoreSettings = CoreSettings()
    plugin_settings: plugin_settings_field(CORES) = Field(  # type: ignore[valid-type]
        default_factory=dict, description="plugin core -> its own settings (keyword parameters of its __init__ after "
        "input_size and hidden_size; one of core's given here applies to it alone), e.g. --set "
        "plugin_settings.gru.layers=2; logged as plugin_settings.* params")

    def all_pairs(self) -> dict[str, EnvPair]:
        """The shipped pairs and this profile's own, by name."""
        return {**ENV_PAIRS, **{name: EnvPair(name, ids.train, ids.test) for name, ids in self.pairs.items()}}


@lru_cache(maxsize=1)
def paper_table() -> dict[tuple[str, str, str], dict[str, float]]:
    """``{(train_env, test_env, core): {"train": r, "test": r}}`` from Kerg et al.'s Table 4."""
    table: dict[tuple[str, str, str], dict[str, float]] = {}
    for row in read_table("kerg_table4_minigrid.csv").to_dict("records"):
        for core in ("memlstm", "rellstm"):
            table[(row["train_env"], row["test_env"], core)] = {
                "train": float(row[f"{core}_train"]), "test": float(row[f"{core}_test"])
            }
    return table


def _params(profile: MinigridProfile, pair: EnvPair, core: str) -> dict[str, Any]:
    """The params a run of ``core`` on env pair ``pair`` logs (the seed aside); a plugin core's own
    settings under ``plugin_settings`` (what ``execute`` hands it)."""
    own = planned_settings(CORES, core, profile.plugin_settings, shared=AGENT_CORE_SETTINGS)
    return {
        "train_env": pair.train, "test_env": pair.test, "core": core,
        "total_timesteps": profile.total_timesteps, "eval_episodes": profile.eval_episodes,
        "ppo": profile.ppo.model_dump(), "core_settings": profile.core.model_dump(),
        **({"plugin_settings": own} if own else {}),
    }


def selected_pairs(profile: MinigridProfile, selection: Mapping[str, Any]) -> list[EnvPair]:
    """``--envs`` (names) and ``--pair`` (``TRAIN_ID:TEST_ID``, selection key ``pairs``), else the
    profile's ``envs``. A ``--pair`` whose ids are a known pair's runs as that pair."""
    known = profile.all_pairs()
    by_ids = {(p.train, p.test): p for p in known.values()}
    names = list(selection.get("envs") or ([] if selection.get("pairs") else profile.envs))
    check_names(names, known, "env pair", "--envs")
    pairs = [known[name] for name in names]
    for i, text in enumerate(selection.get("pairs") or ()):
        parsed = parse_pair(text, f"--pair.{i}")
        for role, env_id in (("train", parsed.train), ("test", parsed.test)):
            try:  # an id with a typo is that error alone, not also a warning about two families
                check_env_id(env_id)
            except ConfigError as exc:
                raise ConfigError(f"--pair.{i} {text!r} ({role}): {exc}") from None
        if (train := env_family(parsed.train)) != (test := env_family(parsed.test)):
            warnings.warn(f"--pair.{i} {text!r}: train and test come from two MiniGrid families ({train}, {test}): "
                          "the test reward then measures another task, not generalisation to a harder one of the same "
                          "task, and the generalisation ratio does not read as the paper's", DataWarning, stacklevel=2)
        pairs.append(by_ids.get((parsed.train, parsed.test), parsed))
    check_unique([p.name for p in pairs], "env pair", "--envs/--pair")
    return pairs


def env_family(env_id: str) -> str:
    """The family of a MiniGrid id: its name without the size suffix (``MiniGrid-MemoryS7-v0`` ->
    ``Memory``, ``MiniGrid-DoorKey-8x8-v0`` -> ``DoorKey``, ``MiniGrid-LavaCrossingS9N1-v0`` ->
    ``LavaCrossing``)."""
    parts = env_id.split("-")
    return re.sub(r"(S\d+\w*|\d+)$", "", parts[1]) if len(parts) > 2 else env_id


def check_pair_envs(pairs: Sequence[EnvPair], core: CoreSettings, own: Collection[str] = ()) -> None:
    """Each env id registered and made once with the observation the agent reads: a bad one is a
    ConfigError naming its pair, before anything trains; one of the profile's ``own`` pairs by its key
    (``pairs.<name>.<role>``, which the runner names in the profile's file)."""
    for pair in pairs:
        for role, env_id in (("train", pair.train), ("test", pair.test)):
            try:
                check_env(env_id, mission_len=mission_len(core))
            except ConfigError as exc:
                where = f"pairs.{pair.name}.{role}:" if pair.name in own else f"env pair {pair.name!r} ({role}):"
                raise ConfigError(f"{where} {exc}") from None


class MinigridSuite(SuiteDefinition):
    name = "minigrid"
    profile_model = MinigridProfile
    selection_keys = ("envs", "pairs", "models", "total_timesteps")
    default_device = "cpu"  # small recurrent policies: stable-baselines3 advises the CPU for non-CNN policies
    headline_metrics = ("train_reward", "test_reward", "generalisation_ratio")

    def plan(self, profile: BaseModel, selection: Mapping[str, Any], *, data_dir: str | None) -> list[RunPlan]:
        assert isinstance(profile, MinigridProfile)
        pairs = selected_pairs(profile, selection)
        models = selected_names(selection, "models", profile.models, CORES, "memory core")
        for name in models:  # before anything is planned or written: a core that cannot drive an agent
            if why := CORES[name].not_for_agents:
                raise ConfigError(f"--models: memory core {name!r} cannot drive an agent: {why}")
        seeds = selected_seeds(selection, profile.seeds)
        if selection.get("total_timesteps"):
            profile = profile.model_copy(update={"total_timesteps": int(selection["total_timesteps"])})
        if profile.ppo.n_steps % profile.ppo.seq_len or profile.ppo.batch_size % profile.ppo.seq_len:
            raise ConfigError(
                f"ppo: n_steps ({profile.ppo.n_steps}) and batch_size ({profile.ppo.batch_size}) must be "
                f"multiples of seq_len ({profile.ppo.seq_len})"
            )
        check_pair_envs(pairs, profile.core, own=profile.pairs)
        tags = {"observation": observation_tag(profile.core)}
        return [
            RunPlan(f"{pair.name}-{core}-s{seed}", seed, {"agent": core, "env": pair.name, **tags},
                    _params(profile, pair, core), payload=(pair, core, profile))
            for pair in pairs for core in models for seed in seeds
        ]

    def shipped_settings(self, profile: BaseModel) -> list[tuple[dict[str, str], dict[str, str | None]]]:
        """Every env pair (shipped and the profile's own) x memory core, at the profile's settings."""

        assert isinstance(profile, MinigridProfile)
        out = []
        for core in CORES:
            try:
                out += [({"env": name, "agent": core}, logged_settings(_params(profile, pair, core)))
                        for name, pair in profile.all_pairs().items()]
            except ConfigError:
                continue  # a plugin core with a setting the profile does not give: no run can have its settings
        return out

    def setting_defaults(self) -> dict[str, str]:
        """PPO's and the core's default settings, as the runs log them: a run from before
        ``core_settings.mission`` was added saw the mission (``True``)."""

        defaults = {"ppo": PPOSettings().model_dump(), "core_settings": CoreSettings().model_dump()}
        return logged_settings(defaults)

    def execute(
        self, plan: RunPlan, run: RunHandle, progress: ProgressFn, *, data_dir: str | None, device: torch.device
    ) -> dict[str, float]:
        pair, core, profile = plan.payload
        torch.set_num_threads(1)  # small networks: one thread is fastest and leaves cores to the envs
        result = train_agent(
            core, pair.train, pair.test, total_timesteps=profile.total_timesteps, eval_episodes=profile.eval_episodes,
            ppo=profile.ppo, core_settings=profile.core, seed=plan.seed, run=run, progress=progress, device=str(device),
            plugin_settings=plan.params.get("plugin_settings"),
        )
        run.log_dict({"curve": result.curve}, "learning_curve.json")
        return {"train_reward": result.train_reward, "test_reward": result.test_reward,
                "generalisation_ratio": result.generalisation_ratio}

    def summary_rows(self, outcomes: Sequence[RunOutcome]) -> tuple[list[str], list[list[str]]]:
        """Per pair x core: finished seeds, mean train and test reward, and test/train as the ratio of
        those means (every finished seed counts, one with train reward 0 too); the paper's figures
        (marked †, with a closing row saying how they were produced), left out where no pair shown has any."""
        groups: dict[tuple[str, str], list[RunOutcome]] = {}
        for o in outcomes:
            groups.setdefault((o.plan.tags["env"], o.plan.tags["agent"]), []).append(o)
        header = ["env pair", "core", "seeds ok", "train", "test", "test/train", "paper train†", "paper test†"]
        rows = []
        for (pair_name, core), group in groups.items():
            done = [o for o in group if o.status == "FINISHED"]
            train, test = (_mean([o.metrics.get(key, math.nan) for o in done]) for key in ("train_reward", "test_reward"))
            pair = group[0].plan.payload[0] if group[0].plan.payload else ENV_PAIRS.get(pair_name)
            paper = paper_table().get((pair.train, pair.test, core)) if pair else None
            rows.append([
                pair_name, core, f"{len(done)}/{len(group)}", _fmt(train), _fmt(test), _ratio(test, train),
                f"{paper['train']:.2f}" if paper else "-", f"{paper['test']:.2f}" if paper else "-",
            ])
        if not any(row[-1] != "-" or row[-2] != "-" for row in rows):  # no pair the paper ran: ours only
            return header[:-2], [row[:-2] for row in rows]
        caveat = outcomes_caveat(self, outcomes)
        rows.append(footnote_row(f"† {KERG_TABLE4_CAVEAT}" + (f". Ours are {caveat}" if caveat else ""), header))
        return header, rows


def _mean(values: Sequence[float]) -> float:
    """Mean of the values that are numbers (NaN when none is)."""
    numbers = [v for v in values if not math.isnan(v)]
    return statistics.fmean(numbers) if numbers else math.nan


def _fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def _ratio(test: float, train: float) -> str:
    """test/train of the means over seeds; a mean train reward of 0 has no ratio, and says so."""
    if math.isnan(test) or math.isnan(train):
        return "-"
    return f"{test / train:.2f}" if train > 0 else "- (train 0)"
