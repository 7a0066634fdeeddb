"""The minigrid suite: profile validation with paths, planning, and one tiny run end to end."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from recurbench.cli import app
from recurbench.errors import ConfigError
from recurbench.suites import load_profile, run_suite
from recurbench.suites.minigrid import paper_table
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


def test_a_tiny_run_logs_curve_rewards_ratio_and_tags(tmp_path):
    tracker = MemoryTracker()
    result = run_suite("minigrid", "tiny", tracker, config_path=_write(tmp_path, TINY))
    assert not result.failed, [o.error for o in result.failed]
    # The headline metrics, which a run reused by --skip-finished must have, are what execute returns.
    from recurbench.suites.minigrid import MinigridSuite

    assert set(result.outcomes[0].metrics) == set(MinigridSuite.headline_metrics)
    (run,) = [r for r in tracker.runs if r.parent_id is not None]
    assert run.tags["agent"] == "rellstm" and run.tags["env"] == "GoToDoor"
    steps = [s for s, _ in run.metrics["rollout_reward"]]
    assert steps == sorted(steps) and steps[-1] == 256  # step = environment steps
    train, test = run.last("train_reward"), run.last("test_reward")
    assert 0 <= train <= 1 and 0 <= test <= 1
    ratio = run.last("generalisation_ratio")
    assert math.isnan(ratio) if train == 0 else ratio == pytest.approx(test / train)
    assert "learning_curve.json" in run.artifacts


def test_summary_puts_the_papers_figures_next_to_ours():
    assert paper_table()[("MiniGrid-DoorKey-5x5-v0", "rellstm")] == {"train": 0.93, "test": 0.44}
    from recurbench.suites.minigrid import MinigridSuite
    from recurbench.suites.runner import RunOutcome, RunPlan

    plan = RunPlan("DoorKey-rellstm-s0", 0, {"agent": "rellstm", "env": "DoorKey"}, {})
    outcome = RunOutcome(plan, "FINISHED", {"train_reward": 0.9, "test_reward": 0.3, "generalisation_ratio": 1 / 3})
    header, rows = MinigridSuite().summary_rows([outcome])
    row = dict(zip(header, rows[0], strict=True))
    assert row["paper train"] == "0.93" and row["paper test"] == "0.44" and row["test"] == "0.30"


def test_bench_rl_json_reports_fps_peer_and_ratio():
    result = CliRunner().invoke(app, ["bench", "rl", "--cores", "lstm", "--total-steps", "64", "--n-envs", "2",
                                      "--n-steps", "32", "--batch-size", "32", "--n-epochs", "1", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    assert out["fps"]["lstm"] > 0 and out["fps_sb3_contrib"] > 0
    assert out["ratio"]["lstm"] == pytest.approx(out["fps"]["lstm"] / out["fps_sb3_contrib"])
    assert out["ratio_cpu"]["lstm"] == pytest.approx(out["fps_cpu"]["lstm"] / out["fps_sb3_contrib_cpu"])
