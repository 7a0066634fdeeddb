"""``tune minigrid`` as a library call: a request ``run minigrid`` would refuse is refused before any
store, study or trial, in one line; an env pair is resolved as ``run`` resolves it (the profile's own
pairs, ``TRAIN_ID:TEST_ID``); RelLSTM's search space only proposes BPTT lengths PPO can train with."""

from __future__ import annotations

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution

from recurbench.engine import EngineSpec
from recurbench.envs import EnvPair
from recurbench.errors import ConfigError, RecurbenchError
from recurbench.suites.base import suite_file
from recurbench.suites.registry import load_profile
from recurbench.tracking import MlflowTracker
from recurbench.tuning.objectives import MinigridObjective, write_best_profile
from recurbench.tuning.tune import TuneRequest, make_objective, tune

MEMORY_S9 = EnvPair("MemoryS9", "MiniGrid-MemoryS7-v0", "MiniGrid-MemoryS9-v0")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # Each of these failed inside trial 0 with a traceback, leaving both stores with a FAILED trial and runs.
        ({"overrides": ("ppo.batch_size=7",)},
         r"minigrid\.yaml: profiles\.quick\.ppo: n_steps \(64\) and batch_size \(7\) must be multiples of seq_len \(16\) "
         r"\(with --set ppo\.batch_size=7\)$"),
        ({"model": "sab"}, r"^--model: memory core 'sab' cannot drive an agent: "),
        # Valid for run at seq_len 12, but no BPTT length tune tries (8, 16, 32) divides 12.
        ({"overrides": ("ppo.n_steps=12", "ppo.batch_size=12", "ppo.seq_len=12")},
         r"minigrid\.yaml: profiles\.quick\.ppo: n_steps \(12\) and batch_size \(12\) must be multiples of one of the "
         r"BPTT lengths tune tries for rellstm \(8, 16, 32\) \(with --set ppo\.n_steps=12 --set ppo\.batch_size=12 "
         r"--set ppo\.seq_len=12\)$"),
        ({"env": "MiniGrid-MemoryS7-v0:MiniGrid-MemoryS99-v0"},
         r"^--env 'MiniGrid-MemoryS7-v0:MiniGrid-MemoryS99-v0' \(test\): unknown environment id 'MiniGrid-MemoryS99-v0'"),
        # Numpy's "Seed must be between 0 and 2**32 - 1" traceback, after the study was created.
        ({"seed": -1}, r"^--seed must be at least 0, got -1$"),
        ({"seed": 2**32}, r"^--seed must be at most 2147483647, got 4294967296$"),
        # The ltsf suite's options were ignored (the study ran).
        ({"dataset": "ETTh1"}, r"^--dataset applies to tune ltsf, not 'minigrid'$"),
        ({"horizon": 24}, r"^--horizon applies to tune ltsf, not 'minigrid'$"),
        ({"enqueue_paper": True}, r"^--enqueue-paper applies to tune ltsf, not 'minigrid'$"),
        ({"tune_lr": True}, r"^--tune-lr applies to tune ltsf, not 'minigrid'$"),
        # run's option names (--envs.0) as tune's.
        ({"env": "Maze"}, r"^--env: unknown env pair 'Maze'; known: RedBlueDoors, GoToObject, Memory, "),
    ],
)
def test_a_bad_tune_minigrid_request_is_refused_before_any_store_or_trial(tmp_path, changes, message):
    fields = {"model": "rellstm", "env": "Memory", "storage": f"sqlite:///{tmp_path}/optuna.db", **changes}
    with pytest.raises(RecurbenchError, match=message):
        tune(TuneRequest("minigrid", trials=1, **fields), MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db"), EngineSpec())
    assert list(tmp_path.iterdir()) == []



@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        # Said "unknown suite 'langs' for tune" of a suite run knows.
        ({"suite": "langs", "model": "rsa_i"}, r"^tune has no search space for suite 'langs'; tune tunes ltsf and minigrid$"),
        ({"suite": "nope", "model": "rsa_i"}, r"^unknown suite 'nope'; tune tunes ltsf and minigrid$"),
        # Said "REM heads can only be tuned for RSA models" of a model that does not exist.
        ({"suite": "ltsf", "model": "nosuch", "dataset": "ETTh1", "horizon": 24},
         r"^--model: unknown model 'nosuch'; known: informer, rsa_informer, .*; tune tunes the RSA ones \(rsa_informer, "),
        ({"suite": "ltsf", "model": "informer", "dataset": "ETTh1", "horizon": 24},
         r"^--model 'informer': REM heads can only be tuned for RSA models \(rsa_informer, "),
    ],
)
def test_a_suite_or_model_tune_cannot_tune_is_named_for_what_it_is(tmp_path, request_fields, message):
    with pytest.raises(RecurbenchError, match=message):
        tune(TuneRequest(trials=1, storage=f"sqlite:///{tmp_path}/optuna.db", **request_fields),
             MlflowTracker(f"sqlite:///{tmp_path}/mlflow.db"), EngineSpec())
    assert list(tmp_path.iterdir()) == []

