"""bench rl's table: rates per core beside sb3-contrib's RecurrentPPO, the ratios as ×, within 80 columns;
the raw fields only under --json."""

import json

from bench_tables import body, header, legend, rendered
from typer.testing import CliRunner

from recurbench.bench import rl
from recurbench.cli import app
from recurbench.cli.bench import rl_table

SETTINGS = {"env_id": "MiniGrid-DoorKey-5x5-v0", "n_envs": 8, "n_steps": 128, "batch_size": 256, "n_epochs": 4,
            "total_steps": 16384, "hidden_size": 64, "threads": 1, "seed": 0, "test_env_id": "MiniGrid-DoorKey-16x16-v0"}
RESULT = {
    "fps": {"lstm": 1234.5678, "memlstm": 456.789}, "fps_cpu": {"lstm": 1300.2, "memlstm": 470.1},
    "settings": SETTINGS, "device": "cpu", "torch_threads": 1, "fps_sb3_contrib": 360.0, "fps_sb3_contrib_cpu": 380.0,
    "ratio": {"lstm": 3.4293550, "memlstm": 1.2688583}, "ratio_cpu": {"lstm": 3.4215789, "memlstm": 1.2371053},
}
HEADER = ["agent", "steps/s", "vs sb3-contrib", "steps/CPU-s", "vs sb3-contrib (CPU)"]


def test_ratios_print_as_times_within_80_columns():
    text = rendered(rl_table(RESULT))
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text
    assert text.splitlines()[0].strip() == "PPO training steps/s on MiniGrid-DoorKey-5x5-v0 (8 envs x 128 steps)"
    assert header(text, 5) == HEADER
    assert body(text, 5) == [
        ["lstm", "1235", "3.43×", "1300", "3.42×"],
        ["memlstm", "457", "1.27×", "470", "1.24×"],
        ["sb3-contrib", "360", "1×", "380", "1×"],
    ]
    words = legend(text)
    assert "(4 epochs of batch 256, LSTM width 64), 16,384 timed per agent after a warm-up rollout" in words
    assert "sb3-contrib: its RecurrentPPO, LSTM policy, same settings" in words
    assert "not timed" not in words and "fps_cpu" not in text


def test_without_the_peer_its_columns_say_not_timed():
    alone = {k: v for k, v in RESULT.items() if k not in ("fps_sb3_contrib", "fps_sb3_contrib_cpu", "ratio", "ratio_cpu")}
    text = rendered(rl_table(alone))
    assert body(text, 5) == [["lstm", "1235", "-", "1300", "-"], ["memlstm", "457", "-", "470", "-"]]
    assert legend(text).endswith("- : sb3-contrib not timed (--no-sb3-contrib).")


def test_the_command_prints_the_table_and_json_the_raw_fields(monkeypatch):
    monkeypatch.setattr(rl, "bench_rl", lambda *a, **kw: json.loads(json.dumps(RESULT)))
    args = ["bench", "rl", "--cores", "lstm,memlstm", "--total-steps", "64"]
    table = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    assert body(table.output, 5)[0] == ["lstm", "1235", "3.43×", "1300", "3.42×"]
    assert "x" not in "".join(cell for row in body(table.output, 5) for cell in row[1:])
    raw = CliRunner().invoke(app, [*args, "--json"])
    assert raw.exit_code == 0, raw.output
    assert json.loads(raw.output) == RESULT
