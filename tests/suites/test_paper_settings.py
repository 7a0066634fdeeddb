"""Runs at other settings than the paper's say so wherever they stand beside its figures: the closing
table of ``run`` (each suite's ``summary_rows``), built here from the suites' own plans."""

from __future__ import annotations

import math

from recurbench.suites.base import RunOutcome
from recurbench.suites.minigrid import MinigridSuite
from recurbench.suites.paper_settings import not_comparable, paper_differences
from recurbench.suites.registry import load_profile


def _outcomes(suite: str, profile: str, selection: dict, metrics: dict[str, dict[str, float]], data_dir=None):
    definition, cfg = load_profile(suite, profile)
    plans = definition.plan(cfg, selection, data_dir=None if data_dir is None else str(data_dir))
    return definition, [RunOutcome(p, "FINISHED", metrics[p.tags.get("model", p.tags.get("agent"))]) for p in plans]


def test_a_paper_profile_plan_is_at_the_papers_settings_and_a_quick_one_is_not():
    definition, paper = load_profile("minigrid", "paper")
    plans = definition.plan(paper, {"envs": ["DoorKey"], "models": ["rellstm"]}, data_dir=None)
    from recurbench.records import logged_settings

    runs = [(p.tags, logged_settings(p.params)) for p in plans]
    assert paper_differences(MinigridSuite(), runs) == [] and not_comparable([], "paper") is None
    # The same configuration with a --set is not the paper's setting, whatever the profile is called.
    _, probe = load_profile("minigrid", "paper", overrides=["ppo.learning_rate=0.01"])
    (plan,) = definition.plan(probe, {"envs": ["DoorKey"], "models": ["rellstm"]}, data_dir=None)
    assert paper_differences(MinigridSuite(), [(plan.tags, logged_settings(plan.params))]) == [
        "ppo.learning_rate 0.01 (paper 0.001)"
    ]
    # A pair the paper profile does not run is named as such.
    other = [({"env": "MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0", "agent": "lstm"}, {})]
    assert paper_differences(MinigridSuite(), other) == [
        "1 configuration(s) the paper profile does not run: MiniGrid-MemoryS7-v0:MiniGrid-MemoryS9-v0/lstm"
    ]


def test_minigrid_summary_says_a_quick_run_is_not_comparable_with_table4():
    rewards = {"rellstm": {"train_reward": 0.9, "test_reward": 0.3, "generalisation_ratio": 1 / 3}}
    definition, outcomes = _outcomes("minigrid", "quick", {"envs": ["DoorKey"], "models": ["rellstm"]}, rewards)
    header, rows = definition.summary_rows(outcomes)
    note = " ".join(rows[-1][0].split())
    assert note.startswith("† Kerg et al.'s Table 4 came from agents that saw image and direction only")
    assert ("Ours are not comparable with the paper's figures: settings other than the paper's: eval_episodes 8 "
            "(paper 100); total_timesteps 4096 (paper 5000000);") in note
    definition, outcomes = _outcomes("minigrid", "paper", {"envs": ["DoorKey"], "models": ["rellstm"]}, rewards)
    _, rows = definition.summary_rows(outcomes)
    assert "not comparable" not in rows[-1][0] and rows[-1][0].startswith("† Kerg")


