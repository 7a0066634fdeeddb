"""``recurbench run``: a suite profile, every configuration and seed a nested MLflow run."""

from __future__ import annotations

import re
import time
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from recurbench.cli.common import (
    AddressOpt,
    CpusPerRunOpt,
    DataDirOpt,
    DeviceOpt,
    EngineOpt,
    GpusPerRunOpt,
    TrackingOpt,
    WorkersOpt,
    at_least,
    console,
    engine_spec,
    err_console,
    split_csv,
    table,
)
from recurbench.engine import check_cluster_store
from recurbench.errors import RecurbenchError
from recurbench.tables import FittedTable
from recurbench.tracking import check_store, make_tracker

_EPOCH_UNDER_WAY = re.compile(r"epoch \d+/\d+")
"""A description that only names the epoch in progress: a bar's label, said again with its results
when the epoch ends."""


class _RunProgress:
    """One rich progress bar per run on a terminal; elsewhere (nohup, a scheduler's log file) no bar
    (the caller disables it) but a time-stamped line whenever a run's description changes (an epoch
    ends, a validation check, evaluation begins), since a long run would otherwise print nothing. An
    epoch's start (``epoch 2/6``, the bar's label) is left out of the log: its end line says it again."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def __call__(self, plan: Any) -> Any:
        task = self.progress.add_task(plan.name, total=None)
        last = [""]

        def update(completed: float, total: float, description: str = "") -> None:
            text = f"{plan.name} {description}".strip()
            self.progress.update(task, completed=completed, total=total, description=text)
            if not self.progress.console.is_terminal and text != last[0] and not _EPOCH_UNDER_WAY.fullmatch(description):
                last[0] = text
                self.progress.console.print(f"{time.strftime('%H:%M:%S')} {escape(text)}", highlight=False, soft_wrap=True)

        return update


def run_cmd(
    suite: Annotated[str, typer.Argument(help="Suite name (see `recurbench list suites`).")],
    profile: Annotated[str, typer.Option("--profile", "-p", help="Profile in the suite file, e.g. quick or paper.")] = "quick",
    datasets: Annotated[list[str] | None, typer.Option("--datasets", help="LTSF: datasets to run (comma-separated or repeated).")] = None,
    horizons: Annotated[list[str] | None, typer.Option("--horizons", help="LTSF: horizons to run.")] = None,
    models: Annotated[list[str] | None, typer.Option("--models", help="Models to run: forecasters (ltsf), agent cores (minigrid), language models (langs) or cores (memory).")] = None,
    envs: Annotated[list[str] | None, typer.Option("--envs", help="MiniGrid: env pairs to run (see `recurbench list envs`).")] = None,
    pairs: Annotated[list[str] | None, typer.Option("--pair", metavar="TRAIN:TEST", help="MiniGrid: a train/test pair of gymnasium ids, TRAIN_ID:TEST_ID (repeatable).")] = None,
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
        typer.Option("--set", metavar="KEY=VALUE", help="Override a profile setting, e.g. --set training.rsa_lr_factor=100 (repeatable)."),
    ] = None,
    skip_finished: Annotated[
        bool,
        typer.Option("--skip-finished", help="Do not run again a configuration and seed that already has a FINISHED "
                     "run in the store at the same settings; its results enter the table (resumes a suite). A run "
                     "that ended FAILED or KILLED continues from its newest checkpoint where the suite saves them "
                     "(memory), and so does a run whose cap was raised (--set training.updates=...), from the "
                     "run at the lower cap."),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Check the settings and list the runs (with --skip-finished: which are "
                     "already finished); train nothing, write nothing."),
    ] = False,
    end_run: Annotated[
        list[str] | None,
        typer.Option("--end-run", help="End FAILED this RUNNING run first (repeatable): one whose driver is gone where "
                     "this machine cannot tell (another host, an older recurbench), so that --skip-finished runs it "
                     "again. A driver on this host that is gone is found without it."),
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
    """Run a suite profile; every configuration and seed becomes a nested MLflow run."""
    from recurbench.suites.registry import SUITES  # noqa: PLC0415 - every suite: torch, SB3, sktime
    from recurbench.suites.runner import describe_dry_run, run_suite  # noqa: PLC0415 - the suites, Ray when asked

    if suite not in SUITES:
        raise RecurbenchError(f"unknown suite {suite!r}; known suites: {', '.join(SUITES)}")
    selection = _selection(suite, seeds, first_seed, total_timesteps, datasets=datasets, horizons=horizons,
                           models=models, envs=envs, languages=languages, pairs=pairs, tasks=tasks, lengths=lengths)
    spec = engine_spec(engine, workers, address, cpus_per_run, gpus_per_run)
    tracker = make_tracker(tracking_uri, write=not dry_run)
    check_cluster_store(spec, tracker.tracking_uri)  # type: ignore[attr-defined]
    if not dry_run or skip_finished:
        check_store(tracker.tracking_uri, write=not dry_run)  # type: ignore[attr-defined]  # creates nothing
    if dry_run:
        result = run_suite(suite, profile, tracker, selection=selection, data_dir=data_dir, config_path=config,
                           overrides=overrides or (), device=device, skip_finished=skip_finished, dry_run=True,
                           engine=spec, end_runs=split_csv(end_run) or ())
        rows, lines = describe_dry_run(result, tracker)
        console.print(table(f"{suite} / {profile}: dry run", ["run", "seed", "status"], rows))
        for line in lines:
            console.print(escape(line))
        return
    with Progress(
        TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=not console.is_terminal,  # in a log file: the lines of _RunProgress only
    ) as progress:
        result = run_suite(
            suite, profile, tracker, selection=selection, data_dir=data_dir, config_path=config,
            overrides=overrides or (), progress_factory=_RunProgress(progress), device=device,
            skip_finished=skip_finished, engine=spec, end_runs=split_csv(end_run) or (),
        )
    header, rows = SUITES[suite]().summary_rows(result.outcomes)
    console.print(closing_table(f"{suite} / {profile}", header, rows))
    if reused := result.reused:
        console.print(escape(
            f"{len(reused)} of {len(result.outcomes)} run(s) were already finished at these settings and were not "
            f"run again (--skip-finished); the table includes them: "
            + ", ".join(f"{o.plan.name} ({o.run_id})" for o in reused[:5]) + (", ..." if len(reused) > 5 else "")
        ))
    if elsewhere := result.elsewhere:
        console.print(escape(
            f"{len(elsewhere)} run(s) are running in another driver and were left to it (--skip-finished): "
            + ", ".join(f"{o.plan.name} (run {o.run_id}; {o.owner})" for o in elsewhere[:5])
            + (", ..." if len(elsewhere) > 5 else "") + "; once it ends, `--skip-finished` again shows the whole table"
        ))
    if result.stale:
        err_console.print(escape(
            f"ended FAILED: {len(result.stale)} run(s) of these configurations left RUNNING by a driver on this host "
            f"that is gone (killed outright): {', '.join(result.stale[:5])}" + (", ..." if len(result.stale) > 5 else "")
        ))
    if resumed := [o for o in result.outcomes if o.resumed_from]:
        console.print(escape(
            f"{len(resumed)} run(s) continued from the checkpoint of an earlier run that ended FAILED or KILLED, "
            "or of the same run at another cap (--skip-finished): "
            + ", ".join(f"{o.plan.name} (run {o.run_id}: from run {o.resumed_from} at step {o.resumed_at:,})"
                        for o in resumed[:5])
            + (", ..." if len(resumed) > 5 else "")
        ))
    for note in (note for o in result.outcomes for note in o.notes):
        err_console.print(escape(note))
    if result.parent_run_id is not None:
        console.print(f"MLflow parent run: {result.parent_run_id}")
    if result.failed:
        for o in result.failed:
            err_console.print(f"[red]FAILED[/red] {escape(o.plan.name)}: {escape(str(o.error))}")
        raise typer.Exit(1)


SEEDS_LEGEND = "seeds n/m: n runs finished of the m planned (one per seed)"


def closing_table(title: str, header: list[str], rows: list[list[str]]) -> FittedTable:
    """``run``'s closing table, made to fit a terminal of 80 columns or more.

    A footnote row (text in the first cell only) becomes a line of the caption, under the table and
    wrapped to its width, after a legend for the ``seeds`` column. The columns that name a row (those
    before ``seeds``) and hold one value in every row (``dataset ETTh1``, ``horizon 24`` when only they
    ran) move into the title, which leaves room for the columns that differ; the rest is laid out by
    :class:`~recurbench.tables.FittedTable` (cells wrap; a table still too wide is split, each part led
    by the naming columns)."""
    notes = [row[0] for row in rows if not any(row[1:])]
    body = [row for row in rows if any(row[1:])]
    naming = next((i for i, h in enumerate(header) if h.startswith("seeds")), 0)
    shared = [i for i in range(naming) if len(body) > 1 and len({row[i] for row in body}) == 1]
    if len(shared) == naming:  # keep one column to name the rows by
        shared = shared[:-1]
    if shared:
        title += ": " + ", ".join(f"{header[i]} {body[0][i]}" for i in shared)
    if naming:
        notes.insert(0, SEEDS_LEGEND)
    kept = [i for i in range(len(header)) if i not in shared]
    return FittedTable(title, [header[i] for i in kept], [[row[i] for i in kept] for row in body],
                       caption="\n".join(notes) or None, keys=naming - len(shared))


#: The command line's option behind each ``selection`` key a suite may read.
_SELECTION_OPTIONS = {"datasets": "--datasets", "horizons": "--horizons", "models": "--models", "envs": "--envs",
                      "pairs": "--pair", "languages": "--languages", "tasks": "--tasks", "lengths": "--lengths",
                      "total_timesteps": "--total-timesteps"}


def _selection(suite: str, seeds: int | None, first_seed: int, total_timesteps: int | None,
               **names: list[str] | None) -> dict[str, Any]:
    """The command line's choices as the runner's ``selection`` (names split on commas, numbers checked);
    an option the suite does not read (:attr:`~recurbench.suites.base.SuiteDefinition.selection_keys`)
    is refused, naming the suites it applies to."""
    from recurbench.suites.registry import SUITES  # noqa: PLC0415 - every suite: torch, SB3, sktime

    selection: dict[str, Any] = {}
    for key, value in names.items():
        if (items := split_csv(value)) is not None:
            selection[key] = items
    at_least(1, seeds=seeds)
    at_least(0, first_seed=first_seed)
    if seeds is not None:
        selection["seeds"] = seeds
    if first_seed:
        selection["first_seed"] = first_seed
    if total_timesteps is not None:
        at_least(1, total_timesteps=total_timesteps)
        selection["total_timesteps"] = total_timesteps
    reads = SUITES[suite].selection_keys
    for key in [k for k in selection if reads is not None and k not in (*reads, "seeds", "first_seed")][:1]:
        takers = [name for name in SUITES if key in (SUITES[name].selection_keys or ())]
        where = f"the {' and '.join(takers)} suite{'s' if len(takers) > 1 else ''}" if takers else "no suite"
        raise RecurbenchError(f"{_SELECTION_OPTIONS.get(key, key)} applies to {where}, not {suite!r}")
    return selection
