"""A plugin suite is compared and reported as a shipped one: its configurations are the tags its plans
share, its metrics its ``headline_metrics``, with no paper's figures beside them."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from recurbench.config import StrictModel
from recurbench.errors import ConfigError
from recurbench.plugins import PluginSource
from recurbench.reporting.by_suite import compare, write_report
from recurbench.reporting.render import render
from recurbench.suites import registry
from recurbench.suites.base import RunPlan, SuiteDefinition
from recurbench.suites.runner import run_suite
from recurbench.tracking import MlflowTracker, experiment_name


class ShapesProfile(StrictModel):
    shapes: list[str]
    sizes: list[int]
    seeds: int = 2


class ShapesSuite(SuiteDefinition):
    """Each run measures a shape: its area and perimeter, plus its seed (a spread over seeds)."""

    name = "shapes"
    profile_model = ShapesProfile
    headline_metrics = ("area", "perimeter")
    default_device = "cpu"

    def plan(self, profile, selection, *, data_dir):
        return [RunPlan(f"{shape}-{size}-s{seed}", seed, {"shape": shape, "size": str(size)}, {"scale": 1.0},
                        payload=(shape, size))
                for shape in profile.shapes for size in profile.sizes for seed in range(profile.seeds)]

    def execute(self, plan, run, progress, *, data_dir, device):
        shape, size = plan.payload
        area = float(size * size if shape == "square" else size * size / 2)
        metrics = {"area": area + plan.seed, "perimeter": float(4 * size if shape == "square" else 3.5 * size)}
        run.log_metrics(metrics)
        return metrics


@pytest.fixture
def shapes(tmp_path, monkeypatch):
    """The suite registered as a plugin's, with its runs in a store of their own: the tracking URI."""
    path = tmp_path / "shapes.yaml"
    path.write_text("suite: shapes\nprofiles:\n  quick: {shapes: [square, triangle], sizes: [2]}\n")
    suite = type("ShapesSuite", (ShapesSuite,), {"suite_path": lambda self: path})
    monkeypatch.setitem(registry.SUITES._loaded(), "shapes", suite)
    monkeypatch.setitem(registry.SUITES._sources, "shapes", PluginSource("recurbench-shapes", ""))
    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker.client.create_experiment(experiment_name("shapes"), artifact_location=(tmp_path / "artifacts").as_uri())
    run_suite("shapes", "quick", tracker)
    return tracker.tracking_uri


def test_a_plugin_suite_is_compared_by_the_tags_its_plans_share(shapes):
    comp = compare("shapes", tracking_uri=shapes)
    assert comp.by == ("shape", "size") and comp.reference == "none" and comp.paper_caveat is None
    assert render(comp, "markdown") == (
        "### recurbench-shapes (profile quick): mean over seeds\n\n"
        "| shape | size | area | perimeter |\n"
        "|---|---|---|---|\n"
        "| square | 2 | 4.500 ± 0.707 (n=2) | 8.000 ± 0.000 (n=2) |\n"
        "| triangle | 2 | 2.500 ± 0.707 (n=2) | 7.000 ± 0.000 (n=2) |\n"
    )
    by_shape = compare("shapes", tracking_uri=shapes, by=["shape"])
    assert by_shape.cells[["shape", "metric", "mean", "n"]].values.tolist()[:2] == [["square", "area", 4.5, 2],
                                                                                  ["square", "perimeter", 8.0, 2]]
    from recurbench.cli import app

    result = CliRunner().invoke(app, ["compare", "shapes", "--tracking-uri", shapes, "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:2] == ["shape,size,metric,mean,std,n", "square,2,area,4.5,0.7071067812,2"]


def test_a_plugin_suite_is_reported_with_its_tables(shapes, tmp_path):
    report = write_report("shapes", tmp_path / "report", tracking_uri=shapes, fmt="markdown", log_to_mlflow=False)
    text = report.path.read_text()
    assert "| square | 2 | 4.500 ± 0.707 (n=2) | 8.000 ± 0.000 (n=2) |" in text
    assert report.figures == [] and report.omitted == [
        "figures: recurbench draws them for the suites it ships; 'shapes' is a plugin's suite, so its report holds "
        "the comparison tables only"]


def test_a_plugin_suite_whose_plans_share_no_tag_is_refused_with_what_it_must_give(shapes, monkeypatch):
    class Untagged(registry.SUITES["shapes"]):
        def plan(self, profile, selection, *, data_dir):
            return [RunPlan(f"{s}-s0", 0, {"shape": s} if s == "square" else {"form": s}, {}, payload=(s, 2))
                    for s in profile.shapes]

    monkeypatch.setitem(registry.SUITES._loaded(), "shapes", Untagged)
    message = ("suite 'shapes': compare and report group a plugin suite's runs by the tags its plans share, and the "
               "plans of its quick profile share none: give each RunPlan tags naming its configuration (model, "
               "dataset)")
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        compare("shapes", tracking_uri=shapes)
