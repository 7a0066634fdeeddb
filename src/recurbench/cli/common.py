"""What the commands share: the Typer apps, the consoles, the common options and the table helpers."""

from __future__ import annotations

import inspect
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from recurbench.engine import EngineSpec
from recurbench.errors import RecurbenchError
from recurbench.tables import FittedTable


class Command(TyperCommand):
    """A command whose ``--help`` reads as words: an option that takes a value shows its own name as the
    metavar (``--seeds SEEDS``, ``--tracking-uri TRACKING_URI``) rather than Typer's ``<int>`` or
    ``<list[str]>``, a flag shows none (not ``<bool>``), and an argument reads ``SUITE`` (not ``{suite}``
    and ``<str>``). An option given its own ``metavar`` keeps it (``--set KEY=VALUE``). Its text is the
    docstring's paragraphs as prose: a line the docstring wraps at the source's width does not break the
    help there (Typer's rich help keeps every newline)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.help:
            self.help = "\n\n".join(" ".join(line.strip() for line in paragraph.splitlines())
                                     for paragraph in inspect.cleandoc(self.help).split("\n\n"))
        for param in self.params:
            _name_metavar(param)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            _name_metavar(option)
        return option

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        # Typer >= 0.2x writes a required argument as {NAME}; the usage line reads NAME, as click wrote it.
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in super().collect_usage_pieces(ctx)]


class Group(TyperGroup):
    """A command group whose ``--help`` option shows no ``<bool>`` (see :class:`Command`)."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            _name_metavar(option)
        return option


def _name_metavar(param: Any) -> None:
    if param.metavar is not None or param.name is None:
        return
    if getattr(param, "is_flag", False) or getattr(param, "is_bool_flag", False):
        param.metavar = ""
        return
    long = next((o for o in param.opts if o.startswith("--")), None)
    param.metavar = (long.lstrip("-") if long else param.name).upper().replace("-", "_")
    if long is None and not any(o.startswith("-") for o in param.opts) and hasattr(param, "display_type_rich"):
        param.display_type_rich = lambda ctx: None  # an argument: its name says what it takes, not <str>


app = typer.Typer(
    cls=Group,
    name="recurbench",
    help="Benchmarks that untangle recurrence and self-attention: RL agents, LTSF forecasters, regular "
         "languages and memory tasks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
data_app = typer.Typer(cls=Group, help="Datasets: list, verify checksums, fetch, info (splits and windows under the LTSF protocol).", no_args_is_help=True)
bench_app = typer.Typer(cls=Group, help="Performance benchmarks (kernels, layers, training throughput).", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(bench_app, name="bench")

# emoji=False: a user's value such as `chrono:abc` or `:smile:` is printed as typed, not as an emoji.
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

DataDirOpt = Annotated[
    str | None,
    typer.Option("--data-dir", help="Folder with the dataset files (before $RECURBENCH_DATA and the user cache)."),
]
TrackingOpt = Annotated[
    str | None,
    typer.Option("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///results/mlflow.db)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
_DEVICE_HELP = ("Where to train: auto (a CUDA GPU when one is visible, else the CPU), cpu, cuda, cuda:N or mps. "
                "Default: auto for ltsf; cpu for {small} (small networks stepped one batch or one time step at a "
                "time: a GPU mostly waits on launches).")
DeviceOpt = Annotated[
    str | None, typer.Option("--device", help=_DEVICE_HELP.format(small="minigrid, langs and memory")),
]
TuneDeviceOpt = Annotated[str | None, typer.Option("--device", help=_DEVICE_HELP.format(small="minigrid"))]
"""``tune``'s ``--device``: it tunes ltsf and minigrid only."""

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
    typer.Option("--address", help="Ray: the cluster to attach to, HOST:PORT or ray://HOST:PORT (default: a local "
                 "instance of this command's own; $RAY_ADDRESS is not read: --address \"$RAY_ADDRESS\" attaches there)."),
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


def table(title: str, header: list[str], rows: list[list[Any]], *, caption: str | None = None,
          keys: int = 0) -> FittedTable:
    """A table of plain text that fits the terminal it is printed on (:class:`recurbench.tables.FittedTable`:
    cells wrap at spaces, names and numbers stay whole); ``caption`` (a legend) prints under it; the
    first ``keys`` columns name a row and lead each part where a wide table is split."""
    return FittedTable(title, header, rows, caption=caption, keys=keys)


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
