"""Plugins: the example package installed for real (pip, offline, into a folder put on the path), listed
with its package, run through a quick suite and checked by the kit; and the bad cases: a plugin that
fails to import, a name that clashes, a ``module:Class`` that cannot be had. Packages declared for the
bad cases are bare ``.dist-info`` folders (metadata and entry points only), which is all
``importlib.metadata`` reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recurbench.agents.cores import CORES, LSTMCore, make_core
from recurbench.cli import app
from recurbench.errors import ConfigError
from recurbench.forecasters.models import ARCHITECTURES
from recurbench.langs.models import LANG_MODELS
from recurbench.suites.registry import SUITES
from recurbench.testing import check_plugin

EXAMPLE = Path(__file__).parents[1] / "examples" / "gru_plugin"
REGISTRIES = (CORES, ARCHITECTURES, LANG_MODELS, SUITES)
runner = CliRunner()


@pytest.fixture
def fresh_registries():
    """Every registry reads its entry points again on next use, and again after the test."""
    for registry in REGISTRIES:
        registry.reload()
    yield
    for registry in REGISTRIES:
        registry.reload()


@pytest.fixture(scope="module")
def example_site(tmp_path_factory) -> Path:
    """The example plugin installed by pip from a copy of its folder (the build writes beside its
    sources), without dependencies or the network, into a folder of its own."""
    root = tmp_path_factory.mktemp("example")
    source, site = root / "gru_plugin", root / "site"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(source)], check=True, capture_output=True)
    return site


@pytest.fixture
def example(example_site, monkeypatch, fresh_registries) -> Path:
    monkeypatch.syspath_prepend(str(example_site))
    return example_site


def _dist_info(root: Path, package: str, entry_points: str) -> None:
    """A package as importlib.metadata sees it: METADATA and entry_points.txt in a .dist-info folder."""
    info = root / f"{package.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


def test_the_installed_example_is_listed_with_its_package(example):
    items = json.loads(runner.invoke(app, ["list", "models", "--json"]).output)
    gru = {i["kind"]: i["package"] for i in items if i["name"] == "gru"}
    assert gru == {"forecaster": "recurbench-gru-example", "memory core": "recurbench-gru-example",
                   "language model": "recurbench-gru-example"}
    assert {i["package"] for i in items if i["name"] == "lstm"} == {"recurbench"}


def test_the_installed_example_passes_the_kit(example):
    results = check_plugin("gru")
    assert set(results) == {"memory core", "forecaster", "language model"}
    assert "episode_start_resets" in results["memory core"]


def test_the_installed_example_runs_through_a_quick_suite(example, tmp_path):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = runner.invoke(app, ["run", "memory", "--profile", "quick", "--models", "gru", "--tasks", "copy",
                                 "--tracking-uri", store])
    assert result.exit_code == 0, result.output
    assert "copy-T10-gru" in result.output
    listed = runner.invoke(app, ["compare", "memory", "--tracking-uri", store, "--format", "csv"])
    assert listed.exit_code == 0, listed.output
    assert ",gru," in listed.output  # compare shows the plugin core beside the built-ins


def test_a_fresh_process_loads_the_plugins_by_itself(example_site):
    """What a Ray worker does: it unpickles a plan naming ``gru`` and builds it, with nothing loaded
    beforehand (the registries read the entry points on first use)."""
    code = ("from recurbench.agents.cores import make_core; from recurbench.forecasters.models import ARCHITECTURES; "
            "print(type(make_core('gru', 3, 4)).__name__, ARCHITECTURES.source('gru').package)")
    env = {**os.environ, "PYTHONPATH": str(example_site)}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["GRUCore", "recurbench-gru-example"]


def test_a_plugin_that_fails_to_import_is_left_out_in_one_line(tmp_path, monkeypatch, fresh_registries, capsys):
    _dist_info(tmp_path, "recurbench-broken", "[recurbench.cores]\nbroken = recurbench_no_such_module:Core\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "broken" not in CORES
    assert list(CORES)[:3] == ["lstm", "memlstm", "rellstm"]
    assert isinstance(make_core("lstm", 3, 4), LSTMCore)  # everything else still works
    line = ("recurbench: memory core plugin 'broken' (entry point broken = recurbench_no_such_module:Core in group "
            "recurbench.cores, package 'recurbench-broken') left out: failed to load: ModuleNotFoundError: No module "
            "named 'recurbench_no_such_module'")
    assert capsys.readouterr().err == line + "\n"
    listed = runner.invoke(app, ["list", "models"], terminal_width=400)
    assert listed.exit_code == 0
    assert line in listed.output and "rellstm" in listed.output


def test_a_plugin_named_as_a_built_in_is_refused_naming_both(tmp_path, monkeypatch, fresh_registries):
    _dist_info(tmp_path, "recurbench-shadow", "[recurbench.cores]\nlstm = recurbench_gru:GRUCore\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert CORES["lstm"].build is not None and CORES.source("lstm").package == "recurbench"
    assert CORES.problems == [
        "recurbench: memory core plugin 'lstm' (entry point lstm = recurbench_gru:GRUCore in group recurbench.cores, "
        "package 'recurbench-shadow') left out: name 'lstm' clashes with the built-in memory core 'lstm' (recurbench)"
    ]


def test_two_plugins_of_one_name_are_both_refused_naming_both(tmp_path, monkeypatch, fresh_registries):
    _dist_info(tmp_path / "a", "pkg-a", "[recurbench.forecasters]\ntwin = pkg_a:Net\n")
    _dist_info(tmp_path / "b", "pkg-b", "[recurbench.forecasters]\ntwin = pkg_b:Net\n")
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    assert "twin" not in ARCHITECTURES
    assert len(ARCHITECTURES.problems) == 2
    for problem in ARCHITECTURES.problems:
        assert problem.endswith("left out: name 'twin' is also declared by another plugin: pkg_b:Net of package "
                                "'pkg-b' and pkg_a:Net of package 'pkg-a'")


QUICK_CORE = '''
import torch
from torch import nn
from recurbench.agents.cores import MemoryCore


class TinyGRU(MemoryCore):
    """A GRU from a file beside the command."""

    def __init__(self, input_size, hidden_size, *, nu=1):
        super().__init__(input_size, hidden_size)
        self.nu = nu
        self.gru = nn.GRUCell(input_size, hidden_size)

    def initial_state(self, batch, device="cpu"):
        return (torch.zeros(batch, self.hidden_size, device=device),)

    def cell(self, x, state):
        h = self.gru(x, state[0])
        return h, (h,)
'''


def test_the_quick_path_builds_a_class_from_the_working_directory_with_the_settings_it_names(
        tmp_path, monkeypatch, fresh_registries):
    (tmp_path / "my_cores_for_the_quick_path.py").write_text(QUICK_CORE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    core = make_core("my_cores_for_the_quick_path:TinyGRU", 3, 4, nu=7, rho=2, attention_size=8)
    assert type(core).__name__ == "TinyGRU" and core.nu == 7  # rho and attention_size: not its settings
    assert "my_cores_for_the_quick_path:TinyGRU" not in list(CORES)  # usable, but not listed
    assert CORES.source("my_cores_for_the_quick_path:TinyGRU").package == "module path"
    assert str(tmp_path) in sys.path and str(tmp_path) in os.environ["PYTHONPATH"]  # for Ray workers


def test_a_quick_path_that_cannot_be_imported_is_one_line(fresh_registries):
    with pytest.raises(ConfigError) as info:
        make_core("recurbench_no_such_module:Core", 3, 4)
    assert str(info.value) == ("memory core 'recurbench_no_such_module:Core': importing 'recurbench_no_such_module' "
                               "failed: ModuleNotFoundError: No module named 'recurbench_no_such_module'")
    with pytest.raises(ConfigError, match=r"^forecaster 'recurbench.plugins:GROUPS': .* is neither an nn.Module"):
        ARCHITECTURES["recurbench.plugins:GROUPS"]


TOY_SUITE = '''
from pathlib import Path

from recurbench.config import StrictModel
from recurbench.suites.base import RunPlan, SuiteDefinition


class CountingProfile(StrictModel):
    models: list[str]


class CountingSuite(SuiteDefinition):
    """A suite from a plugin: each model scores its name's length."""

    name = "counting"
    profile_model = CountingProfile
    headline_metrics = ("score",)

    def suite_path(self):
        return Path(__file__).with_name("counting.yaml")

    def plan(self, profile, selection, *, data_dir):
        return [RunPlan(f"{m}-s0", 0, {"model": m}, {"model": m}, payload=m) for m in profile.models]

    def execute(self, plan, run, progress, *, data_dir, device):
        run.log_metrics({"score": float(len(plan.payload))})
        return {"score": float(len(plan.payload))}
