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


def test_a_path_a_core_lacks_is_named_not_run_as_another():
    from recurbench.memory.models import SequenceModelConfig, build_model
    from recurbench.memory.tasks import make_task

    task = make_task("copy", 5)
    model = {core: build_model(task, SequenceModelConfig(core)) for core in ("lstm", "sab", "memlstm", "memrnn")}
    # SAB's memory grows every memory_stride steps: a compiled cell would recompile at every step.
    assert model["sab"].missing_path("compiled") == ("its state changes shape from step to step, so torch.compile "
                                                      "would compile its cell again at every step")
    assert model["lstm"].missing_path("compiled") is None
    # Only MemLSTM and MemRNN keep the whole sequence in memory: forward(path="history") steps the others.
    assert model["lstm"].missing_path("history") == model["sab"].missing_path("history") == (
        "only an attentive core whose memory keeps the whole sequence (memlstm, memrnn) has an append-only history")
    assert model["memlstm"].missing_path("history") is None and model["memrnn"].missing_path("history") is None


def test_sab_compiled_is_not_timed_and_never_compiled(monkeypatch):
    import torch

    from recurbench.bench import memory

    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("torch.compile was called"))
    rows = memory.bench_memory(("sab",), (5,), updates=1, paths=("step", "compiled"))
    assert [(r["path"], r["skipped"]) for r in rows] == [
        ("step", None),
        ("compiled", "its state changes shape from step to step, so torch.compile would compile its cell again at "
                     "every step"),
    ]
    assert rows[0]["steps_per_cpu_s"] > 0 and rows[1]["steps_per_cpu_s"] is None and rows[1]["steps_per_s"] is None


def test_the_bench_command_refuses_a_path_no_chosen_core_has_before_anything_runs(monkeypatch):
    from typer.testing import CliRunner

    from recurbench.bench import memory
    from recurbench.cli import app

    monkeypatch.setattr(memory, "_timed_updates", lambda *a, **k: pytest.fail("something was timed"))
    result = CliRunner().invoke(app, ["bench", "memory", "--cores", "lstm", "--lengths", "5", "--paths", "history"])
    assert result.exit_code == 1
    assert str(result.exception) == ("nothing to time: lstm has no history path: only an attentive core whose memory "
                                     "keeps the whole sequence (memlstm, memrnn) has an append-only history")
    result = CliRunner().invoke(app, ["bench", "memory", "--cores", "lstm,rnn", "--lengths", "5,6", "--paths", "history"])
    assert str(result.exception).startswith("nothing to time: lstm, rnn have no history path: only an attentive core")


def test_the_bench_table_marks_a_path_not_timed_and_says_why():
    from typer.testing import CliRunner

    from recurbench.cli import app

    result = CliRunner().invoke(app, ["bench", "memory", "--cores", "sab", "--lengths", "5", "--updates", "1",
                                      "--paths", "step,compiled"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80 and "dynamo" not in result.output
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if line.count("│") == 7]
    assert [row[:3] for row in rows] == [["sab", "5", "step"], ["sab", "5", "compiled"]]
    assert rows[0][5] == "-" and rows[1][3:] == ["-", "-", "-"]  # no compiled rate to compare the step loop with
    assert ("- : not timed: sab has no compiled path: its state changes shape from step to step, so torch.compile "
            "would compile its cell again at every step.") in " ".join(result.output.split())


def test_the_table_gives_rates_and_ratios_as_times_within_80_columns():
    from bench_tables import body, header, legend, rendered

    from recurbench.cli.bench import memory_table

    why = "its state changes shape from step to step, so torch.compile would compile its cell again at every step"
    row = lambda core, path, cpu, wall, skipped=None: {  # noqa: E731
        "core": core, "T": 500, "path": path, "steps_per_cpu_s": cpu, "steps_per_s": wall, "skipped": skipped,
        "device": "cpu"}
    rows = [row("lstm", "fast", 12345.67, 23456.7), row("lstm", "compiled", 6172.8, 7000.2),
            row("sab", "fast", 1234.4, 1300.0), row("sab", "compiled", None, None, why)]
    text = rendered(memory_table(rows, "compiled", 1))
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text
    assert text.splitlines()[0].strip() == "memory-task training, copy, batch 10, width 128 (1 thread, cpu)"
    assert header(text, 6) == ["core", "T", "path", "steps/CPU-s", "steps/s (wall)", "vs compiled (CPU)"]
    assert body(text, 6) == [["lstm", "500", "fast", "12346", "23457", "2×"],
                             ["lstm", "500", "compiled", "6173", "7000", "1×"],
                             ["sab", "500", "fast", "1234", "1300", "-"],
                             ["sab", "500", "compiled", "-", "-", "-"]]
    assert legend(text) == f"- : not timed: sab has no compiled path: {why}."