def test_ltsf_summary_leaves_the_papers_change_out_at_other_settings(data_dir):
    metrics = {"informer": {"test_mse": 0.8, "test_mae": 0.6, "seconds_per_epoch": 1.0},
               "rsa_informer": {"test_mse": 0.6, "test_mae": 0.5, "seconds_per_epoch": 1.0}}
    selection = {"datasets": ["ETTh1"], "horizons": [24], "models": ["informer", "rsa_informer"]}
    definition, outcomes = _outcomes("ltsf", "paper", selection, metrics, data_dir)
    header, rows = definition.summary_rows(outcomes)
    # At the paper's settings: its change against the baseline in brackets (0.414 / 0.762), no caveat.
    assert header[9] == "MSE vs baseline (paper)" and rows[1][9] == "-25.0 % (-45.7 %)" and len(rows) == 3
    # A closing row says what the baseline is (no caveat at the paper's settings).
    assert rows[2][0].startswith("MSE vs baseline: an RSA model's mean test MSE against its baseline's")
    assert rows[2][0].endswith("; in brackets, the paper's") and rows[2][1:] == [""] * (len(header) - 1)
    definition, outcomes = _outcomes("ltsf", "quick", selection, metrics, data_dir)
    header, rows = definition.summary_rows(outcomes)
    assert header[9] == "MSE vs baseline" and rows[1][9] == "-25.0 %"
    assert rows[1][6] == "0.414 ± 0.014"  # the paper's figures stay, with a closing row saying why they differ
    note = " ".join(rows[-1][0].split())
    assert note.startswith("paper MSE/MAE: not comparable with the paper's figures: settings other than the paper's: ")
    assert "training.epochs 2 (paper 6)" in note and rows[-1][1:] == [""] * (len(header) - 1)
    # A setting the paper leaves unset says so in words, not "(paper None)".
    assert "training.max_train_batches 40 (paper: unset)" in note and "None" not in note


def test_langs_and_memory_summaries_close_with_the_caveat_only_beside_paper_figures():
    from recurbench.suites.base import RunPlan

    acc = {"bin0_acc": 0.9, "bin1_acc": 0.3, "bin0_acc_best": 0.9, "bin1_acc_best": 0.3}
    definition, outcomes = _outcomes("langs", "quick", {"languages": ["tomita5"], "models": ["rsa_ii"]}, {"rsa_ii": acc})
    header, rows = definition.summary_rows(outcomes)
    assert rows[0][header.index("paper bin 0")] == "0.82"
    assert " ".join(rows[-1][0].split()).startswith("paper bin 0/1: not comparable with the paper's figures:")
    # Nothing of the paper's in the table: nothing to qualify.
    lstm = RunPlan("lstm-parity-s0", 0, {"language": "parity", "model": "lstm"}, {})
    _, rows = definition.summary_rows([RunOutcome(lstm, "FINISHED", acc)])
    assert len(rows) == 1 and not math.isnan(float(rows[0][3]))
    copy = {"accuracy": 0.2, "train_accuracy": 0.2, "grad_first_init": 1e-9, "grad_first_final": 1e-7}
    selection = {"tasks": ["copy"], "lengths": [500], "models": ["lstm"]}
    definition, outcomes = _outcomes("memory", "quick", selection, {"lstm": copy})
    header, rows = definition.summary_rows(outcomes)
    assert rows[0][header.index("paper (Table 5)")] == "0.12"
    assert " ".join(rows[-1][0].split()).startswith("paper (Table 5): not comparable with the paper's figures:")


def test_a_plugin_models_configuration_is_outside_the_paper_not_at_its_class_defaults(monkeypatch):
    """The paper ran no plugin's model: its own settings are not the paper's (they read "(paper 1)",
    the class's default, before)."""
    import torch

    from recurbench.agents.cores import CORES, MemoryCore, _plugin_core
    from recurbench.records import logged_settings

    class Widened(MemoryCore):
        """An LSTM cell whose state is ``width`` times wider than its output."""

        def __init__(self, input_size, hidden_size, *, width: int = 1):
            super().__init__(input_size, hidden_size)
            self.cell_ = torch.nn.LSTMCell(input_size, hidden_size * width)
            self.out = torch.nn.Linear(hidden_size * width, hidden_size)

    monkeypatch.setitem(CORES, "widened", _plugin_core(Widened, "widened"))
    definition, paper = load_profile("minigrid", "paper", overrides=["plugin_settings.widened.width=2"])
    (plan,) = definition.plan(paper, {"envs": ["DoorKey"], "models": ["widened"]}, data_dir=None)
    assert plan.params["plugin_settings"] == {"width": 2}
    differences = paper_differences(MinigridSuite(), [(plan.tags, logged_settings(plan.params))])
    assert differences == [f"1 configuration(s) the paper profile does not run: {plan.tags['env']}/widened"]
