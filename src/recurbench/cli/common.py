"""What the commands share: the Typer apps, the consoles, the common options and the table helpers."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from recurbench.engine import EngineSpec
from recurbench.errors import RecurbenchError

app = typer.Typer(
    name="recurbench",
    help="Benchmarks that untangle recurrence and self-attention: RL agents, LTSF forecasters, regular "
         "languages and memory tasks.",
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


def engine_spec(engine: str, workers: int | None, address: str | None, cpus_per_run: float,
                gpus_per_run: float) -> EngineSpec:
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


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str))


def table(title: str, header: list[str], rows: list[list[Any]]) -> Table:
    """A rich table of plain text: names and values are never read as rich markup (``[informer]``
    would vanish); a :class:`rich.text.Text` cell keeps its style."""
    table = Table(title=escape(title))
    for name in header:
        table.add_column(escape(str(name)))
    for row in rows:
        table.add_row(*(cell if isinstance(cell, Text) else escape(str(cell)) for cell in row))
    return table


def at_least(minimum: int, **options: int | None) -> None:
    """Refuse a numeric option below ``minimum`` by its flag (``seq_len`` is ``--seq-len``); None = not given."""
    for name, value in options.items():
        if value is not None and value < minimum:
            raise RecurbenchError(f"--{name.replace('_', '-')} must be at least {minimum}, got {value}")


def split_csv(values: list[str] | None) -> list[str] | None:
    """Options given as repeated flags and/or comma-separated lists."""
    if not values:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]
