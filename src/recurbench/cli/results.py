"""``recurbench compare`` and ``recurbench report``: stored runs beside the papers' tables."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from recurbench.cli.common import (
    SettingsOpt,
    TrackingOpt,
    console,
    err_console,
    split_csv,
)
from recurbench.errors import ConfigError


def compare_cmd(
    suite: Annotated[str, typer.Argument(help="Suite whose runs to compare: ltsf | minigrid | langs | memory, or a plugin suite.")],
    experiment: Annotated[str | None, typer.Option("--experiment", help="MLflow experiment (default: recurbench-SUITE).")] = None,
    reference: Annotated[str, typer.Option("--reference", help="paper: the published values beside ours; none: ours only.")] = "paper",
    fmt: Annotated[str, typer.Option("--format", help="table | markdown | csv | latex")] = "table",
    by: Annotated[list[str] | None, typer.Option("--by", help="Group by these tags or logged params instead of the suite's layout, e.g. dataset,horizon,model,network.d_model (comma-separated or repeated).")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Runs of this profile (default: the latest invocation's; 'all' pools every profile).")] = None,
    settings: SettingsOpt = "shipped",
    tracking_uri: TrackingOpt = None,
) -> None:
    """Finished runs aggregated over seeds (mean ± std, n), beside the papers' tables; failed runs listed."""
    from recurbench.reporting.by_suite import compare  # noqa: PLC0415 - pandas, MLflow, the suites
    from recurbench.reporting.render import FORMATS, render, rich_tables  # noqa: PLC0415 - pandas

    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    result = compare(suite, tracking_uri=tracking_uri, experiment=experiment, reference=reference, by=split_csv(by),
                     profile=profile, settings=settings)
    if fmt == "table":
        for item in rich_tables(result):
            console.print(item)
    else:
        typer.echo(render(result, fmt), nl=False)
        if fmt == "csv" and len(unresolved := result.unresolved):  # keep stdout parseable; say what is not in it
            err_console.print(escape(f"{len(unresolved)} run(s) did not finish: {', '.join(unresolved['name'])}"))


def report_cmd(
    suite: Annotated[str, typer.Argument(help="Suite whose runs to report: ltsf | minigrid | langs | memory, or a plugin suite.")],
    out: Annotated[str, typer.Option("--out", help="Folder to write the report and its figures into.")],
    fmt: Annotated[str, typer.Option("--format", help="html (one self-contained file, figures embedded; their PNGs also in figures/) | markdown (report.md + figures/*.png)")] = "html",
    experiment: Annotated[str | None, typer.Option("--experiment", help="MLflow experiment (default: recurbench-SUITE).")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Runs of this profile (default: the latest invocation's).")] = None,
    no_log: Annotated[bool, typer.Option("--no-log", help="Do not log the figures to the latest parent run.")] = False,
    settings: SettingsOpt = "shipped",
    tracking_uri: TrackingOpt = None,
) -> None:
    """A report with learning/loss curves, REM gates and heatmaps, forecasts and comparison tables."""
    from recurbench.reporting.by_suite import write_report  # noqa: PLC0415 - matplotlib, MLflow, the suites

    with console.status(f"building the {suite} report"):
        report = write_report(
            suite, out, tracking_uri=tracking_uri, experiment=experiment, profile=profile, fmt=fmt,
            log_to_mlflow=not no_log, settings=settings,
        )
    console.print(escape(f"report: {report.path} ({len(report.figures)} figures)"))
    for reason in report.omitted:
        console.print(f"[dim]left out: {escape(str(reason))}[/dim]")
    if stale := report.stale:
        shown = ", ".join(stale[:3]) + (f" and {len(stale) - 3} more" if len(stale) > 3 else "")
        console.print(escape(f"{report.path.parent / 'figures'} also holds {len(stale)} file(s) this report did not "
                             f"draw, left as they are (an earlier report's?): {shown}"))
    if report.logged_to_run:
        console.print(f"figures logged to MLflow parent run {report.logged_to_run} (artifacts/report)")
