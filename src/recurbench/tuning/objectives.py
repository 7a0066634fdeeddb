"""Study objectives. Each is a small picklable dataclass (study workers may be Ray tasks) that resolves
its suite job lazily, inside the worker.

``LTSFObjective`` tunes an RSA forecaster's REM heads (k1..k6, dilations), its gate initialisation
and optionally the learning rate, on the *validation* loss (the test split is never touched while
tuning), reporting the validation loss every epoch so the pruner can stop bad trials.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import torch
import yaml
from stable_baselines3.common.callbacks import BaseCallback

from recurbench.agents.training import evaluate, make_agent
from recurbench.config import deep_merge, parse_overrides, read_yaml, unknown_name
from recurbench.data import prepare
from recurbench.envs import ENV_PAIRS
from recurbench.envs.minigrid import env_max_steps
from recurbench.errors import ConfigError
from recurbench.forecasters.models import ARCHITECTURES, build_network
from recurbench.forecasters.training import ValCheck, train
from recurbench.runtime import raise_if_terminated
from recurbench.seeding import seed_everything
from recurbench.suites.base import RunPlan, suite_file
from recurbench.suites.registry import load_profile
from recurbench.suites.runner import plan_runs
from recurbench.tracking import RunHandle
from recurbench.tuning.spaces import (
    BPTT_LENGTHS,
    bptt_candidates,
    dilation_candidates,
    seasonal_periods,
    suggest_rem_heads,
)
from recurbench.tuning.study import Objective


@dataclass
class LTSFObjective(Objective):
    model: str
    dataset: str
    horizon: int
    profile: str = "quick"
    data_dir: str | None = None
    tune_lr: bool = False
    seed: int = 0
    config: str | None = None
    """A suite YAML to use instead of the shipped one (``--config``)."""
    overrides: tuple[str, ...] = ()
    """``--set KEY=VALUE`` items applied on top of the profile."""
    device: str = "cpu"
    """Where each trial trains (a resolved ``--device``, e.g. ``cuda:0``)."""

    suite = "ltsf"
    direction = "minimize"
    target_name = "best validation MSE"

    @cached_property
    def job(self) -> Any:
        rsa = [name for name, arch in ARCHITECTURES.items() if arch.rsa]
        if self.model not in ARCHITECTURES:
            raise ConfigError(f"--model: {unknown_name('model', self.model, ARCHITECTURES)}; tune tunes the RSA "
                              f"ones ({', '.join(rsa)})")
        if not ARCHITECTURES[self.model].rsa:
            raise ConfigError(f"--model {self.model!r}: REM heads can only be tuned for RSA models ({', '.join(rsa)})")
        selection = {"datasets": [self.dataset], "horizons": [str(self.horizon)], "models": [self.model]}
        return plan_target(self, selection, data_dir=self.data_dir).payload

    @cached_property
    def data(self) -> Any:
        return prepare(self.dataset, self.job.window, self.data_dir)

    @cached_property
    def dilations(self) -> list[int]:
        periods = seasonal_periods(self.data.train.data, self.data.series.step)
        return dilation_candidates(periods, self.job.window.seq_len)

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "dataset": self.dataset, "horizon": self.horizon, "profile": self.profile,
                **_profile_source(self), "dilation_candidates": self.dilations, "tune_lr": self.tune_lr}

    def paper_params(self) -> dict[str, Any] | None:
        """The profile's own (Table 5) head layout as trial parameters, to enqueue as a baseline trial.

        None when a dilation of that layout is not among this study's candidates."""
        rsa = self.job.network.rsa
        k1, k2, _k3, k4, k5, _k6 = rsa.k
        regular, pairs = k1 + k4, k2 + k5
        if any(d not in self.dilations for d in rsa.dilations):
            return None
        params: dict[str, Any] = {"cyclical_pairs": pairs, "dilated_regular_fraction": k4 / regular if regular else 0.0,
                                  "gate_init": rsa.gate_init}
        if pairs:
            params["dilated_pairs_fraction"] = k5 / pairs
        params.update({f"dilation_{i}": d for i, d in enumerate(rsa.dilations)})
        if self.tune_lr:
            params["learning_rate"] = self.job.training.learning_rate
            params["rsa_lr_factor"] = self.job.training.rsa_lr_factor
        return params

    def tuned_profile(self, base: dict[str, Any], best: optuna.trial.FrozenTrial) -> dict[str, Any]:
        """``base`` narrowed to this dataset/horizon/model, with the best REM heads, gate init (and lr)."""
        tuned: dict[str, Any] = {
            **base,
            "datasets": [self.dataset],
            "horizons": {self.dataset: [self.horizon]},
            "models": [self.model],
            "model": {**base.get("model", {}), "gate_init": float(best.params["gate_init"])},
            "rem_heads": {self.dataset: {self.horizon: {self.model: {
                "k": list(best.user_attrs["k"]), "dilations": list(best.user_attrs["dilations"])}}}},
        }
        rates = {k: float(best.params[k]) for k in ("learning_rate", "rsa_lr_factor") if k in best.params}
        if rates:  # --tune-lr (a study begun before rsa_lr_factor was searched has only the learning rate)
            tuned["training"] = {**base.get("training", {}), **rates}
        return tuned

    def __call__(self, trial: optuna.Trial, run: RunHandle) -> float:
        job = self.job
        n_heads = job.network.n_heads
        choice = suggest_rem_heads(trial, n_heads, self.dilations)
        rsa = dataclasses.replace(job.network.rsa, k=choice.k, dilations=choice.dilations, gate_init=choice.gate_init)
        network_cfg = job.network.with_(rsa=rsa)
        network_cfg.check()
        training = job.training
        if self.tune_lr:
            training = dataclasses.replace(
                training, learning_rate=trial.suggest_float("learning_rate", 1e-5, 1e-3, log=True),
                rsa_lr_factor=trial.suggest_float("rsa_lr_factor", 1.0, 1000.0, log=True),
            )
        run.log_params({"k": list(choice.k), "dilations": list(choice.dilations), "gate_init": choice.gate_init,
                        "learning_rate": training.learning_rate, "rsa_lr_factor": training.rsa_lr_factor})
        run.set_tags(self.data.provenance())
        trial.set_user_attr("k", list(choice.k))
        trial.set_user_attr("dilations", list(choice.dilations))
        seed_everything(self.seed)
        torch.set_num_threads(1)
        network = build_network(self.model, network_cfg).to(self.device)

        checks = training.val_checks_per_epoch

        def on_epoch(record: Any) -> None:
            run.log_metrics({"train_loss": record.train_loss}, step=record.epoch)
            if checks == 1:
                self.report(trial, run, float(record.val_loss), record.epoch, "val_loss")

        def on_check(check: ValCheck) -> None:
            if checks > 1:  # the pruner sees every check, at its training batch
                self.report(trial, run, check.val_loss, check.step, "val_loss_check")

        result = train(network, self.data.train.dataset(), self.data.val.dataset(), job.window.pred_len, training,
                       on_epoch=on_epoch, on_check=on_check)
        return float(result.best_val_loss)


