"""Toy suite and objective for the Ray engine tests. Ray tasks receive them pickled by value
(``ray.cloudpickle.register_pickle_by_value``), since the workers cannot import ``tests``."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import optuna

from recurbench.config import StrictModel
from recurbench.suites.base import RunPlan, SuiteDefinition
from recurbench.suites.checkpoints import CheckpointWriter
from recurbench.tuning.study import Objective

STEPS = 20
"""Metric records each toy run logs (to check that none is lost under concurrent workers)."""


class RayToyProfile(StrictModel):
    models: list[str]
    seeds: int = 1


class RayToySuite(SuiteDefinition):
    """``models`` name what a run does: ``good`` trains; ``die_once`` kills its worker on the first
    attempt; ``die_always`` on every attempt; ``raise`` fails in the training code; ``block`` waits
    until it is cancelled. ``data_dir`` is the folder for the attempts' marker files."""

    name = "raytoy"
    profile_model = RayToyProfile
    headline_metrics = ("score",)

    def plan(self, profile, selection, *, data_dir):
        return [RunPlan(f"{m}-s{s}", s, {"model": m}, {"mode": m}, payload=m)
                for m in selection.get("models", profile.models) for s in range(selection.get("seeds", profile.seeds))]

    def execute(self, plan, run, progress, *, data_dir, device):
        markers = Path(data_dir)
        attempts = markers / f"{plan.name}.attempts"
        with attempts.open("a") as f:
            f.write(f"{os.getpid()}\n")
        for step in range(STEPS):
            run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
        mode = plan.payload
        if mode == "die_always" or (mode == "die_once" and len(attempts.read_text().split()) == 1):
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "raise":
            raise RuntimeError("loss is NaN")
        if mode == "block":
            (markers / f"{plan.name}.started").touch()
            while True:
                time.sleep(0.1)
        run.log_metrics({"score": float(plan.seed)})
        return {"score": float(plan.seed)}


class RayToyResumableSuite(RayToySuite):
    """The toy suite with checkpoints: a run saves one at ``STEPS // 2`` (its data: the step) and
    continues from one it is handed. ``die_mid`` kills its worker right after that checkpoint on the
    first attempt."""

    resumable = True

    def execute(self, plan, run, progress, *, data_dir, device, resume=None):
        attempts = Path(data_dir) / f"{plan.name}.attempts"
        with attempts.open("a") as f:
            f.write(f"{os.getpid()}\n")
        start = 0
        if resume is not None:
            start = int(resume.data.decode())
            resume.accept(run)
        writer = CheckpointWriter(run)
        for step in range(start, STEPS):
            run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
            if step + 1 == STEPS // 2:
                writer.save(step + 1, str(step + 1).encode())
                if plan.payload == "die_mid" and len(attempts.read_text().split()) == 1:
                    os.kill(os.getpid(), signal.SIGKILL)
        run.log_metrics({"score": float(start)})
        return {"score": float(start)}


@dataclass
class ToyQuadratic(Objective):
    """(x - 2)^2. With ``rendezvous`` (a folder), a worker's trial waits until ``workers`` worker
    processes have started a trial (a marker file each), so that every worker takes part however late
    the machine starts it; the deadline only bounds a hang (then a worker's absence fails the test)."""

    rendezvous: str | None = None
    workers: int = 2
    suite = "raytoy"

    def __call__(self, trial: optuna.Trial, run) -> float:
        x = trial.suggest_float("x", -10, 10)
        if self.rendezvous is not None:
            folder = Path(self.rendezvous)
            (folder / f"worker-{os.getpid()}").touch()
            deadline = time.monotonic() + 300
            while len(list(folder.glob("worker-*"))) < self.workers and time.monotonic() < deadline:
                time.sleep(0.05)
        return (x - 2) ** 2