def _with_pairs(tmp_path):
    """The shipped minigrid file with the pair MemoryS9 in its quick profile (``--config``)."""
    doc = yaml.safe_load(suite_file("minigrid").read_text())
    doc["profiles"]["quick"]["pairs"] = {MEMORY_S9.name: {"train": MEMORY_S9.train, "test": MEMORY_S9.test}}
    path = tmp_path / "mg2.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _best():
    """A finished trial of the lstm search space (PPO's learning rate and entropy coefficient)."""
    dists = {"learning_rate": FloatDistribution(1e-4, 3e-3, log=True), "ent_coef": FloatDistribution(1e-4, 5e-2, log=True)}
    return optuna.trial.create_trial(params={"learning_rate": 1e-3, "ent_coef": 1e-2}, distributions=dists, value=0.5)


@pytest.mark.parametrize(
    ("env", "pair"),
    [
        ("MemoryS9", MEMORY_S9),  # a pair of the --config file ("unknown env pair" before)
        (f"{MEMORY_S9.train}:{MEMORY_S9.test}", MEMORY_S9),  # its ids: that pair, as `run --pair` takes them
        ("MiniGrid-MemoryS7-v0:MiniGrid-MemoryS13-v0", EnvPair("Memory", "MiniGrid-MemoryS7-v0", "MiniGrid-MemoryS13-v0")),
        ("MiniGrid-MemoryS7-v0:MiniGrid-MemoryS11-v0",
         EnvPair("MiniGrid-MemoryS7-v0:MiniGrid-MemoryS11-v0", "MiniGrid-MemoryS7-v0", "MiniGrid-MemoryS11-v0")),
    ],
)
def test_tune_minigrid_takes_the_env_pairs_run_takes_and_writes_a_file_run_trains(tmp_path, env, pair):
    config = _with_pairs(tmp_path)
    request = TuneRequest("minigrid", "lstm", trials=1, env=env, config=config)
    objective, tags = make_objective(request, EngineSpec())
    assert objective.job[0] == pair and tags == {"env": pair.name}  # the study is named by the pair, as run tags it
    write_best_profile(objective, _best(), str(tmp_path / "tuned.yaml"))
    definition, profile = load_profile("minigrid", "tuned", tmp_path / "tuned.yaml")
    (plan,) = definition.plan(profile, {}, data_dir=None)
    assert plan.payload[0] == pair and plan.tags["env"] == pair.name


def test_rellstm_is_offered_only_the_bptt_lengths_its_rollouts_and_minibatches_divide_into():
    """At the shipped settings every length (8, 16, 32) divides n_steps and batch_size; with
    ``--set ppo.n_steps=48 --set ppo.batch_size=48`` (valid for run, at seq_len 16) 32 does not, and
    is not proposed (before, a trial that drew it failed in PPO)."""
    for overrides, lengths in (((), (8, 16, 32)), (("ppo.n_steps=48", "ppo.batch_size=48"), (8, 16))):
        objective = MinigridObjective("rellstm", "Memory", overrides=overrides)
        trial = optuna.create_study().ask()
        ppo, _core = objective.suggest(trial)
        assert trial.distributions["bptt_len"] == CategoricalDistribution(lengths)
        assert ppo.n_steps % ppo.seq_len == 0 and ppo.batch_size % ppo.seq_len == 0


def test_a_bad_plugin_core_name_is_the_suites_line_named_as_tunes_option():
    with pytest.raises(ConfigError, match=r"^--model: unknown memory core 'gruu'; known: "):
        MinigridObjective("gruu", "Memory").job  # noqa: B018
