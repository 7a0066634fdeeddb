"""The minigrid suite: profile validation with paths, planning, and one tiny run end to end."""

from __future__ import annotations

import json
import math
import warnings
from contextlib import nullcontext

import pytest
import yaml
from typer.testing import CliRunner

from recurbench.cli import app
from recurbench.errors import ConfigError, DataWarning
from recurbench.records import logged_settings
from recurbench.suites.minigrid import paper_table
from recurbench.suites.registry import load_profile
from recurbench.suites.runner import run_suite
from recurbench.tracking import MemoryTracker

TINY = {
    "envs": ["GoToDoor"],
    "models": ["rellstm"],
    "seeds": 1,
    "total_timesteps": 256,
    "eval_episodes": 2,
    "ppo": {"n_envs": 2, "n_steps": 64, "batch_size": 32, "seq_len": 16, "n_epochs": 1},
    "core": {"hidden_size": 16, "features_dim": 16, "attention_size": 8},
}


def _write(tmp_path, profile: dict) -> str:
    path = tmp_path / "minigrid.yaml"
    path.write_text(yaml.safe_dump({"suite": "minigrid", "profiles": {"tiny": profile}}))
    return str(path)


def test_shipped_profiles_plan_every_pair_and_core():
    definition, paper = load_profile("minigrid", "paper")
    plans = definition.plan(paper, {}, data_dir=None)
    assert len(plans) == 6 * 3
    assert {p.tags["agent"] for p in plans} == {"lstm", "memlstm", "rellstm"}
    assert paper.total_timesteps == 5_000_000 and paper.eval_episodes >= 100
    # The paper's reference agents saw image and direction only; MemLSTM sees whole test episodes.
    assert {p.tags["observation"] for p in plans} == {"image+direction"}
    assert {(p.params["core_settings"]["mission"], p.params["core_settings"]["memory_window"]) for p in plans} == {
        (False, "episode")
    }
    _, with_mission = load_profile("minigrid", "paper-mission")
    mission_plans = definition.plan(with_mission, {}, data_dir=None)
    assert [p.name for p in mission_plans if p.tags["agent"] == "lstm"] == [
        "GoToObject-lstm-s0", "GoToDoor-lstm-s0", "Fetch-lstm-s0"
    ]
    assert {p.tags["observation"] for p in mission_plans} == {"image+direction+mission"}
    # Everything else is the paper profile's.
    assert with_mission.model_dump(exclude={"envs", "core"}) == paper.model_dump(exclude={"envs", "core"})
    assert with_mission.core.model_copy(update={"mission": False}) == paper.core
    definition, quick = load_profile("minigrid", "quick")
    assert quick.envs == ["GoToObject", "GoToDoor"]
    narrowed = definition.plan(quick, {"envs": ["DoorKey"], "models": ["lstm"], "seeds": 2}, data_dir=None)
    assert [p.name for p in narrowed] == ["DoorKey-lstm-s0", "DoorKey-lstm-s1"]
    # --first-seed adds seeds to a finished set: seeds 2 and 3, seeded as named.
    more = definition.plan(quick, {"envs": ["DoorKey"], "models": ["lstm"], "seeds": 2, "first_seed": 2}, data_dir=None)
    assert [(p.name, p.seed) for p in more] == [("DoorKey-lstm-s2", 2), ("DoorKey-lstm-s3", 3)]
    budget = definition.plan(paper, {"envs": ["DoorKey"], "models": ["lstm"], "total_timesteps": 300_000}, data_dir=None)
    assert budget[0].params["total_timesteps"] == 300_000
    assert budget[0].payload[2].total_timesteps == 300_000  # what execute() trains for


@pytest.mark.parametrize(
    "change,message",
    [
        ({"envs": ["DoorKey", "Maze"]}, r"profiles\.tiny\.envs\.1: .*unknown env pair 'Maze'"),
        ({"envs": ["Mine"], "pairs": {"Mine": {"train": "MiniGrid-MemoryS7-v0"}}},
         r"profiles\.tiny\.pairs\.Mine\.test: Field required"),
        ({"envs": ["DoorKey"], "pairs": {"DoorKey": {"train": "a", "test": "b"}}},
         r"profiles\.tiny\.pairs: .*'DoorKey' is a shipped env pair's name"),
        ({"core": {"mission": "no"}}, r"profiles\.tiny\.core\.mission"),
        ({"core": {"memory_window": "all"}}, r"profiles\.tiny\.core\.memory_window"),
        ({"models": ["gru"]}, r"profiles\.tiny\.models\.0: .*unknown memory core 'gru'"),
        ({"ppo": {"n_stepz": 3}}, r"profiles\.tiny\.ppo\.n_stepz: unknown key"),
        ({"total_timesteps": "many"}, r"profiles\.tiny\.total_timesteps"),
    ],
)
def test_bad_profile_names_its_path_in_the_file(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        load_profile("minigrid", "tiny", _write(tmp_path, {**TINY, **change}))


def test_unknown_pair_on_the_command_line_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"--envs\.0: unknown env pair 'Pong'"):
        run_suite("minigrid", "tiny", MemoryTracker(), selection={"envs": ["Pong"]}, config_path=_write(tmp_path, TINY))


