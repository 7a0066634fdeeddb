"""A driver process for the tests of several drivers on one store (``tests/test_store_drivers.py``).

``python tests/store_drivers.py INDEX N ROOT ITERATIONS [URI_TEMPLATE]`` runs the toy suite below
(2 models x 3 seeds, profile ``p<k>`` at iteration k) with ``--skip-finished`` on a new store per
iteration (``ROOT/it<k>/mlflow.db``), or on ``URI_TEMPLATE.format(k=k)`` (a server). Before each iteration it waits at a barrier of marker files
(``ROOT/it<k>/ready-<i>``) until all N drivers are there, so that they start together; each then
writes ``ROOT/it<k>/done-<i>`` with what it ran. One process runs every iteration, so MLflow's import
(seconds) is paid once.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from recurbench.config import StrictModel
from recurbench.plugins import PluginSource
from recurbench.suites import registry
from recurbench.suites.base import RunPlan, SuiteDefinition
from recurbench.suites.runner import run_suite
from recurbench.tracking import MlflowTracker

ITERATIONS_MAX = 10
SUITE_YAML = """\
suite: drivers
description: a toy suite for concurrent drivers
profiles:
  p0: &p0
    models: [a, b]
    seeds: 3
""" + "".join(f"  p{k}: *p0\n" for k in range(1, ITERATIONS_MAX))
"""One profile per iteration (``p<k>``), so that iterations on one server store stay apart."""


class DriversProfile(StrictModel):
    models: list[str]
    seeds: int = 1


class DriversSuite(SuiteDefinition):
    name = "drivers"
    profile_model = DriversProfile
    headline_metrics = ("score",)

    def plan(self, profile, selection, *, data_dir):
        return [RunPlan(f"{m}-s{s}", s, {"model": m}, {"width": 4}, payload=m)
                for m in profile.models for s in range(profile.seeds)]

    def execute(self, plan, run, progress, *, data_dir, device):
        for step in range(3):
            run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
        run.log_metrics({"score": float(plan.seed)})
        return {"score": float(plan.seed)}


def barrier(folder: Path, index: int, n: int, timeout: float = 300.0) -> None:
    """Wait until the N drivers have each left their marker in ``folder`` (polled: no clock decides
    who goes first, only that all have arrived)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"ready-{index}").touch()
    deadline = time.monotonic() + timeout
    while sum(1 for _ in folder.glob("ready-*")) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {folder}: not all {n} drivers arrived")
        time.sleep(0.01)


def main(index: int, n: int, root: Path, iterations: int, uri_template: str | None) -> None:
    registry.SUITES._loaded()["drivers"] = DriversSuite
    registry.SUITES._sources["drivers"] = PluginSource("tests", "")
    config = root / "drivers.yaml"
    for k in range(iterations):
        folder = root / f"it{k}"
        uri = uri_template.format(k=k) if uri_template else f"sqlite:///{folder / 'mlflow.db'}"
        barrier(folder, index, n)
        result = run_suite("drivers", f"p{k}", MlflowTracker(uri), config_path=config, skip_finished=True)
        (folder / f"done-{index}").write_text(json.dumps(
            {o.plan.name: [o.status, o.run_id, o.reused] for o in result.outcomes}))


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]), int(args[1]), Path(args[2]), int(args[3]), args[4] if len(args) > 4 else None)
