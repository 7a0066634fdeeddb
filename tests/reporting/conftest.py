"""A fixture MLflow store with hand-chosen values, written through recurbench's own tracker so that
the reporting code reads exactly what the suites log.

LTSF (profile ``quick`` unless noted; values are test MSE / MAE):

=========  =======  =============  ==================================================
dataset    horizon  model          runs
=========  =======  =============  ==================================================
ETTh1      24       informer       seeds 0,1,2: MSE 0.6, 0.7, 0.8; MAE 0.5, 0.6, 0.7
                                   (+ an older seed-0 run with MSE 5.0, superseded)
                                   (+ profile ``paper`` seed 0 with MSE 9.9, not shown)
ETTh1      24       rsa_informer   seeds 0,1: MSE 0.40, 0.44; MAE 0.45, 0.47; seed 2 FAILED
ETTh1      24       logsparse      seed 0: 1.0 / 0.8
ETTh1      24       rsa_logsparse  seed 0: 0.9 / 0.85   (loses on MAE)
ETTh1      24       rsa_xl         seed 0: 0.5 / 0.5    (no xl run: a missing cell)
ETTh1      48       informer       seed 0: 1.1 / 0.8; an older seed 1 at 2 threads: 1.3 / 0.9 (pooled)
ETTh1      48       rsa_informer   seed 0: 0.5 / 0.5
                                   (+ an older seed-1 run with seq_len 48, MSE 7.0: other settings, left out)
=========  =======  =============  ==================================================

MiniGrid (train / test reward):

=========  ========  ======================================================================
env        agent     runs
=========  ========  ======================================================================
DoorKey    lstm      seeds 0-3: train 0.9, 0.8, 0.95, 0.85; test 0.2, 0.4, 0.3, 0.1 (ratio logged)
DoorKey    rellstm   seeds 0-2: train 0.9, 0.9, 0.96; test 0.5, 0.3, 0.4 (no ratio logged)
DoorKey    memlstm   seed 0: train 0.7, test 0.2
Memory     rellstm   seeds 0-2: train 0.5, 0.6, 0.7; test 0.2, 0.3, 0.1
Memory     memlstm   seed 0 FAILED
=========  ========  ======================================================================
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from recurbench.tracking import MlflowTracker, experiment_name, standard_tags


@dataclass(frozen=True)
class Store:
    uri: str
    root: Path


def _parent(tracker, suite, profile):
    return tracker.run(f"{suite}-{profile}", experiment=experiment_name(suite), tags=standard_tags(suite=suite, profile=profile, role="parent"))


def _nested(tracker, parent, suite, profile, seed, **tags):
    name = "-".join(str(v) for v in tags.values()) + f"-s{seed}"
    return tracker.run(name, experiment=experiment_name(suite), parent=parent, tags=standard_tags(suite=suite, profile=profile, seed=seed, **tags))


def _ltsf_run(tracker, parent, profile, dataset, horizon, model, seed, mse, mae, *, artifacts=False, seq_len=96, threads=1):
    with _nested(tracker, parent, "ltsf", profile, seed, dataset=dataset, horizon=horizon, model=model) as run:
        run.log_params({"model": model, "dataset": dataset, "horizon": horizon, "seq_len": seq_len,
                        "seed": seed, "torch_threads": threads})
        for epoch, (train, val) in enumerate([(1.0, 1.2), (0.7, 0.9), (0.5, 0.8)]):
            run.log_metrics({"train_loss": train * mse, "val_loss": val * mse}, step=epoch)
        run.log_metrics({"test_mse": mse, "test_mae": mae, "wall_time_s": 1.0})
        if model.startswith("rsa_"):
            run.log_metrics({"gate.encoder.0": 0.6 + 0.1 * seed, "gate.encoder.1": 0.4 + 0.05 * seed, "gate.decoder.0": 0.2})
        if artifacts:
            run.log_dict(
                {
                    "encoder.0": [
                        {"head": 0, "kind": "regular", "lambda": 0.9},
                        {"head": 1, "kind": "regular", "lambda": -0.7},
                        {"head": 2, "kind": "cyclical_cos", "gamma": 0.95, "theta": math.pi / 6},
                        {"head": 3, "kind": "cyclical_sin", "gamma": 0.95, "theta": math.pi / 6},
                        {"head": 4, "kind": "regular", "lambda": 0.8, "dilation": 4},
                    ]
                },
                "rem_params.json",
            )
            t = [i / 8 for i in range(48 + horizon)]
            truth = [math.sin(x) for x in t]
            run.log_dict(
                {"history": truth[:48], "truth": truth[48:], "prediction": [v + 0.1 for v in truth[48:]]},
                "forecasts/example_0.json",
            )


def _minigrid_run(tracker, parent, env, agent, seed, train, test, *, ratio=True):
    with _nested(tracker, parent, "minigrid", "quick", seed, env=env, agent=agent) as run:
        for i, step in enumerate(range(0, 5000, 1000)):
            run.log_metrics({"rollout_reward": train * (i + 1) / 5}, step=step)
        run.log_metrics({"train_reward": train, "test_reward": test})
        if ratio:
            run.log_metrics({"generalisation_ratio": test / train})


def _failed(tracker, parent, suite, seed, message, **tags):
    try:
        with _nested(tracker, parent, suite, "quick", seed, **tags):
            raise RuntimeError(message)
    except RuntimeError:
        pass


def build_store(root: Path) -> Store:
    uri = f"sqlite:///{root / 'mlflow.db'}"
    tracker = MlflowTracker(uri)
    for suite in ("ltsf", "minigrid"):  # artifacts inside the tmp dir, not the working directory
        tracker.client.create_experiment(experiment_name(suite), artifact_location=(root / "artifacts" / suite).as_uri())

    with _parent(tracker, "ltsf", "paper") as parent:
        _ltsf_run(tracker, parent, "paper", "ETTh1", 24, "informer", 0, 9.9, 9.9)
    with _parent(tracker, "ltsf", "quick") as parent:
        _ltsf_run(tracker, parent, "quick", "ETTh1", 24, "informer", 0, 5.0, 5.0)
        _ltsf_run(tracker, parent, "quick", "ETTh1", 48, "rsa_informer", 1, 7.0, 7.0, seq_len=48)
        _ltsf_run(tracker, parent, "quick", "ETTh1", 48, "informer", 1, 1.3, 0.9, threads=2)
    time.sleep(0.01)
    with _parent(tracker, "ltsf", "quick") as parent:
        for seed, (mse, mae) in enumerate([(0.6, 0.5), (0.7, 0.6), (0.8, 0.7)]):
            _ltsf_run(tracker, parent, "quick", "ETTh1", 24, "informer", seed, mse, mae)
        for seed, (mse, mae) in enumerate([(0.40, 0.45), (0.44, 0.47)]):
            _ltsf_run(tracker, parent, "quick", "ETTh1", 24, "rsa_informer", seed, mse, mae, artifacts=seed == 0)
        _failed(tracker, parent, "ltsf", 2, "out of memory", dataset="ETTh1", horizon=24, model="rsa_informer")
        _ltsf_run(tracker, parent, "quick", "ETTh1", 24, "logsparse", 0, 1.0, 0.8)
        _ltsf_run(tracker, parent, "quick", "ETTh1", 24, "rsa_logsparse", 0, 0.9, 0.85)
        _ltsf_run(tracker, parent, "quick", "ETTh1", 24, "rsa_xl", 0, 0.5, 0.5)
        _ltsf_run(tracker, parent, "quick", "ETTh1", 48, "informer", 0, 1.1, 0.8)
        _ltsf_run(tracker, parent, "quick", "ETTh1", 48, "rsa_informer", 0, 0.5, 0.5)

    with _parent(tracker, "minigrid", "quick") as parent:
        for seed, (train, test) in enumerate([(0.9, 0.2), (0.8, 0.4), (0.95, 0.3), (0.85, 0.1)]):
            _minigrid_run(tracker, parent, "DoorKey", "lstm", seed, train, test)
        for seed, (train, test) in enumerate([(0.9, 0.5), (0.9, 0.3), (0.96, 0.4)]):
            _minigrid_run(tracker, parent, "DoorKey", "rellstm", seed, train, test, ratio=False)
        _minigrid_run(tracker, parent, "DoorKey", "memlstm", 0, 0.7, 0.2)
        for seed, (train, test) in enumerate([(0.5, 0.2), (0.6, 0.3), (0.7, 0.1)]):
            _minigrid_run(tracker, parent, "Memory", "rellstm", seed, train, test)
        _failed(tracker, parent, "minigrid", 0, "env exploded", env="Memory", agent="memlstm")
    return Store(uri, root)


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> Store:
    return build_store(tmp_path_factory.mktemp("mlflow-store"))
