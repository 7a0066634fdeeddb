"""The memory-task throughput benchmark: one row per core, T and path, with consistent rates."""

from __future__ import annotations

import pytest

from recurbench.bench.memory import bench_memory


def test_rows_per_core_length_and_path():
    rows = bench_memory(("lstm", "memlstm"), (5,), updates=1, compile_core=False, paths=("fast",))
    assert [(r["core"], r["T"], r["path"]) for r in rows] == [("lstm", 5, "fast"), ("memlstm", 5, "fast")]
    for r in rows:  # steps per second = updates per second x L (L = T + 20 for copy)
        assert r["device"] == "cpu"
        assert r["steps_per_cpu_s"] == pytest.approx(r["updates_per_cpu_s"] * 25)
        assert r["steps_per_s"] == pytest.approx(r["updates_per_s"] * 25)


def test_an_unknown_path_is_named():
    with pytest.raises(ValueError, match="unknown path"):
        bench_memory(("lstm",), (5,), paths=("fused",))


def test_the_bench_command_times_each_core_and_path():
    import json

    from typer.testing import CliRunner

    from recurbench.cli import app

    result = CliRunner().invoke(app, ["bench", "memory", "--cores", "relrnn,sab", "--lengths", "5", "--updates", "1",
                                      "--paths", "fast,step", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [(r["core"], r["path"]) for r in rows] == [("relrnn", "fast"), ("relrnn", "step"), ("sab", "fast"),
                                                      ("sab", "step")]
    assert all(r["steps_per_cpu_s"] > 0 for r in rows)


def test_the_bench_command_names_a_bad_path():
    from typer.testing import CliRunner

    from recurbench.cli import app

    result = CliRunner().invoke(app, ["bench", "memory", "--paths", "fused"])
    assert result.exit_code == 1
    assert str(result.exception) == "--paths.0: unknown path 'fused'; known: fast, step, compiled, history"


def test_the_bench_command_names_a_device_this_machine_lacks(monkeypatch):
    # Before anything is built or timed: one line naming --device.
    import torch
    from typer.testing import CliRunner

    from recurbench.bench import memory
    from recurbench.cli import app

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(memory, "build_model", lambda *a, **k: pytest.fail("a model was built"))
    result = CliRunner().invoke(app, ["bench", "memory", "--cores", "lstm", "--lengths", "5", "--device", "cuda:1"])
    assert result.exit_code == 1
    assert str(result.exception).startswith("--device: 'cuda:1' asks for a GPU")