def test_pairs_defined_in_a_suite_file_run_under_their_name(tmp_path):
    profile = {**TINY, "envs": ["MemoryS9", "DoorKey"],
               "pairs": {"MemoryS9": {"train": "MiniGrid-MemoryS7-v0", "test": "MiniGrid-MemoryS9-v0"}}}
    definition, cfg = load_profile("minigrid", "tiny", _write(tmp_path, profile))
    plans = definition.plan(cfg, {}, data_dir=None)
    assert [(p.name, p.tags["env"], p.params["train_env"], p.params["test_env"]) for p in plans] == [
        ("MemoryS9-rellstm-s0", "MemoryS9", "MiniGrid-MemoryS7-v0", "MiniGrid-MemoryS9-v0"),
        ("DoorKey-rellstm-s0", "DoorKey", "MiniGrid-DoorKey-5x5-v0", "MiniGrid-DoorKey-16x16-v0"),
    ]
    assert {t["env"] for t, _ in definition.shipped_settings(cfg)} >= {"MemoryS9", "DoorKey"}
    # --pair with the ids of a pair the file names runs as that pair.
    (plan,) = definition.plan(cfg, {"pairs": ["MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0"]}, data_dir=None)
    assert plan.tags["env"] == "MemoryS9"


def test_a_pair_given_on_the_command_line_runs_without_a_file():
    definition, paper = load_profile("minigrid", "paper")
    plans = definition.plan(paper, {"pairs": ["MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0",
                                              "MiniGrid-DoorKey-5x5-v0 : MiniGrid-DoorKey-16x16-v0"],
                                    "models": ["memlstm"]}, data_dir=None)
    assert [(p.tags["env"], p.params["train_env"], p.params["test_env"]) for p in plans] == [
        ("MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0", "MiniGrid-MemoryS7-v0", "MiniGrid-MemoryS9-v0"),
        ("DoorKey", "MiniGrid-DoorKey-5x5-v0", "MiniGrid-DoorKey-16x16-v0"),  # a shipped pair's ids: its name
    ]
    both = definition.plan(paper, {"envs": ["Memory"], "pairs": ["MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0"],
                                   "models": ["lstm"]}, data_dir=None)
    assert [p.tags["env"] for p in both] == ["Memory", "MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0"]
    with pytest.raises(ConfigError, match=r"env pair 'DoorKey' is given twice"):
        definition.plan(paper, {"envs": ["DoorKey"], "pairs": ["MiniGrid-DoorKey-5x5-v0:MiniGrid-DoorKey-16x16-v0"]},
                        data_dir=None)


def test_a_pair_from_two_families_is_taken_with_a_note():
    """Train on one MiniGrid family, test on another: planned (a user may mean it), with a warning that
    the test reward then measures another task; a pair within one family says nothing."""
    from recurbench.errors import DataWarning

    definition, paper = load_profile("minigrid", "paper")
    with pytest.warns(DataWarning, match=r"^--pair\.0 'MiniGrid-MemoryS7-v0:MiniGrid-DoorKey-8x8-v0': train and test "
                                         r"come from two MiniGrid families \(Memory, DoorKey\)"):
        (plan,) = definition.plan(paper, {"pairs": ["MiniGrid-MemoryS7-v0:MiniGrid-DoorKey-8x8-v0"], "models": ["lstm"]},
                                  data_dir=None)
    assert plan.params["test_env"] == "MiniGrid-DoorKey-8x8-v0"

    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        definition.plan(paper, {"pairs": ["MiniGrid-MemoryS7-v0:MiniGrid-MemoryS13Random-v0"], "models": ["lstm"]},
                        data_dir=None)