_TUNE_OPTIONS = ((re.compile(r"^--(dataset|horizon|model)s(\.0)?\b"), r"--\1"),
                 (re.compile(r"^--(envs(\.0)?|pair\.0)\b"), "--env"))
"""``run``'s options in the suites' messages (``--datasets.0``, ``--pair.0``) and ``tune``'s for them."""


def _as_tune_option(message: str) -> str:
    for pattern, option in _TUNE_OPTIONS:
        message = pattern.sub(option, message)
    return message


def plan_target(objective: LTSFObjective | MinigridObjective, selection: Mapping[str, Any], *,
                data_dir: str | None = None, check: Callable[[RunPlan], None] | None = None) -> RunPlan:
    """The one run of the objective's profile (``--config``, ``--set``) that ``selection`` picks, planned
    by the suite's own ``plan``: ``tune`` refuses whatever ``run`` refuses, before any store or trial.
    An error (``check``'s too) reads as ``run``'s does, a profile key in its file, with ``tune``'s
    option names (``--env`` for ``--envs.0`` or ``--pair.0``); the suite's warnings likewise."""
    definition, cfg = load_profile(objective.suite, objective.profile, objective.config, objective.overrides)
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (plan,) = plan_runs(definition, cfg, objective.profile, objective.config, objective.overrides,
                                {**selection, "seeds": 1}, data_dir, check)
    except ConfigError as exc:
        raise ConfigError(_as_tune_option(str(exc))) from None
    finally:  # before the error too, as `run` says them
        for w in caught:
            warnings.warn_explicit(_as_tune_option(str(w.message)), w.category, w.filename, w.lineno)
    return plan


