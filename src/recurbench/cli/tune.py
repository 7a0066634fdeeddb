"""``recurbench tune``: Optuna studies (:mod:`recurbench.tuning.tune`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from recurbench.cli.common import (
    AddressOpt,
    CpusPerRunOpt,
    DataDirOpt,
    EngineOpt,
    GpusPerRunOpt,
    TrackingOpt,
    TuneDeviceOpt,
    WorkersOpt,
    console,
    engine_spec,
    table,
)
from recurbench.tracking import make_tracker


def tune_cmd(
    suite: Annotated[str, typer.Argument(help="ltsf (REM heads of an RSA forecaster) or minigrid.")],
    model: Annotated[str, typer.Option("--model", help="Model (ltsf: rsa_informer, rsa_logsparse, rsa_xl) or core.")],
    trials: Annotated[int, typer.Option("--trials", help="Finished (complete or pruned) trials the study should hold.")],
    dataset: Annotated[str | None, typer.Option("--dataset", help="LTSF dataset.")] = None,
    horizon: Annotated[int | None, typer.Option("--horizon", help="LTSF horizon.")] = None,
    env: Annotated[str | None, typer.Option("--env", help="MiniGrid env pair: a name (`recurbench list envs`, or the --config file's pairs) or TRAIN_ID:TEST_ID.")] = None,
    profile: Annotated[str, typer.Option("--profile", "-p", help="Suite profile that sets the training budget.")] = "quick",
    storage: Annotated[str | None, typer.Option("--storage", help="Optuna storage URL (default sqlite:///results/optuna.db; journal:PATH; postgresql://...).")] = None,
    study_name: Annotated[str | None, typer.Option("--study-name", help="Study name; the same name resumes the study.")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds after which each worker stops starting trials.")] = None,
    pruner: Annotated[str, typer.Option("--pruner", help="median | hyperband | none")] = "median",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the TPE sampler and of every trial's training.")] = 0,
    tune_lr: Annotated[bool, typer.Option("--tune-lr", help="Also tune the learning rate and the RSA parameters' factor on it (rsa_lr_factor).")] = False,
    enqueue_paper: Annotated[bool, typer.Option("--enqueue-paper", help="Evaluate the profile's (paper's Table 5) head layout as the next trial, unless the study has tried it.")] = False,
    best_out: Annotated[str | None, typer.Option("--best-out", help="Write the best configuration as a suite YAML that `recurbench run SUITE --config FILE --profile tuned` accepts.")] = None,
    config: Annotated[str | None, typer.Option("--config", help="A suite YAML to use instead of the shipped one.")] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="Override a profile setting for every trial, e.g. --set training.epochs=3 (repeatable)."),
    ] = None,
    tracking_uri: TrackingOpt = None,
    data_dir: DataDirOpt = None,
    device: TuneDeviceOpt = None,
    engine: EngineOpt = "serial",
    workers: WorkersOpt = None,
    address: AddressOpt = None,
    cpus_per_run: CpusPerRunOpt = 1.0,
    gpus_per_run: GpusPerRunOpt = 0.0,
) -> None:
    """Optuna studies over REM head counts, dilations and gate initialisation; resumable, on Ray workers."""
    from recurbench.tuning.tune import TuneRequest, tune  # noqa: PLC0415 - torch, Optuna, the suites

    request = TuneRequest(
        suite=suite, model=model, trials=trials, dataset=dataset, horizon=horizon, env=env, profile=profile,
        storage=storage, study_name=study_name, timeout=timeout, pruner=pruner, seed=seed, tune_lr=tune_lr,
        enqueue_paper=enqueue_paper, best_out=best_out, config=config, overrides=tuple(overrides or ()),
        data_dir=data_dir, device=device,
    )
    engine_choice = engine_spec(engine, workers, address, cpus_per_run, gpus_per_run)
    with console.status(f"study: {trials} trials ({engine_choice.kind} engine)"):
        outcome = tune(request, make_tracker(tracking_uri), engine_choice)
    result = outcome.result
    console.print(table(f"study {result.study_name}", ["key", "value"], [
        ["storage", result.storage],
        ["trials", ", ".join(f"{n} {'failed' if state == 'fail' else state}" for state, n in result.counts.items() if n) or "none"],
        ["best trial", result.best_trial],
        ["best " + ("validation loss" if suite == "ltsf" else "training-env reward"),
         None if result.best_value is None else f"{result.best_value:.4f}"],  # best_trial.json keeps every digit
        ["best params", ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in result.best_params.items()) or None],
        ["stale trials failed and retried", ", ".join(map(str, result.recovered)) or "none"],
        *([["running in another driver", ", ".join(map(str, result.running_elsewhere))]] if result.running_elsewhere else []),
        ["MLflow parent run", result.parent_run_id],
    ]))
    for note in outcome.notes:
        console.print(escape(note))