@pytest.mark.parametrize(
    "pair,message",
    [
        ("MiniGrid-MemoryS7-v0", r"--pair\.0 'MiniGrid-MemoryS7-v0': expected TRAIN_ID:TEST_ID"),
        ("MiniGrid-MemoryS7-v0:", r"expected TRAIN_ID:TEST_ID"),
        ("a:b:c", r"--pair\.0 'a:b:c': expected TRAIN_ID:TEST_ID, two gymnasium ids joined by one colon"),
        ("MiniGrid-MemoryS8-v0:MiniGrid-MemoryS9-v0",
         r"--pair\.0 'MiniGrid-MemoryS8-v0:MiniGrid-MemoryS9-v0' \(train\): unknown environment id "
         r"'MiniGrid-MemoryS8-v0' \(not in gymnasium's registry\); similar ids: MiniGrid-MemoryS9-v0, MiniGrid-MemoryS7-v0"),
        # A typo in the family's name was first warned about as "two MiniGrid families", then refused.
        ("MiniGrid-Emptyy-5x5-v0:MiniGrid-Empty-8x8-v0",
         r"^--pair\.0 'MiniGrid-Emptyy-5x5-v0:MiniGrid-Empty-8x8-v0' \(train\): unknown environment id "
         r"'MiniGrid-Emptyy-5x5-v0'"),
        ("MiniGrid-MemoryS7-v0:CartPole-v1",
         r"env pair 'MiniGrid-MemoryS7-v0:CartPole-v1' \(test\): environment 'CartPole-v1' lacks the observation "
         r"keys \['image', 'direction'\]"),
    ],
)
def test_a_bad_pair_is_refused_before_anything_trains(pair, message):
    definition, paper = load_profile("minigrid", "paper")
    # A pair of two families is said first (a warning), then refused for CartPole's observations.
    said = pytest.warns(DataWarning, match="two MiniGrid families") if "CartPole" in pair else nullcontext()
    with said, pytest.raises(ConfigError, match=message), warnings.catch_warnings():
        if "CartPole" not in pair:
            warnings.simplefilter("error", DataWarning)  # no warning before the error
        definition.plan(paper, {"pairs": [pair]}, data_dir=None)


def test_a_bad_id_in_a_profile_pair_is_named_by_its_key_in_the_file(tmp_path):
    path = _write(tmp_path, {**TINY, "envs": ["typo"],
                             "pairs": {"typo": {"train": "MiniGrid-MemoryS7-v0", "test": "MiniGrid-MemoryS9-vv0"}}})
    with pytest.raises(ConfigError) as bad:
        run_suite("minigrid", "tiny", MemoryTracker(), config_path=path, dry_run=True)
    assert str(bad.value).startswith(f"{path}: profiles.tiny.pairs.typo.test: unknown environment id "
                                     "'MiniGrid-MemoryS9-vv0' (not in gymnasium's registry); similar ids: ")


