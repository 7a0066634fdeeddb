"""Plugins: the example package installed for real (pip, offline, into a folder put on the path), listed
with its package, run through a quick suite and checked by the kit; and the bad cases: a plugin that
fails to import, a name that clashes, a ``module:Class`` that cannot be had. Packages declared for the
bad cases are bare ``.dist-info`` folders (metadata and entry points only), which is all
``importlib.metadata`` reads."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from recurbench import engine, plugins
from recurbench.agents.cores import CORES, LSTMCore, make_core
from recurbench.cli import app
from recurbench.engine import _in_task
from recurbench.errors import ConfigError
from recurbench.forecasters.models import ARCHITECTURES
from recurbench.langs.models import LANG_MODELS
from recurbench.plugins import SettingError, left_out_lines
from recurbench.suites.registry import SUITES
from recurbench.testing import check_forecaster, check_language_model, check_plugin

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
    # --json lists it too, with why (a script reading stdout alone saw nothing missing)
    items = json.loads(runner.invoke(app, ["list", "models", "--json"]).output)
    assert [i for i in items if i["left_out"] is not None] == [
        {"name": "broken", "kind": "memory core", "suites": "", "package": "recurbench-broken", "description": "",
         "left_out": "failed to load: ModuleNotFoundError: No module named 'recurbench_no_such_module'"}]
    assert {i["left_out"] for i in items if i["name"] == "lstm"} == {None}


def test_a_ray_task_does_not_print_again_the_lines_its_driver_printed(tmp_path, monkeypatch, fresh_registries,
                                                                      capsys):
    """Every Ray task is a fresh worker that loads the plugins again; its lines reached the driver's
    stderr once per task. A task is told what the driver printed (``_in_task``'s ``said``)."""
    _dist_info(tmp_path, "recurbench-broken", "[recurbench.cores]\nbroken = recurbench_no_such_module:Core\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "broken" not in CORES  # the driver loads the group: one line
    said = left_out_lines()
    assert capsys.readouterr().err.count(" left out: ") == 1
    threads = torch.get_num_threads()
    monkeypatch.setattr(engine, "tune_allocator", lambda: False)  # a worker's allocator, not this process's

    def in_a_fresh_worker(told: list[str]) -> str | None:
        CORES.reload()
        monkeypatch.setattr(plugins, "_SAID_BY_DRIVER", set())  # a worker's process starts with nothing told
        try:
            return _in_task(lambda: CORES.left_out("broken"), (), threads, False, told)
        finally:
            torch.set_num_threads(threads)

    # Silent, yet the name still says why it is unknown.
    assert in_a_fresh_worker(said).startswith("package 'recurbench-broken': failed to load: ModuleNotFoundError")
    assert capsys.readouterr().err == ""
    # A line the driver did not print (a worker machine whose plugin fails otherwise) is printed.
    assert in_a_fresh_worker([]) is not None
    assert capsys.readouterr().err.count(" left out: ") == 1


def test_a_name_whose_plugin_was_left_out_says_why_not_just_unknown(tmp_path, monkeypatch, fresh_registries):
    _dist_info(tmp_path, "recurbench-broken", "[recurbench.cores]\nbroken = recurbench_no_such_module:Core\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    why = ("(a plugin of that name is installed but was left out: package 'recurbench-broken': failed to load: "
           "ModuleNotFoundError: No module named 'recurbench_no_such_module')")
    result = runner.invoke(app, ["run", "memory", "--models", "broken", "--dry-run"], terminal_width=400)
    message = str(result.exception)
    assert isinstance(result.exception, ConfigError)
    assert message.startswith("--models.0: unknown memory core 'broken'; known: lstm,") and message.endswith(why)
    with pytest.raises(ConfigError, match=re.escape(why)):
        _plan("memory", ["models=[broken]"], {"tasks": ["copy"]})
    # A name no plugin declares is unknown, and nothing more.
    assert CORES.left_out("nothing") is None


def test_a_class_of_another_kind_is_refused_in_a_group(tmp_path, monkeypatch, fresh_registries):
    # A memory core is an nn.Module too: as a forecaster it passed until its first run.
    _dist_info(tmp_path, "recurbench-mixed", "[recurbench.forecasters]\ncorefc = recurbench.agents.cores:LSTMCore\n"
               "[recurbench.langs]\ncorelm = recurbench.agents.cores:LSTMCore\n"
               "[recurbench.cores]\nlmcore = recurbench.langs.models:LSTMRecognizer\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "corefc" not in ARCHITECTURES and "corelm" not in LANG_MODELS and "lmcore" not in CORES
    assert ARCHITECTURES.problems == [
        "recurbench: forecaster plugin 'corefc' (entry point corefc = recurbench.agents.cores:LSTMCore in group "
        "recurbench.forecasters, package 'recurbench-mixed') left out: failed to load: TypeError: "
        "recurbench.agents.cores.LSTMCore is a memory core (a MemoryCore subclass), not a forecaster: declare it in "
        "group recurbench.cores"]
    assert "is a memory core (a MemoryCore subclass), not a language model" in LANG_MODELS.problems[0]
    assert "is neither a MemoryCore subclass nor a CoreSpec" in CORES.problems[0]
    with pytest.raises(ConfigError, match=r"^forecaster 'recurbench.langs.models:LSTMRecognizer': .* is a language "
                                          r"model \(a Recognizer subclass\), not a forecaster"):
        ARCHITECTURES["recurbench.langs.models:LSTMRecognizer"]


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


# -- a plugin's own settings (plugin_settings) --------------------------------------------------------

SETTINGS_FORECASTER = '''
import torch
from torch import nn


class TinyGRU(nn.Module):
    """A GRU forecaster of its own width and depth."""

    def __init__(self, cfg, *, width: int = 16, layers: int = 1):
        super().__init__()
        self.cfg = cfg
        self.gru = nn.GRU(cfg.n_features + cfg.n_marks, width, num_layers=layers, batch_first=True)
        self.head = nn.Linear(width, cfg.pred_len * cfg.n_features)

    def forward(self, x, x_mark, y_mark):
        h, _ = self.gru(torch.cat([x, x_mark], dim=-1))
        return x[:, -1:, :] + self.head(h[:, -1]).view(x.shape[0], self.cfg.pred_len, self.cfg.n_features)
'''

SETTINGS_CORE = '''
import torch
from torch import nn
from recurbench.agents.cores import MemoryCore


class StackedGRU(MemoryCore):
    """GRU cells stacked ``layers`` deep; the state is one ``h`` per layer."""

    def __init__(self, input_size, hidden_size, *, layers: int = 1, nu: int = 0):
        super().__init__(input_size, hidden_size)
        self.layers, self.nu = layers, nu
        self.cells = nn.ModuleList(nn.GRUCell(input_size if i == 0 else hidden_size, hidden_size)
                                   for i in range(layers))

    def initial_state(self, batch, device="cpu"):
        return tuple(torch.zeros(batch, self.hidden_size, device=device) for _ in self.cells)

    def cell(self, x, state):
        out = []
        for cell, h in zip(self.cells, state):
            x = cell(x, h)
            out.append(x)
        return x, tuple(out)
'''

SETTINGS_RECOGNIZER = '''
from torch import nn
from recurbench.langs.models import Recognizer


class DeepGRU(Recognizer):
    """A GRU language model ``layers`` deep."""

    def __init__(self, cfg, *, layers: int = 1):
        super().__init__(cfg)
        self.layers = layers
        self.gru = nn.GRU(cfg.d_model, cfg.d_model, num_layers=layers, batch_first=True)

    def encode(self, h):
        return self.gru(h)[0]
'''


@pytest.fixture
def module_folder(tmp_path, monkeypatch, fresh_registries):
    """A folder for the user's own modules, the working directory (the quick path's place); the
    changes the quick path makes to ``sys.path`` and ``PYTHONPATH`` are undone after the test."""
    folder = tmp_path / "mine"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    return folder


def _nested_runs(store: str, suite: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name(f"recurbench-{suite}")
    return [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("role") != "parent"]


def test_a_module_class_runs_with_its_own_settings_through_the_cli(module_folder, tmp_path, data_dir):
    """``--models module:Class`` with ``--set plugin_settings.<name>.<key>``: the class is built with
    the setting, the run logs it (and the setting left at its default) as params, ``compare`` and
    ``report`` show its row; a key the class does not take is one line naming the key and the class,
    before anything trains."""
    (module_folder / "my_forecaster_e2e.py").write_text(SETTINGS_FORECASTER)
    name, store = "my_forecaster_e2e:TinyGRU", f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["--profile", "quick", "--models", name, "--tracking-uri", store, "--data-dir", str(data_dir)]
    result = runner.invoke(app, ["run", "ltsf", *common, "--set", f"plugin_settings.{name}.width=8",
                                 "--set", "training.epochs=1"])
    assert result.exit_code == 0, result.output
    [run] = _nested_runs(store, "ltsf")
    params = run.data.params
    assert run.info.status == "FINISHED" and run.data.tags["model"] == name
    assert {k: v for k, v in params.items() if k.startswith("plugin_settings.")} == {
        "plugin_settings.width": "8", "plugin_settings.layers": "1"}
    features, marks = int(params["network.n_features"]), int(params["network.n_marks"])
    gru = sum(p.numel() for p in torch.nn.GRU(features + marks, 8).parameters())
    assert int(params["n_params"]) == gru + (8 + 1) * 24 * features  # built at width 8
    assert "test_mse" in run.data.metrics

    listed = runner.invoke(app, ["compare", "ltsf", "--tracking-uri", store, "--format", "csv"])
    assert listed.exit_code == 0, listed.output
    assert f"ETTh1,24,{name},mse," in listed.output
    report = runner.invoke(app, ["report", "ltsf", "--tracking-uri", store, "--out", str(tmp_path / "report"),
                                 "--format", "markdown"])
    assert report.exit_code == 0, report.output
    assert f"| {name} |" in (tmp_path / "report" / "report.md").read_text()

    bad = runner.invoke(app, ["run", "ltsf", *common, "--set", f"plugin_settings.{name}.widht=8"])
    assert isinstance(bad.exception, ConfigError), bad.output
    message = str(bad.exception)
    assert "\n" not in message
    assert message == (
        f"--set plugin_settings.{name}.widht=8: unknown setting 'widht' of forecaster {name!r} "
        f"(class my_forecaster_e2e.TinyGRU); its settings: width, layers")
    assert len(_nested_runs(store, "ltsf")) == 1  # nothing else ran


def _plan(suite: str, overrides: list[str], selection: dict, data_dir=None):
    from recurbench.suites.registry import load_profile

    definition, profile = load_profile(suite, "quick", overrides=overrides)
    return definition.plan(profile, selection, data_dir=data_dir)


@pytest.mark.parametrize(("suite", "text", "selection"), [
    ("memory", SETTINGS_CORE, {"tasks": ["copy"]}),
    ("minigrid", SETTINGS_CORE, {"envs": ["GoToDoor"]}),
    ("langs", SETTINGS_RECOGNIZER, {"languages": ["parity"]}),
])
def test_every_suite_plans_a_plugin_with_its_own_settings_and_builds_it_with_them(module_folder, suite, text,
                                                                                  selection):
    module = f"own_settings_{suite}"
    (module_folder / f"{module}.py").write_text(text)
    cls = "DeepGRU" if suite == "langs" else "StackedGRU"
    name = f"{module}:{cls}"
    [plan] = _plan(suite, [f"plugin_settings.{name}.layers=2"], {**selection, "models": [name]})
    # StackedGRU's nu is a setting the suite hands every core (model.nu, core.nu): logged there, not here
    assert plan.params["plugin_settings"] == {"layers": 2}
    if suite == "memory":
        from recurbench.memory.models import build_model
        from recurbench.memory.tasks import make_task

        built = build_model(make_task("copy", 10), plan.payload.network).core
    elif suite == "minigrid":
        from recurbench.agents.training import make_agent

        pair, core, profile = plan.payload
        built = make_agent(core, pair.train, profile.ppo.model_copy(update={"n_envs": 1}), profile.core, seed=0,
                           plugin_settings=plan.params["plugin_settings"]).policy.core
    else:
        from recurbench.langs.models import build_recognizer

        built = build_recognizer(name, plan.payload.network, **plan.payload.model_settings)
    assert type(built).__name__ == cls and built.layers == 2


def test_tune_minigrid_builds_a_plugin_core_with_its_own_settings_and_logs_them(module_folder, monkeypatch):
    """``tune minigrid --model module:Class --set plugin_settings.<name>.layers=2``: every trial's
    agent has the setting and its run logs it; a bad key is the suite's one line, before a trial."""
    from recurbench.tracking import MemoryTracker
    from recurbench.tuning import objectives
    from recurbench.tuning.objectives import MinigridObjective
    from recurbench.tuning.study import StudySpec, run_study

    (module_folder / "tuned_cores.py").write_text(SETTINGS_CORE)
    name = "tuned_cores:StackedGRU"
    built = []
    real = objectives.make_agent

    def spy(*args, **kwargs):
        agent = real(*args, **kwargs)
        built.append(agent.policy.core)
        return agent

    monkeypatch.setattr(objectives, "make_agent", spy)
    tracker = MemoryTracker()
    objective = MinigridObjective(name, "GoToObject", total_timesteps=256,
                                  overrides=(f"plugin_settings.{name}.layers=2", "ppo.n_envs=2"))
    run_study(StudySpec("plugin", 1, storage=None, pruner="none"), objective, tracker)
    assert [(type(core).__name__, core.layers) for core in built] == [("StackedGRU", 2)]
    (trial,) = [r for r in tracker.runs if r.tags.get("role") == "trial"]
    assert str(trial.params["plugin_settings.layers"]) == "2"

    bad = MinigridObjective(name, "GoToObject", overrides=(f"plugin_settings.{name}.widht=2",))
    with pytest.raises(ConfigError, match=r"^--set plugin_settings\.tuned_cores:StackedGRU\.widht=2: unknown setting 'widht'"):
        _ = bad.plugin_settings


def test_a_setting_without_a_default_must_be_given_and_a_built_in_takes_none(module_folder):
    (module_folder / "needs_a_width.py").write_text(SETTINGS_FORECASTER.replace("width: int = 16", "width: int"))
    name = "needs_a_width:TinyGRU"
    with pytest.raises(SettingError) as missing:
        ARCHITECTURES.settings_for(name)
    assert str(missing.value) == (f"forecaster {name!r} (class needs_a_width.TinyGRU) needs setting 'width', which has "
                                  f"no default: give it with --set plugin_settings.{name}.width=VALUE")
    assert ARCHITECTURES.settings_for(name, {"width": 4}) == {"width": 4, "layers": 1}
    with pytest.raises(SettingError, match=r"setting 'width' of forecaster .*: Input should be a valid integer"):
        ARCHITECTURES.settings_for(name, {"width": "wide"})
    with pytest.raises(ConfigError) as built_in:
        _plan("memory", ["plugin_settings.lstm.layers=2"], {"tasks": ["copy"]})
    assert str(built_in.value).split("memory.yaml: ")[1] == (
        "profiles.quick.plugin_settings.lstm: 'lstm' is a built-in memory core: its settings are the suite's own "
        "keys (see the suite file), not plugin_settings (with --set plugin_settings.lstm.layers=2)")


@pytest.mark.parametrize(("suite", "selection"), [("memory", {"tasks": ["copy"]}), ("minigrid", {"envs": ["GoToDoor"]})])
def test_a_suite_setting_a_plugin_takes_too_is_refused_under_plugin_settings(module_folder, suite, selection):
    # StackedGRU takes nu, which the suite hands every core: the class got plugin_settings' 7 while the
    # run's name, its params and the tables showed the suite's nu.
    (module_folder / "own_nu.py").write_text(SETTINGS_CORE)
    name = "own_nu:StackedGRU"
    with pytest.raises(ConfigError) as refused:
        _plan(suite, [f"plugin_settings.{name}.nu=7"], {**selection, "models": [name]})
    assert str(refused.value) == (
        f"plugin_settings.{name}.nu: 'nu' is a setting the suite hands every memory core: set it among the suite's "
        "own settings (see the suite file), not under plugin_settings")


def test_a_dotted_module_path_split_by_set_is_one_name_again(module_folder):
    package = module_folder / "own_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "cores.py").write_text(SETTINGS_CORE)
    name = "own_pkg.cores:StackedGRU"
    [plan] = _plan("memory", [f"plugin_settings.{name}.layers=3"], {"tasks": ["copy"], "models": [name]})
    assert plan.params["plugin_settings"] == {"layers": 3} and plan.payload.network.core_settings == {"layers": 3}


def test_a_misspelt_model_under_plugin_settings_is_named_as_unknown(module_folder):
    # It was glued to its setting as a dotted module path: "plugin_settings.stacked_gruu.layers: Input
    # should be a valid dictionary (got 2)".
    with pytest.raises(ConfigError) as typo:
        _plan("memory", ["plugin_settings.stacked_gruu.layers=2"], {"tasks": ["copy"]})
    assert str(typo.value).split("memory.yaml: ")[1].startswith(
        "profiles.quick.plugin_settings.stacked_gruu: unknown memory core 'stacked_gruu'; known: lstm,")


def test_the_kit_checks_a_plugin_at_its_own_settings(module_folder):
    (module_folder / "kit_settings.py").write_text(SETTINGS_FORECASTER + SETTINGS_RECOGNIZER)
    assert "serialisation" in check_forecaster("kit_settings:TinyGRU", settings={"width": 4, "layers": 2})
    assert "causal" in check_language_model("kit_settings:DeepGRU", settings={"layers": 2})


def test_plugins_run_under_the_ray_engine(example, module_folder, tmp_path, monkeypatch):
    """``--engine ray`` with the installed example (entry points; its folder is on the driver's
    ``sys.path`` only, as a ``pip install --target`` folder would be) and a ``module:Class`` from a
    folder on the driver's ``sys.path`` only, with a setting of its own: each run is a Ray task in a
    fresh worker process, which must load both, and ends FINISHED with the plugin's metrics."""
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_memory_monitor_refresh_ms", "0")  # as tests/test_engine.py: other work beside
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "ray_own_cores.py").write_text(SETTINGS_CORE)
    monkeypatch.syspath_prepend(str(elsewhere))
    monkeypatch.chdir(tmp_path)  # not the module's folder: a worker finds it through the driver only
    name, store = "ray_own_cores:StackedGRU", f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = runner.invoke(app, [
        "run", "memory", "--profile", "quick", "--models", f"gru,{name}", "--tasks", "copy",
        "--set", f"plugin_settings.{name}.layers=2", "--set", "training.updates=30", "--tracking-uri", store,
        "--engine", "ray", "--workers", "1", "--cpus-per-run", "1"])  # a Ray instance of 1 CPU
    assert result.exit_code == 0, result.output
    runs = {r.data.tags["model"]: r for r in _nested_runs(store, "memory")}
    assert set(runs) == {"gru", name}
    for run in runs.values():
        assert run.info.status == "FINISHED"
        assert {"accuracy", "train_accuracy", "grad_first_final", "updates"} <= run.data.metrics.keys()
        assert run.data.metrics["updates"] == 30
    assert runs[name].data.params["plugin_settings.layers"] == "2"
    assert not any(k.startswith("plugin_settings.") for k in runs["gru"].data.params)  # GRUCore takes none
