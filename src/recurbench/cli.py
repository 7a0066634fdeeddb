"""The recurbench command line. It only parses arguments and calls library functions.

Errors on bad input (``RecurbenchError``) are printed as one clear message and exit with code 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from recurbench.errors import DataWarning, RecurbenchError
from recurbench.runtime import handle_termination, tune_allocator

app = typer.Typer(
    name="recurbench",
    help="Benchmarks that untangle recurrence and self-attention: RL agents and LTSF forecasters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
data_app = typer.Typer(help="Datasets: list, verify checksums, fetch, info (splits and windows under the LTSF protocol).", no_args_is_help=True)
bench_app = typer.Typer(help="Performance benchmarks (kernels, layers, training throughput).", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(bench_app, name="bench")

console = Console()
err_console = Console(stderr=True)

DataDirOpt = Annotated[
    str | None,
    typer.Option("--data-dir", help="Folder with the dataset files (before $RECURBENCH_DATA and the user cache)."),
]
TrackingOpt = Annotated[
    str | None,
    typer.Option("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///results/mlflow.db)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
DeviceOpt = Annotated[
    str | None,
    typer.Option("--device", help="Where to train: auto (a CUDA GPU when one is visible, else the CPU), cpu, cuda, "
                 "cuda:N or mps. Default: auto for ltsf, cpu for minigrid (small recurrent policies; "
                 "stable-baselines3's advice)."),
]

EngineOpt = Annotated[
    str,
    typer.Option("--engine", help="serial: one run at a time in this process; ray: each run (each study worker) as "
                 "a Ray task, on a local Ray instance this command starts, or on the cluster at --address."),
]
WorkersOpt = Annotated[
    int | None,
    typer.Option("--workers", help="Ray: runs (study workers) at a time (default: this machine's CPUs / "
                 "--cpus-per-run; on a cluster, as its resources allow)."),
]
AddressOpt = Annotated[
    str | None,
    typer.Option("--address", help="Ray: the cluster to attach to (default: $RAY_ADDRESS, else a local instance)."),
]
CpusPerRunOpt = Annotated[
    float, typer.Option("--cpus-per-run", help="Ray: CPUs each run reserves; torch's thread count in it follows.")
]
GpusPerRunOpt = Annotated[
    float, typer.Option("--gpus-per-run", help="Ray: GPUs each run reserves (fractions share one); it trains there.")
]


def _engine(engine: str, workers: int | None, address: str | None, cpus_per_run: float, gpus_per_run: float) -> Any:
    from recurbench.engine import EngineSpec

    return EngineSpec(engine, workers, address, cpus_per_run, gpus_per_run)


SettingsOpt = Annotated[
    str,
    typer.Option("--settings", help="Which runs a configuration shows when it was run with different settings: "
                 "shipped (those at the settings its profile ships now, else the newest run's) or newest."),
]
BenchDeviceOpt = Annotated[
    str,
    typer.Option("--device", help="Where to run: auto (a CUDA GPU when one is visible, else the CPU), cpu, cuda, "
                 "cuda:N or mps."),
]


def main() -> None:
    """Console entry point: user errors become one message and a non-zero exit code.

    SIGTERM (a scheduler's or ``timeout``'s stop) unwinds like Ctrl-C, so the MLflow runs in progress
    are ended KILLED instead of being left RUNNING (:func:`recurbench.runtime.handle_termination`).
    glibc's allocator is tuned first (:func:`recurbench.runtime.tune_allocator`;
    ``RECURBENCH_MALLOC=default`` keeps its defaults)."""
    handle_termination()
    tune_allocator()  # keeps freed tensor memory in the process: no page faults per training step
    _show_data_warnings()
    # Off a terminal (a log file, a pipe) rich wraps to 80 columns unless $COLUMNS says otherwise, which
    # folds the result tables into unreadable narrow columns; a log file has no width to respect.
    for out in (console, err_console):
        if not out.is_terminal and "COLUMNS" not in os.environ:
            out.width = 160
    try:
        app()
    except RecurbenchError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        sys.exit(1)


def _show_data_warnings() -> None:
    """A :class:`~recurbench.errors.DataWarning` is printed as one line, like an error, not as Python's
    ``file:line: DataWarning: ...``; other warnings keep Python's form."""
    python_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, DataWarning):
            err_console.print(f"[yellow]warning:[/yellow] {escape(str(message))}", highlight=False)
        else:
            python_show(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def _print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str))