'''


def test_a_whole_suite_from_a_plugin_is_listed_and_runs(tmp_path, monkeypatch, fresh_registries):
    (tmp_path / "recurbench_counting.py").write_text(TOY_SUITE)
    (tmp_path / "counting.yaml").write_text("suite: counting\ndescription: counts\nprofiles:\n"
                                            "  quick: {models: [ab, abc]}\n")
    _dist_info(tmp_path, "recurbench-counting", "[recurbench.suites]\ncounting = recurbench_counting:CountingSuite\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    suites = json.loads(runner.invoke(app, ["list", "suites", "--json"]).output)
    assert suites["counting"] == {"description": "counts", "profiles": ["quick"], "package": "recurbench-counting"}
    result = runner.invoke(app, ["run", "counting", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    assert result.exit_code == 0, result.output
    assert "abc-s0" in result.output and "3.0000" in result.output


def test_an_entry_set_in_process_is_undone_by_monkeypatch(monkeypatch, fresh_registries):
    with monkeypatch.context() as m:
        m.setitem(CORES, "lstm", CORES["rellstm"])
        m.setitem(CORES, "extra", CORES["lstm"])
        assert CORES.source("lstm").package == "in-process" and "extra" in CORES
    assert CORES.source("lstm").package == "recurbench" and "extra" not in CORES
    assert isinstance(make_core("lstm", 3, 4), LSTMCore)