def _profile_source(objective: LTSFObjective | MinigridObjective) -> dict[str, Any]:
    """Where the study's profile came from, when not the shipped suite file as it is."""
    source: dict[str, Any] = {}
    if objective.config is not None:
        source["config"] = objective.config
    if objective.overrides:
        source["overrides"] = list(objective.overrides)
    return source


def write_best_profile(objective: LTSFObjective | MinigridObjective, best: optuna.trial.FrozenTrial, path: str,
                       profile_name: str = "tuned") -> None:
    """Write a suite file whose one profile is the study's profile narrowed to its target and set to
    the best trial's configuration: ``recurbench run SUITE --config PATH --profile tuned`` trains it.
    Written to a temporary file first, then moved into place, with the mode the umask gives a new file."""
    source = objective.config if objective.config is not None else suite_file(objective.suite)
    base = deep_merge(read_yaml(source)["profiles"][objective.profile], parse_overrides(objective.overrides))
    doc = {
        "suite": objective.suite,
        "description": f"Best trial {best.number} (value {best.value:.6g}) of an Optuna study: {objective.describe()}",
        "profiles": {profile_name: objective.tuned_profile(base, best)},
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".yaml.part")
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(doc, fh, sort_keys=False)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600: as open() would create it
    os.replace(tmp, target)