def _duration(seconds: float) -> str:
    """``42 s``, ``12 min``, ``3.4 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _table(title: str, header: list[str], rows: list[list[Any]]) -> Table:
    """A rich table of plain text: names and values are never read as rich markup (``[informer]``
    would vanish); a :class:`rich.text.Text` cell keeps its style."""
    table = Table(title=escape(title))
    for name in header:
        table.add_column(escape(str(name)))
    for row in rows:
        table.add_row(*(cell if isinstance(cell, Text) else escape(str(cell)) for cell in row))
    return table


def _at_least(minimum: int, **options: int | None) -> None:
    """Refuse a numeric option below ``minimum`` by its flag (``seq_len`` is ``--seq-len``); None = not given."""
    for name, value in options.items():
        if value is not None and value < minimum:
            raise RecurbenchError(f"--{name.replace('_', '-')} must be at least {minimum}, got {value}")


def _split_csv(values: list[str] | None) -> list[str] | None:
    """Options given as repeated flags and/or comma-separated lists."""
    if not values:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


# ------------------------------------------------------------------------------------------- list


@app.command("list")
def list_cmd(
    what: Annotated[str, typer.Argument(help="suites | models | datasets | envs")] = "suites",
    as_json: JsonOpt = False,
) -> None:
    """List shipped suites, models (forecasters and agent cores), datasets or environment pairs."""
    from recurbench.agents import CORES
    from recurbench.data import DATASETS
    from recurbench.envs import ENV_PAIRS, registered_env_ids
    from recurbench.forecasters import MODELS
    from recurbench.suites import list_suites

    if what == "suites":
        suites = list_suites()
        if as_json:
            return _print_json(suites)
        rows = [[name, ", ".join(s["profiles"]), s["description"]] for name, s in suites.items()]
        console.print(_table("suites", ["suite", "profiles", "description"], rows))
    elif what == "models":
        items = [{"name": n, "kind": "forecaster", "description": d} for n, d in MODELS.items()]
        items += [{"name": n, "kind": "agent core", "description": d} for n, d in CORES.items()]
        if as_json:
            return _print_json(items)
        console.print(_table("models", ["name", "kind", "description"], [list(i.values()) for i in items]))
    elif what == "datasets":
        items = [
            {"name": s.name, "file": s.filename, "rows": s.rows, "target": s.target, "split": s.split, "sha256": s.sha256}
            for s in DATASETS.values()
        ]
        if as_json:
            return _print_json(items)
        console.print(_table("datasets", list(items[0]), [list(i.values()) for i in items]))
    elif what == "envs":
        known = registered_env_ids()
        items = [
            {"pair": p.name, "train": p.train, "test": p.test, "registered": p.train in known and p.test in known}
            for p in ENV_PAIRS.values()
        ]
        if as_json:
            return _print_json(items)
        console.print(_table("MiniGrid train/test pairs", ["pair", "train", "test", "registered"], [list(i.values()) for i in items]))
        missing = [i["pair"] for i in items if not i["registered"]]
        if missing:
            raise RecurbenchError(f"environment ids not registered by the installed minigrid: {', '.join(missing)}")
    else:
        raise RecurbenchError(f"unknown listing {what!r}; choose one of: suites, models, datasets, envs")


# ------------------------------------------------------------------------------------------- data


@data_app.command("list")
def data_list(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Registered datasets and where (if anywhere) their files were found."""
    from recurbench.data import DATASETS, locate
    from recurbench.errors import DataError

    items = []
    for name in DATASETS:
        try:
            path: str | None = str(locate(name, data_dir))
        except DataError:
            path = None
        items.append({"name": name, "path": path})
    if as_json:
        return _print_json(items)
    console.print(_table("datasets", ["name", "path"], [[i["name"], i["path"] or Text("missing", style="red")] for i in items]))


