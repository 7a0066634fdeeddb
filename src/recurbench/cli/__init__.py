"""The recurbench command line: thin command modules that parse arguments, call one library function
and print. Errors on bad input (``RecurbenchError``) are printed as one line and exit with code 1; a
stop by SIGTERM or Ctrl-C ends the runs in progress KILLED, says so in one line and exits 128 + the
signal's number (143, 130).

Library imports sit inside the commands (``# noqa: PLC0415`` with the reason): they pull in torch,
MLflow, sktime or SB3 (seconds), and ``recurbench --help`` or a mistyped option should answer at once.

=============  ==========================================
command        module
=============  ==========================================
list           :mod:`recurbench.cli.listing`
data ...       :mod:`recurbench.cli.data`
run            :mod:`recurbench.cli.run`
tune           :mod:`recurbench.cli.tune`
compare/report :mod:`recurbench.cli.results`
bench ...      :mod:`recurbench.cli.bench`
=============  ==========================================
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import warnings
from typing import NoReturn

import typer
from rich.markup import escape
from typer.rich_utils import rich_format_error

from recurbench.cli import bench, data, listing, results, run, tune
from recurbench.cli.common import Command, app, bench_app, console, data_app, err_console
from recurbench.errors import DataWarning, RecurbenchError
from recurbench.runtime import handle_termination, stop_signal, tune_allocator

app.command("list", cls=Command)(listing.list_cmd)
data_app.command("list", cls=Command)(data.data_list)
data_app.command("verify", cls=Command)(data.data_verify)
data_app.command("fetch", cls=Command)(data.data_fetch)
data_app.command("info", cls=Command)(data.data_info)
app.command("run", cls=Command)(run.run_cmd)
app.command("tune", cls=Command)(tune.tune_cmd)
app.command("compare", cls=Command)(results.compare_cmd)
app.command("report", cls=Command)(results.report_cmd)
bench_app.command("rem", cls=Command)(bench.bench_rem_cmd)
bench_app.command("rsa", cls=Command)(bench.bench_rsa_cmd)
bench_app.command("forecast", cls=Command)(bench.bench_forecast_cmd)
bench_app.command("kernels", cls=Command)(bench.bench_kernels_cmd)
bench_app.command("memattn", cls=Command)(bench.bench_memattn_cmd)
bench_app.command("rl", cls=Command)(bench.bench_rl_cmd)
bench_app.command("langs", cls=Command)(bench.bench_langs_cmd)
bench_app.command("memory", cls=Command)(bench.bench_memory_cmd)


def main() -> None:
    """Console entry point: user errors become one message and a non-zero exit code.

    SIGTERM (a scheduler's or ``timeout``'s stop) unwinds like Ctrl-C, so the MLflow runs in progress
    are ended KILLED instead of being left RUNNING (:func:`recurbench.runtime.handle_termination`).
    glibc's allocator is tuned first (:func:`recurbench.runtime.tune_allocator`;
    ``RECURBENCH_MALLOC=default`` keeps its defaults)."""
    handle_termination()
    tune_allocator()  # keeps freed tensor memory in the process: no page faults per training step
    _show_data_warnings()
    # MLflow announces at INFO that it creates a new store's tables ("Creating initial MLflow database
    # tables..."): noise on a first run. Its warnings and errors still print.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    # Off a terminal (a log file, a pipe) rich wraps to 80 columns unless $COLUMNS says otherwise, which
    # folds the result tables into unreadable narrow columns; a log file has no width to respect.
    for out in (console, err_console):
        if not out.is_terminal and "COLUMNS" not in os.environ:
            out.width = 160
    try:
        code = app(standalone_mode=False)  # click returns the exit code of --help and the like
    except RecurbenchError as exc:
        # soft_wrap: one line, as written (a terminal folds it; a log file keeps it whole for grep)
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except (KeyboardInterrupt, SystemExit, Exception) as exc:
        _exit(exc)
    if (signum := stop_signal()) is not None:  # Typer turns the KeyboardInterrupt into code 130, whatever the signal
        _stopped(signum)
    if isinstance(code, int) and code:
        sys.exit(code)


def _exit(exc: BaseException) -> None:
    """Typer's own exits and usage errors as Typer prints them; a stop by a signal as one line and
    128 + its number (the shell's convention); anything else is a bug and keeps its traceback."""
    signum = stop_signal()
    if signum is not None or isinstance(exc, (KeyboardInterrupt, typer.Abort)):
        _stopped(signum or signal.SIGINT)
    if isinstance(exc, typer.Exit):
        sys.exit(exc.exit_code)
    if isinstance(exc, typer.TyperException) and hasattr(exc, "exit_code"):
        rich_format_error(exc)  # a usage error: "No such option", a missing argument
        sys.exit(exc.exit_code)
    raise exc


def _stopped(signum: int) -> NoReturn:
    # A tracking server that stopped answering could not be told: its runs are left RUNNING (its client
    # said so). The tracking module is only looked up, not imported: a command that never opened a store has none.
    tracking = sys.modules.get("recurbench.tracking")
    lost = list(getattr(getattr(tracking, "ServerClient", None), "lost", []))
    what = lost[-1] if lost else "any runs in progress were ended KILLED"
    err_console.print(f"stopped by {signal.Signals(signum).name}: {what}", highlight=False)
    sys.exit(128 + signum)


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


__all__ = ["app", "main"]