@dataclass
class MinigridObjective(Objective):
    """Tunes a memory core's sizes (RelLSTM: nu, rho and the BPTT length; MemLSTM: the window M) and
    PPO's learning rate and entropy coefficient, maximising the mean episodic reward on the
    *training* environment (the larger test environment is never touched while tuning). The rolling
    mean reward is reported after every rollout so the pruner can stop bad trials early."""

    model: str
    env: str
    profile: str = "quick"
    seed: int = 0
    total_timesteps: int | None = None
    """Override of the profile's budget per trial."""
    config: str | None = None
    overrides: tuple[str, ...] = ()
    device: str = "cpu"
    """Where each trial trains (a resolved ``--device``)."""

    suite = "minigrid"
    direction = "maximize"
    target_name = "mean return, training env"

    @cached_property
    def planned(self) -> RunPlan:
        """The run ``recurbench run minigrid`` would plan for this core and env pair at the profile's
        settings (so every check of ``run`` applies), and RelLSTM's BPTT lengths checked against it.
        ``env``: a pair's name (shipped, or the profile's ``pairs``) or ``TRAIN_ID:TEST_ID`` (``run --pair``)."""
        selection: dict[str, Any] = {"models": [self.model], ("pairs" if ":" in self.env else "envs"): [self.env]}
        if self.total_timesteps:
            selection["total_timesteps"] = self.total_timesteps
        return plan_target(self, selection, check=self._check_bptt)

    def _check_bptt(self, plan: RunPlan) -> None:
        ppo = plan.payload[2].ppo
        if self.model == "rellstm" and not bptt_candidates(ppo.n_steps, ppo.batch_size):
            raise ConfigError(
                f"ppo: n_steps ({ppo.n_steps}) and batch_size ({ppo.batch_size}) must be multiples of one of the "
                f"BPTT lengths tune tries for rellstm ({', '.join(map(str, BPTT_LENGTHS))})"
            )

    @property
    def job(self) -> Any:
        """(EnvPair, MinigridProfile): the pair trained on and the profile, ``total_timesteps`` applied."""
        pair, _core, profile = self.planned.payload
        return pair, profile

    @property
    def plugin_settings(self) -> dict[str, Any]:
        """A plugin core's own settings from the profile's ``plugin_settings`` (``--set
        plugin_settings.NAME.KEY=V``), as the suite plans them; empty for a built-in."""
        return dict(self.planned.params.get("plugin_settings") or {})

    def describe(self) -> dict[str, Any]:
        pair, cfg = self.job
        return {"model": self.model, "env": self.env, "train_env": pair.train, "profile": self.profile,
                **_profile_source(self), "total_timesteps": cfg.total_timesteps}

    def suggest(self, trial: optuna.Trial) -> tuple[Any, Any]:
        """(PPOSettings, CoreSettings) for one trial."""
        pair, cfg = self.job
        ppo_updates: dict[str, Any] = {
            "learning_rate": trial.suggest_float("learning_rate", 1e-4, 3e-3, log=True),
            "ent_coef": trial.suggest_float("ent_coef", 1e-4, 5e-2, log=True),
        }
        core_updates: dict[str, Any] = {}
        if self.model == "rellstm":
            core_updates["nu"] = trial.suggest_int("nu", 1, 16)
            core_updates["rho"] = trial.suggest_int("rho", 0, 16)
            ppo_updates["seq_len"] = trial.suggest_categorical("bptt_len", bptt_candidates(cfg.ppo.n_steps, cfg.ppo.batch_size))
        elif self.model == "memlstm":
            core_updates["memory_window"] = trial.suggest_int("memory_window", 4, env_max_steps(pair.train), log=True)
        return cfg.ppo.model_copy(update=ppo_updates), cfg.core.model_copy(update=core_updates)

    def tuned_profile(self, base: dict[str, Any], best: optuna.trial.FrozenTrial) -> dict[str, Any]:
        """``base`` narrowed to this env pair and core, with the best trial's PPO and core settings; a pair
        given as ``TRAIN_ID:TEST_ID`` is defined under ``pairs``, by the name its runs are tagged with."""
        pair, _ = self.job
        ppo, core = self.suggest(optuna.trial.FixedTrial(best.params))
        pairs = dict(base.get("pairs") or {})
        if pair.name not in ENV_PAIRS and pair.name not in pairs:
            pairs[pair.name] = {"train": pair.train, "test": pair.test}
        return {**base, **({"pairs": pairs} if pairs else {}), "envs": [pair.name], "models": [self.model],
                "ppo": ppo.model_dump(), "core": core.model_dump()}

    def __call__(self, trial: optuna.Trial, run: RunHandle) -> float:
        pair, cfg = self.job
        ppo, core = self.suggest(trial)
        run.log_params({"ppo": ppo.model_dump(), "core": core.model_dump(),
                        **({"plugin_settings": self.plugin_settings} if self.plugin_settings else {})})
        seed_everything(self.seed)
        torch.set_num_threads(1)
        report = self.report

        class ReportReward(BaseCallback):
            def _on_step(self) -> bool:
                raise_if_terminated()  # a stop swallowed on its way (see recurbench.runtime)
                return True

            def _on_rollout_end(self) -> None:
                episodes = self.model.ep_info_buffer
                if episodes:
                    report(trial, run, float(np.mean([ep["r"] for ep in episodes])), self.num_timesteps, "rollout_reward")

        agent = make_agent(self.model, pair.train, ppo, core, seed=self.seed, device=self.device,
                           plugin_settings=self.plugin_settings)
        try:
            agent.learn(cfg.total_timesteps, callback=ReportReward())
        finally:
            agent.get_env().close()
        return evaluate(agent, pair.train, cfg.eval_episodes, seed=self.seed + 10_000)