@data_app.command("verify")
def data_verify(
    names: Annotated[list[str] | None, typer.Argument(help="Datasets to check (default: all).")] = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check each dataset file's sha256 against the registry; exit 1 if any is missing or differs."""
    from recurbench.data import verify

    results = verify(names, data_dir)
    if as_json:
        _print_json([{**r.__dict__, "path": str(r.path) if r.path else None} for r in results])
    else:
        colour = {"ok": "green", "mismatch": "red", "missing": "yellow"}
        rows = [[r.name, Text(r.status, style=colour[r.status]), r.path or "-", r.message.splitlines()[0] if r.message else ""] for r in results]
        console.print(_table("sha256 verification", ["name", "status", "path", "detail"], rows))
    bad = [r for r in results if r.status != "ok"]
    if bad:
        raise RecurbenchError("; ".join(dict.fromkeys(r.message.splitlines()[0] for r in bad)))


@data_app.command("fetch")
def data_fetch(
    names: Annotated[list[str] | None, typer.Argument(help="Datasets to download (default: all with a URL).")] = None,
    data_dir: DataDirOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Download again even if a good file exists.")] = False,
) -> None:
    """Download datasets (to --data-dir, else $RECURBENCH_DATA, else the user cache), verified by sha256."""
    from recurbench.data import DATASETS, fetch

    chosen = names or [n for n, s in DATASETS.items() if s.url]
    for name in chosen:
        with console.status(f"fetching {name}"):
            path = fetch(name, data_dir, force=force)
        console.print(f"[green]ok[/green] {escape(name)} -> {escape(str(path))}")


@data_app.command("info")
def data_info(
    name: Annotated[str, typer.Argument(help="A registered dataset name, or a path to your own CSV with a 'date' column.")],
    seq_len: Annotated[int, typer.Option("--seq-len", help="Encoder input length.")] = 96,
    label_len: Annotated[int, typer.Option("--label-len", help="Decoder start-token length.")] = 48,
    pred_len: Annotated[int, typer.Option("--pred-len", help="Forecast horizon.")] = 24,
    target: Annotated[str | None, typer.Option("--target", help="Target column (custom CSVs; default: last column).")] = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rows, columns, frequency, split borders and window counts under Informer's protocol."""
    from recurbench.data import WindowSpec, prepare

    info = prepare(name, WindowSpec(seq_len, label_len, pred_len), data_dir, target=target).describe()
    if as_json:
        return _print_json(info)
    console.print(_table(f"{info['name']}", ["key", "value"], [[k, v] for k, v in info.items()]))


# -------------------------------------------------------------------------------------------- run


class _RunProgress:
    """One rich progress bar per run on a terminal; elsewhere (nohup, a scheduler's log file) a
    time-stamped line whenever a run's description changes (an epoch starts or ends, evaluation
    begins), since a live bar is not drawn there and a long run would otherwise print nothing."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def __call__(self, plan: Any) -> Any:
        task = self.progress.add_task(plan.name, total=None)
        last = [""]

        def update(completed: float, total: float, description: str = "") -> None:
            text = f"{plan.name} {description}".strip()
            self.progress.update(task, completed=completed, total=total, description=text)
            if not self.progress.console.is_terminal and text != last[0]:
                last[0] = text
                self.progress.console.print(f"{time.strftime('%H:%M:%S')} {escape(text)}", highlight=False, soft_wrap=True)

        return update


@app.command("run")
def run_cmd(
    suite: Annotated[str, typer.Argument(help="Suite name (see `recurbench list suites`).")],
    profile: Annotated[str, typer.Option("--profile", "-p", help="Profile in the suite file, e.g. quick or paper.")] = "quick",
    datasets: Annotated[list[str] | None, typer.Option("--datasets", help="LTSF: datasets to run (comma-separated or repeated).")] = None,
    horizons: Annotated[list[str] | None, typer.Option("--horizons", help="LTSF: horizons to run.")] = None,
    models: Annotated[list[str] | None, typer.Option("--models", help="Models (forecasters) or cores (agents) to run.")] = None,
    envs: Annotated[list[str] | None, typer.Option("--envs", help="MiniGrid: env pairs to run (see `recurbench list envs`).")] = None,
    pairs: Annotated[list[str] | None, typer.Option("--pair", help="MiniGrid: a train/test pair of gymnasium ids, TRAIN_ID:TEST_ID (repeatable).")] = None,
    languages: Annotated[
        list[str] | None,
        typer.Option("--languages", help="langs: languages to run (parity, tomita3, tomita5, tomita6, d2, d4)."),
    ] = None,
    tasks: Annotated[list[str] | None, typer.Option("--tasks", help="memory: tasks to run (copy, denoise).")] = None,
    lengths: Annotated[list[str] | None, typer.Option("--lengths", help="memory: delays T to run, e.g. 100,500.")] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="Number of seeds, overriding the profile.")] = None,
    first_seed: Annotated[
        int, typer.Option("--first-seed", help="First seed: runs seeds S..S+N-1 (add seeds to a finished set).")
    ] = 0,
    total_timesteps: Annotated[
        int | None, typer.Option("--total-timesteps", help="MiniGrid: env steps per run, overriding the profile.")
    ] = None,
    config: Annotated[str | None, typer.Option("--config", help="A suite YAML to use instead of the shipped one.")] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a profile setting, e.g. --set training.rsa_lr_factor=100 (repeatable)."),
    ] = None,
    skip_finished: Annotated[
        bool,
        typer.Option("--skip-finished", help="Do not run again a configuration and seed that already has a FINISHED "
                     "run in the store at the same settings; its results enter the table (resumes a suite)."),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Check the settings and list the runs (with --skip-finished: which are "
                     "already finished); train nothing, write nothing."),
    ] = False,
    tracking_uri: TrackingOpt = None,
    data_dir: DataDirOpt = None,
    device: DeviceOpt = None,
    engine: EngineOpt = "serial",
    workers: WorkersOpt = None,
    address: AddressOpt = None,
    cpus_per_run: CpusPerRunOpt = 1.0,
    gpus_per_run: GpusPerRunOpt = 0.0,
) -> None:
    """Run a suite profile; every configuration and seed becomes a nested MLflow run."""
    from recurbench.engine import check_cluster_store
    from recurbench.suites import run_suite
    from recurbench.suites.runner import SUITES, typical_seconds
    from recurbench.tracking import check_store, make_tracker

    if suite not in SUITES:
        raise RecurbenchError(f"unknown suite {suite!r}; known suites: {', '.join(SUITES)}")
    selection: dict[str, Any] = {}
    for key, value in (("datasets", datasets), ("horizons", horizons), ("models", models), ("envs", envs),
                       ("languages", languages), ("pairs", pairs), ("tasks", tasks), ("lengths", lengths)):
        if (items := _split_csv(value)) is not None:
            selection[key] = items
    _at_least(1, seeds=seeds)
    _at_least(0, first_seed=first_seed)
    if seeds is not None:
        selection["seeds"] = seeds
    if first_seed:
        selection["first_seed"] = first_seed
    if total_timesteps is not None:
        if suite != "minigrid":
            raise RecurbenchError(f"--total-timesteps applies to the minigrid suite, not {suite!r}")
        _at_least(1, total_timesteps=total_timesteps)
        selection["total_timesteps"] = total_timesteps
    spec = _engine(engine, workers, address, cpus_per_run, gpus_per_run)
    tracker = make_tracker(tracking_uri, write=not dry_run)
    check_cluster_store(spec, tracker.tracking_uri)  # type: ignore[attr-defined]
    if not dry_run or skip_finished:
        check_store(tracker.tracking_uri, write=not dry_run)  # type: ignore[attr-defined]  # creates nothing
    if dry_run:
        result = run_suite(suite, profile, tracker, selection=selection, data_dir=data_dir, config_path=config,
                           overrides=overrides or (), device=device, skip_finished=skip_finished, dry_run=True,
                           engine=spec)
        shown = {"FINISHED": "finished: run {}", "PLANNED": "to run"}
        typical = typical_seconds(suite, profile, tracker, [o.plan for o in result.outcomes])
        rows = [[o.plan.name, str(o.plan.seed), shown[o.status].format(o.run_id)
                 + (f" (typically {_duration(typical[i])})" if i in typical and o.status == "PLANNED" else "")]
                for i, o in enumerate(result.outcomes)]
        console.print(_table(f"{suite} / {profile}: dry run", ["run", "seed", "status"], rows))
        todo = [i for i, o in enumerate(result.outcomes) if o.status == "PLANNED"]
        console.print(f"{len(todo)} run(s) to run, {len(result.reused)} already finished; nothing was trained or written")
        if known := [typical[i] for i in todo if i in typical]:
            console.print(
                f"typical time of the {len(known)} run(s) to run that have one: {_duration(sum(known))} in all (the "
                "median wall time of this store's finished runs of the same configuration, on the machines that ran them)"
                + (f"; {len(todo) - len(known)} have no finished run of their configuration to go by"
                   if len(known) < len(todo) else "")
            )
        return
    with Progress(
        TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        result = run_suite(
            suite, profile, tracker, selection=selection, data_dir=data_dir, config_path=config,
            overrides=overrides or (), progress_factory=_RunProgress(progress), device=device,
            skip_finished=skip_finished, engine=spec,
        )
    header, rows = SUITES[suite]().summary_rows(result.outcomes)
    console.print(_table(f"{suite} / {profile}", header, rows))
    if reused := result.reused:
        console.print(escape(
            f"{len(reused)} of {len(result.outcomes)} run(s) were already finished at these settings and were not "
            f"run again (--skip-finished); the table includes them: "
            + ", ".join(f"{o.plan.name} ({o.run_id})" for o in reused[:5]) + (", ..." if len(reused) > 5 else "")
        ))
    if result.stale:
        err_console.print(escape(
            f"ended FAILED: {len(result.stale)} run(s) of these configurations left RUNNING by an invocation that "
            f"was killed outright (one driver per store at a time): {', '.join(result.stale[:5])}"
            + (", ..." if len(result.stale) > 5 else "")
        ))
    if result.parent_run_id is not None:
        console.print(f"MLflow parent run: {result.parent_run_id}")
    if result.failed:
        for o in result.failed:
            err_console.print(f"[red]FAILED[/red] {escape(o.plan.name)}: {escape(str(o.error))}")
        raise typer.Exit(1)


@app.command("tune")
def tune_cmd(
    suite: Annotated[str, typer.Argument(help="ltsf (REM heads of an RSA forecaster) or minigrid.")],
    model: Annotated[str, typer.Option("--model", help="Model (ltsf: rsa_informer, rsa_logsparse, rsa_xl) or core.")],
    trials: Annotated[int, typer.Option("--trials", help="Finished (complete or pruned) trials the study should hold.")],
    dataset: Annotated[str | None, typer.Option("--dataset", help="LTSF dataset.")] = None,
    horizon: Annotated[int | None, typer.Option("--horizon", help="LTSF horizon.")] = None,
    env: Annotated[str | None, typer.Option("--env", help="MiniGrid env pair.")] = None,
    profile: Annotated[str, typer.Option("--profile", "-p", help="Suite profile that sets the training budget.")] = "quick",
    storage: Annotated[str | None, typer.Option("--storage", help="Optuna storage URL (default sqlite:///results/optuna.db; journal:PATH; postgresql://...).")] = None,
    study_name: Annotated[str | None, typer.Option("--study-name", help="Study name; the same name resumes the study.")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="Seconds after which each worker stops starting trials.")] = None,
    pruner: Annotated[str, typer.Option("--pruner", help="median | hyperband | none")] = "median",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the TPE sampler and of every trial's training.")] = 0,
    tune_lr: Annotated[bool, typer.Option("--tune-lr", help="Also tune the learning rate and the RSA parameters' factor on it (rsa_lr_factor).")] = False,
    enqueue_paper: Annotated[bool, typer.Option("--enqueue-paper", help="Evaluate the profile's (paper's Table 5) head layout as the first trial.")] = False,
    best_out: Annotated[str | None, typer.Option("--best-out", help="Write the best configuration as a suite YAML that `recurbench run SUITE --config FILE --profile tuned` accepts.")] = None,
    config: Annotated[str | None, typer.Option("--config", help="A suite YAML to use instead of the shipped one.")] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a profile setting for every trial, e.g. --set training.epochs=3 (repeatable)."),
    ] = None,
    tracking_uri: TrackingOpt = None,
    data_dir: DataDirOpt = None,
    device: DeviceOpt = None,
    engine: EngineOpt = "serial",
    workers: WorkersOpt = None,
    address: AddressOpt = None,
    cpus_per_run: CpusPerRunOpt = 1.0,
    gpus_per_run: GpusPerRunOpt = 0.0,
) -> None:
    """Optuna studies over REM head counts, dilations and gate initialisation; resumable, on Ray workers."""
    from recurbench.devices import describe_device
    from recurbench.engine import check_cluster_store
    from recurbench.suites.runner import SUITES
    from recurbench.tracking import make_tracker, resolve_tracking_uri
    from recurbench.tuning.objectives import LTSFObjective, MinigridObjective, write_best_profile
    from recurbench.tuning.study import (
        DEFAULT_STORAGE,
        StudySpec,
        default_study_name,
        load_study,
        run_study,
        settings_digest,
    )

    objective: LTSFObjective | MinigridObjective
    settings = tuple(overrides or ())
    if suite not in ("ltsf", "minigrid"):
        raise RecurbenchError(f"unknown suite {suite!r} for tune; choose ltsf or minigrid")
    engine_spec = _engine(engine, workers, address, cpus_per_run, gpus_per_run)
    check_cluster_store(engine_spec, resolve_tracking_uri(tracking_uri))
    check_cluster_store(engine_spec, storage or DEFAULT_STORAGE, "Optuna storage")
    if engine_spec.kind == "ray":
        if not gpus_per_run and device not in (None, "auto", "cpu"):
            raise RecurbenchError(f"--device {device} with --engine ray needs --gpus-per-run (Ray hides the GPUs "
                                  "from a task that reserves none)")
        device = "cpu"  # a task given GPUs trains on the one Ray assigned (recurbench.engine.task_device)
    target_device = SUITES[suite]().target_device(device)
    if suite == "ltsf":
        if dataset is None or horizon is None:
            raise RecurbenchError("tune ltsf needs --dataset and --horizon")
        objective = LTSFObjective(model, dataset, horizon, profile, data_dir, tune_lr, seed, config, settings,
                                  device=str(target_device))
        target = [dataset, str(horizon)]
        tags = {"dataset": dataset, "horizon": str(horizon)}
    else:
        if env is None:
            raise RecurbenchError("tune minigrid needs --env (a pair from `recurbench list envs`)")
        objective = MinigridObjective(model, env, profile, seed, config=config, overrides=settings,
                                      device=str(target_device))
        target, tags = [env], {"env": env}
    objective.job  # noqa: B018 - resolve (and validate) the suite job before any worker starts
    spec = StudySpec(
        study_name=study_name or default_study_name(suite, model, *target, profile, settings_digest(config, settings)),
        n_trials=trials, storage=storage, timeout=timeout, seed=seed, pruner=pruner,
        tags={"suite": suite, "profile": profile, "model": model, **tags,
              "device": describe_device(target_device) if not gpus_per_run else f"ray ({gpus_per_run:g} GPU per run)"},
    )
    tracker = make_tracker(tracking_uri)
    tracker.open()  # a bad tracking URI fails before the Optuna storage is created
    if enqueue_paper and isinstance(objective, LTSFObjective):
        study = load_study(spec, objective.direction)
        params = objective.paper_params()
        if params is None:
            err_console.print("[yellow]the profile's head layout uses a dilation outside the candidates; not enqueued[/yellow]")
        elif not study.get_trials(deepcopy=False):
            study.enqueue_trial(params, user_attrs={"paper_configuration": True})
    with console.status(f"study {escape(spec.study_name)}: {trials} trials ({engine_spec.kind} engine)"):
        result = run_study(spec, objective, tracker, engine_spec)
    console.print(_table(f"study {result.study_name}", ["key", "value"], [
        ["storage", result.storage], ["trials", json.dumps(result.counts)], ["best trial", result.best_trial],
        ["best " + ("validation loss" if suite == "ltsf" else "training-env reward"), result.best_value],
        ["best params", json.dumps(result.best_params)],
        ["stale trials failed and retried", result.recovered], ["MLflow parent run", result.parent_run_id],
    ]))
    if best_out and result.best_trial is not None:
        study = load_study(spec, objective.direction)
        write_best_profile(objective, study.best_trial, best_out)
        console.print(escape(f"best configuration written to {best_out}: recurbench run {suite} --config {best_out} --profile tuned"))


@app.command("compare")
def compare_cmd(
    suite: Annotated[str, typer.Argument(help="Suite whose runs to compare: ltsf | minigrid | langs | memory.")],
    experiment: Annotated[str | None, typer.Option("--experiment", help="MLflow experiment (default: recurbench-SUITE).")] = None,
    reference: Annotated[str, typer.Option("--reference", help="paper: the published values beside ours; none: ours only.")] = "paper",
    fmt: Annotated[str, typer.Option("--format", help="table | markdown | csv | latex")] = "table",
    by: Annotated[list[str] | None, typer.Option("--by", help="Group by these tags or logged params instead of the suite's layout, e.g. dataset,horizon,model,training.rsa_lr_factor (comma-separated or repeated).")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Runs of this profile (default: the latest invocation's; 'all' pools every profile).")] = None,
    settings: SettingsOpt = "shipped",
    tracking_uri: TrackingOpt = None,
) -> None:
    """Finished runs aggregated over seeds (mean ± std, n), beside the papers' tables; failed runs listed."""
    from recurbench.errors import ConfigError
    from recurbench.reporting import FORMATS, compare, render, rich_tables

    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    result = compare(suite, tracking_uri=tracking_uri, experiment=experiment, reference=reference, by=_split_csv(by),
                     profile=profile, settings=settings)
    if fmt == "table":
        for item in rich_tables(result):
            console.print(item)
    else:
        typer.echo(render(result, fmt), nl=False)
        if fmt == "csv" and len(unresolved := result.unresolved):  # keep stdout parseable; say what is not in it
            err_console.print(escape(f"{len(unresolved)} run(s) did not finish: {', '.join(unresolved['name'])}"))


@app.command("report")
def report_cmd(
    suite: Annotated[str, typer.Argument(help="Suite whose runs to report: ltsf | minigrid | langs | memory.")],
    out: Annotated[str, typer.Option("--out", help="Folder to write the report and its figures into.")],
    fmt: Annotated[str, typer.Option("--format", help="html (one self-contained file) | markdown (report.md + PNGs)")] = "html",
    experiment: Annotated[str | None, typer.Option("--experiment", help="MLflow experiment (default: recurbench-SUITE).")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Runs of this profile (default: the latest invocation's).")] = None,
    no_log: Annotated[bool, typer.Option("--no-log", help="Do not log the figures to the latest parent run.")] = False,
    settings: SettingsOpt = "shipped",
    tracking_uri: TrackingOpt = None,
) -> None:
    """A report with learning/loss curves, REM gates and heatmaps, forecasts and comparison tables."""
    from recurbench.reporting import write_report

    with console.status(f"building the {suite} report"):
        report = write_report(
            suite, out, tracking_uri=tracking_uri, experiment=experiment, profile=profile, fmt=fmt,
            log_to_mlflow=not no_log, settings=settings,
        )
    console.print(escape(f"report: {report.path} ({len(report.figures)} figures)"))
    for reason in report.omitted:
        console.print(f"[dim]left out: {escape(str(reason))}[/dim]")
    if report.logged_to_run:
        console.print(f"figures logged to MLflow parent run {report.logged_to_run} (artifacts/report)")


@bench_app.command("rem")
def bench_rem_cmd(
    seq_len: Annotated[int, typer.Option("--seq-len", help="Sequence length T.")] = 4096,
    heads: Annotated[int, typer.Option("--heads", help="Heads H (cycling through the six REM types).")] = 8,
    head_dim: Annotated[int, typer.Option("--head-dim", help="Head dimension D.")] = 64,
    batch: Annotated[int, typer.Option("--batch", help="Batch size B.")] = 4,
    masked: Annotated[bool, typer.Option("--masked/--unmasked", help="Masked (causal) or bidirectional REMs.")] = False,
    sweep: Annotated[bool, typer.Option("--sweep", help="Also run T = 512, 1024, 2048, 4096, 8192.")] = False,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed repetitions (median).")] = 3,
    threads: Annotated[int, typer.Option("--threads", help="torch CPU threads.")] = 2,
    device: BenchDeviceOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """REM operator: dense (paper, App. D.1) vs the default path (chunked on CPU, Triton on CUDA)."""
    from recurbench.kernels.rem.bench import bench_rem, bench_rem_sweep

    _at_least(1, seq_len=seq_len, heads=heads, head_dim=head_dim, batch=batch, repeats=repeats, threads=threads)
    kw = dict(heads=heads, head_dim=head_dim, batch=batch, masked=masked, repeats=repeats, threads=threads,
              device=device)
    result: dict[str, Any] = bench_rem(seq_len, **kw)
    if sweep:
        result = {"main": result, "sweep": bench_rem_sweep(**kw)}
    if as_json:
        return _print_json(result)
    rows = [result] if not sweep else [result["main"], *result["sweep"]["rows"]]
    cols = ["seq_len", "max_abs_err", "time_dense_fwd_bwd_s", "time_default_fwd_bwd_s", "speedup_fwd_bwd",
            "minor_page_faults_fwd_bwd", "peak_mem_dense_bytes", "peak_mem_default_bytes", "peak_mem_ratio",
            "effective_bandwidth_fwd_gbps", "bandwidth_vs_copy", "bandwidth_vs_hbm_peak"]
    fmt = lambda x: f"{x:.4g}" if isinstance(x, float) else ("-" if x is None else x)  # noqa: E731
    console.print(_table(f"REM operator, H={heads} D={head_dim} B={batch} ({rows[0]['device']}, "
                         f"{rows[0]['default_impl']})", cols, [[fmt(r.get(c)) for c in cols] for r in rows]))


@bench_app.command("rsa")
def bench_rsa_cmd(
    seq_len: Annotated[int, typer.Option("--seq-len", help="Sequence length (Informer encoder: 96).")] = 96,
    heads: Annotated[int, typer.Option("--heads", help="Heads.")] = 8,
    head_dim: Annotated[int, typer.Option("--head-dim", help="Head dimension (d_model = heads x head_dim).")] = 64,
    batch: Annotated[int, typer.Option("--batch", help="Batch size.")] = 32,
    k1_k6: Annotated[str, typer.Option("--k", help="REM head counts k1..k6 (Table 5 notation).")] = "(0,2,2,0,2,2)",
    dilations: Annotated[str, typer.Option("--dilations", help="Dilations of the dilated heads, or '-'.")] = "[24,24,24,24]",
    causal: Annotated[bool, typer.Option("--causal", help="Masked (decoder) self-attention.")] = False,
    attention: Annotated[
        str, typer.Option("--attention", help="Baseline layer: full (softmax attention) or prob (Informer's ProbSparse).")
    ] = "full",
    impl: Annotated[
        str | None, typer.Option("--impl", help="REM path: naive, chunked or triton (default: the device's default).")
    ] = None,
    repeats: Annotated[
        int, typer.Option("--repeats", help="Timed pairs of training steps (baseline and RSA, alternating order).")
    ] = 30,
    threads: Annotated[int, typer.Option("--threads", help="torch CPU threads.")] = 2,
    device: BenchDeviceOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """Training-step overhead of an RSA attention layer over the same layer without REMs."""
    from recurbench.kernels.rem import IMPLS
    from recurbench.kernels.rem.bench import BASELINE_ATTENTIONS, bench_rsa

    if impl is not None and impl not in IMPLS:
        raise RecurbenchError(f"--impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    if attention not in BASELINE_ATTENTIONS:
        raise RecurbenchError(f"--attention must be one of {', '.join(BASELINE_ATTENTIONS)}, got {attention!r}")
    _at_least(1, seq_len=seq_len, heads=heads, head_dim=head_dim, batch=batch, repeats=repeats, threads=threads)
    from recurbench.errors import ConfigError
    from recurbench.forecasters.layers.rsa import REMHeadConfig

    if (filled := REMHeadConfig.from_table5(k1_k6, dilations).n_heads) != heads:
        raise ConfigError(f"--k {k1_k6} fills {filled} heads, but --heads is {heads}: give --k and --dilations for {heads} heads")
    result = bench_rsa(seq_len, heads, head_dim, batch, k1_k6=k1_k6, dilations=dilations, causal=causal,
                       attention=attention, impl=impl, pairs=repeats, threads=threads, device=device)
    if as_json:
        return _print_json(result)
    console.print(_table("RSA layer training step", ["field", "value"], [[k, v] for k, v in result.items()]))


@bench_app.command("forecast")
def bench_forecast_cmd(
    model: Annotated[str, typer.Option("--model", help="Forecaster (see `recurbench list models`).")] = "informer",
    dataset: Annotated[str, typer.Option("--dataset", help="Dataset with paper settings in the ltsf suite.")] = "ETTh1",
    horizon: Annotated[int, typer.Option("--horizon", help="Forecast horizon (paper settings of the ltsf suite).")] = 24,
    max_batches: Annotated[
        int | None,
        typer.Option("--max-batches", help="Time only this many batches and extrapolate linearly to a full epoch."),
    ] = None,
    threads: Annotated[int, typer.Option("--threads", help="torch intra-op threads (1 is fastest on a shared CPU).")] = 1,
    json_out: JsonOpt = False,
    data_dir: DataDirOpt = None,
    device: BenchDeviceOpt = "auto",
) -> None:
    """Seconds per training epoch of Informer on ETTh1 (paper settings: batch 32, d_model 512)."""
    from recurbench.forecasters.bench import bench_forecast

    _at_least(1, max_batches=max_batches, threads=threads)
    result = bench_forecast(
        model=model, dataset=dataset, horizon=horizon, max_batches=max_batches, threads=threads, data_dir=data_dir,
        device=device,
    )
    if json_out:
        _print_json(result)
        return
    rows = [[k, f"{v:.4g}" if isinstance(v, float) else str(v)] for k, v in result.items()]
    console.print(_table("bench forecast", ["quantity", "value"], rows))


@bench_app.command("kernels")
def bench_kernels_cmd(
    arch: Annotated[str, typer.Option("--arch", help="CUDA architectures, comma-separated: 80 (A100), 90 (H100/H200).")] = "80,90",
    as_json: JsonOpt = False,
) -> None:
    """Registers, spills, shared memory and occupancy of every Triton kernel configuration, compiled
    ahead of time (no GPU needed)."""
    from dataclasses import asdict

    from recurbench.kernels.compile import kernel_resources

    try:
        archs = [int(a.removeprefix("sm_")) for a in _split_csv([arch]) or []]
    except ValueError:
        raise RecurbenchError(f"--arch takes numbers such as 80,90, got {arch!r}") from None
    with console.status("compiling") as status:
        rows = kernel_resources(archs, progress=lambda done, total: status.update(f"compiling {done}/{total}"))
    if as_json:
        _print_json([asdict(r) for r in rows])
    else:
        fmt = lambda x, spec="": "-" if x is None else format(x, spec)  # noqa: E731
        console.print(_table("Triton kernels compiled ahead of time (spills: stack + local bytes per thread)",
                             ["kernel", "configuration", "arch", "registers", "spills", "shared", "occupancy",
                              "default", "uses"],
                             [[r.kernel, r.configuration, f"sm_{r.arch}", fmt(r.registers), fmt(r.spill_bytes),
                               fmt(r.shared_bytes), fmt(r.occupancy, ".3f"), "yes" if r.default else "no",
                               len(r.workloads)] for r in rows]))
    failed = [r for r in rows if r.error]
    if failed:
        raise RecurbenchError(f"{len(failed)} configuration(s) failed to compile, first: {failed[0].kernel} "
                              f"[{failed[0].configuration}] sm_{failed[0].arch}: {failed[0].error}")


@bench_app.command("memattn")
def bench_memattn_cmd(
    windows: Annotated[list[str] | None, typer.Option("--windows", help="MemLSTM windows (slots) besides RelLSTM's 5 + 5.")] = None,
    batch: Annotated[int, typer.Option("--batch", help="Environments.")] = 16,
    attention_size: Annotated[int, typer.Option("--attention-size")] = 32,
    hidden_size: Annotated[int, typer.Option("--hidden-size")] = 64,
    steps: Annotated[int, typer.Option("--steps", help="Consecutive steps per timed run.")] = 50,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed runs (median).")] = 5,
    device: BenchDeviceOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """One memory-attention step: the fused Triton kernel (CUDA) against the PyTorch reference."""
    from recurbench.kernels.memattn.bench import MEMORIES, bench_memattn

    try:
        memories = MEMORIES if not windows else [(5, 5), *((int(w), 0) for w in _split_csv(windows) or [])]
    except ValueError:
        raise RecurbenchError(f"--windows takes numbers such as 100,2000, got {','.join(windows)!r}") from None
    _at_least(1, batch=batch, attention_size=attention_size, hidden_size=hidden_size, steps=steps, repeats=repeats,
              windows=min(nu for nu, _ in memories))
    result = bench_memattn(memories=memories, batch=batch, attention_size=attention_size, hidden_size=hidden_size,
                           steps=steps, repeats=repeats, device=device)
    if as_json:
        return _print_json(result)
    cols = ["nu", "rho", "time_reference_ms", "time_triton_ms", "speedup", "max_abs_err_read", "max_abs_err_memory"]
    fmt = lambda x: f"{x:.4g}" if isinstance(x, float) else ("-" if x is None else x)  # noqa: E731
    console.print(_table(f"memory-attention step, {batch} envs, A={attention_size} H={hidden_size} ({result['device']})",
                         cols, [[fmt(r[c]) for c in cols] for r in result["rows"]]))


@bench_app.command("rl")
def bench_rl_cmd(
    cores: Annotated[list[str] | None, typer.Option("--cores", help="Memory cores (default: all).")] = None,
    total_steps: Annotated[int, typer.Option("--total-steps", help="Env steps timed per agent (after one warm-up rollout).")] = 16384,
    env_id: Annotated[str, typer.Option("--env", help="MiniGrid env id.")] = "MiniGrid-DoorKey-5x5-v0",
    n_envs: Annotated[int, typer.Option("--n-envs")] = 8,
    n_steps: Annotated[int, typer.Option("--n-steps")] = 128,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 256,
    n_epochs: Annotated[int, typer.Option("--n-epochs")] = 4,
    hidden_size: Annotated[int, typer.Option("--hidden-size", help="LSTM width, ours and sb3-contrib's.")] = 64,
    threads: Annotated[int, typer.Option("--threads", help="torch threads.")] = 1,
    no_peer: Annotated[bool, typer.Option("--no-sb3-contrib", help="Skip sb3-contrib's RecurrentPPO.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """PPO training steps per second per memory core, next to sb3-contrib's RecurrentPPO."""
    from recurbench.agents import CORES
    from recurbench.agents.bench import BenchSettings, bench_rl
    from recurbench.config import check_names

    chosen = _split_csv(cores) or list(CORES)
    check_names(chosen, CORES, "memory core", "--cores")
    _at_least(1, total_steps=total_steps, n_envs=n_envs, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs,
              hidden_size=hidden_size, threads=threads)
    settings = BenchSettings(env_id=env_id, n_envs=n_envs, n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs,
                             total_steps=total_steps, hidden_size=hidden_size, threads=threads)
    with console.status("benchmarking") as status:
        result = bench_rl(chosen, settings, include_sb3_contrib=not no_peer,
                          progress=lambda what: status.update(f"benchmarking {what}"))
    if as_json:
        return _print_json(result)
    peer = result.get("fps_sb3_contrib")
    rows = [
        [core, f"{fps:.0f}", f"{result['ratio'][core]:.2f}x" if peer else "-", f"{result['fps_cpu'][core]:.0f}",
         f"{result['ratio_cpu'][core]:.2f}x" if peer else "-"]
        for core, fps in result["fps"].items()
    ]
    if peer:
        rows.append(["sb3-contrib RecurrentPPO (LSTM)", f"{peer:.0f}", "1.00x", f"{result['fps_sb3_contrib_cpu']:.0f}", "1.00x"])
    header = ["agent", "steps/s (wall)", "vs sb3-contrib", "steps/CPU-s", "vs sb3-contrib (CPU)"]
    console.print(_table(f"PPO training steps/s on {env_id} ({n_envs} envs x {n_steps} steps)", header, rows))


if __name__ == "__main__":
    main()