def test_the_cli_takes_pairs_and_reports_a_bad_one(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ok = CliRunner().invoke(app, ["run", "minigrid", "--profile", "paper", "--models", "lstm", "--dry-run",
                                  "--tracking-uri", uri, "--pair", "MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0"])
    assert ok.exit_code == 0, ok.output
    assert "MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0-lstm-s0" in ok.output.replace("\n", "").replace(" ", "")
    bad = CliRunner().invoke(app, ["run", "minigrid", "--dry-run", "--tracking-uri", uri,
                                   "--pair", "MiniGrid-DoorKey-7x7-v0:MiniGrid-DoorKey-16x16-v0"])
    assert isinstance(bad.exception, ConfigError)
    assert "unknown environment id 'MiniGrid-DoorKey-7x7-v0'" in str(bad.exception)
    assert "similar ids: MiniGrid-DoorKey-8x8-v0" in str(bad.exception)
    assert not (tmp_path / "mlflow.db").exists()  # a dry run writes nothing


@pytest.mark.parametrize("mission", [False, True])
def test_a_tiny_run_logs_curve_rewards_ratio_and_tags(tmp_path, mission):
    tracker = MemoryTracker()
    profile = {**TINY, "core": {**TINY["core"], "mission": mission}}
    result = run_suite("minigrid", "tiny", tracker, config_path=_write(tmp_path, profile))
    assert not result.failed, [o.error for o in result.failed]
    # The headline metrics, which a run reused by --skip-finished must have, are what execute returns.
    from recurbench.suites.minigrid import MinigridSuite

    assert set(result.outcomes[0].metrics) == set(MinigridSuite.headline_metrics)
    (run,) = [r for r in tracker.runs if r.parent_id is not None]
    assert run.tags["agent"] == "rellstm" and run.tags["env"] == "GoToDoor"
    assert run.tags["observation"] == ("image+direction+mission" if mission else "image+direction")
    assert run.params["core_settings.mission"] is mission
    steps = [s for s, _ in run.metrics["rollout_reward"]]
    assert steps == sorted(steps) and steps[-1] == 256  # step = environment steps
    train, test = run.last("train_reward"), run.last("test_reward")
    assert 0 <= train <= 1 and 0 <= test <= 1
    ratio = run.last("generalisation_ratio")
    assert math.isnan(ratio) if train == 0 else ratio == pytest.approx(test / train)
    assert "learning_curve.json" in run.artifacts


def _outcome(env: str, core: str, seed: int, train: float, test: float):
    from recurbench.suites.base import RunOutcome, RunPlan

    plan = RunPlan(f"{env}-{core}-s{seed}", seed, {"agent": core, "env": env}, {})
    ratio = test / train if train > 0 else math.nan
    return RunOutcome(plan, "FINISHED", {"train_reward": train, "test_reward": test, "generalisation_ratio": ratio})


def test_summary_puts_the_papers_figures_next_to_ours_and_says_how_they_were_made():
    assert paper_table()[("MiniGrid-DoorKey-5x5-v0", "MiniGrid-DoorKey-16x16-v0", "rellstm")] == {"train": 0.93, "test": 0.44}
    from recurbench.suites.minigrid import MinigridSuite

    header, rows = MinigridSuite().summary_rows([_outcome("DoorKey", "rellstm", 0, 0.9, 0.3)])
    row = dict(zip(header, rows[0], strict=True))
    assert row["paper train†"] == "0.93" and row["paper test†"] == "0.44" and row["test"] == "0.30"
    assert " ".join(rows[-1][0].split()).startswith(
        "† Kerg et al.'s Table 4 came from agents that saw image and direction only, in code that cleared the "
        "attention memory at every acting step and at the start of every 16-step training chunk"
    )
    # A pair the paper did not run has no paper figures: no paper columns (their † pointed at no
    # footnote), and no footnote.
    header, rows = MinigridSuite().summary_rows([_outcome("MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0", "rellstm", 0,
                                                          0.9, 0.3)])
    assert header == ["env pair", "core", "seeds ok", "train", "test", "test/train"]
    assert rows == [["MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0", "rellstm", "1/1", "0.90", "0.30", "0.33"]]


def test_summary_ratio_is_the_ratio_of_the_means_and_keeps_a_seed_with_train_reward_0():
    from recurbench.suites.minigrid import MinigridSuite

    outcomes = [_outcome("Memory", "lstm", 0, 0.0, 0.2), _outcome("Memory", "lstm", 1, 0.8, 0.4),
                _outcome("Fetch", "lstm", 0, 0.0, 0.1)]
    header, rows = MinigridSuite().summary_rows(outcomes)
    memory, fetch = (dict(zip(header, r, strict=True)) for r in rows[:2])
    # (0.2 + 0.4) / 2 over (0.0 + 0.8) / 2; the mean of the per-seed ratios would have dropped seed 0: 0.50
    assert (memory["train"], memory["test"], memory["test/train"]) == ("0.40", "0.30", "0.75")
    assert fetch["test/train"] == "- (train 0)"


def test_older_runs_read_as_mission_aware_and_stay_apart_from_image_only_runs():
    """A run logged before core.mission existed saw the mission: compare reads it so (param_defaults),
    beside a paper run (image and direction) it differs, beside a mission-aware run it pools."""
    from recurbench.records import RunRecord, settings_diff

    definition, paper = load_profile("minigrid", "paper")
    defaults = definition.param_defaults()
    assert defaults["core_settings.mission"] == "True"
    (plan,) = definition.plan(paper, {"envs": ["DoorKey"], "models": ["lstm"]}, data_dir=None)
    logged = logged_settings(plan.params)
    older = {k: v for k, v in logged.items() if k != "core_settings.mission"}

    def record(params):
        return RunRecord("id", "run", "FINISHED", 0, {}, params, {}, None)

    assert settings_diff(record(older), record(logged), defaults) == "core_settings.mission True (newest: False)"
    assert settings_diff(record(older), record({**logged, "core_settings.mission": "True"}), defaults) == ""


def test_bench_rl_json_reports_fps_peer_and_ratio(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    result = CliRunner().invoke(app, ["bench", "rl", "--cores", "lstm", "--total-steps", "64", "--n-envs", "2",
                                      "--n-steps", "32", "--batch-size", "32", "--n-epochs", "1", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    assert out["fps"]["lstm"] > 0 and out["fps_sb3_contrib"] > 0
    assert out["ratio"]["lstm"] == pytest.approx(out["fps"]["lstm"] / out["fps_sb3_contrib"])
    assert out["ratio_cpu"]["lstm"] == pytest.approx(out["fps_cpu"]["lstm"] / out["fps_sb3_contrib_cpu"])
    assert list(tmp_path.glob("SB3-*")) == []  # SB3's default logger's empty folder, per learn()


def test_a_core_that_cannot_drive_an_agent_is_refused_at_plan_time():
    definition, quick = load_profile("minigrid", "quick")
    with pytest.raises(ConfigError, match="--models: memory core 'sab' cannot drive an agent: its memory grows"):
        definition.plan(quick, {"models": ["sab"]}, data_dir=None)
