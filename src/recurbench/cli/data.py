"""``recurbench data``: list, verify, fetch and describe the datasets."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text

from recurbench.cli.common import (
    DataDirOpt,
    JsonOpt,
    console,
    print_json,
    table,
)
from recurbench.errors import DataError


def data_list(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """Registered datasets and where (if anywhere) their files were found; a --data-dir that does not
    exist is an error, as in `data verify` and `run`."""
    from recurbench.data import DATASETS, locate  # noqa: PLC0415 - torch, pandas
    from recurbench.data.registry import check_data_dir  # noqa: PLC0415 - torch, pandas

    check_data_dir(data_dir)
    items = []
    for name in DATASETS:
        try:
            path: str | None = str(locate(name, data_dir))
        except DataError:
            path = None
        items.append({"name": name, "path": path})
    if as_json:
        return print_json(items)
    console.print(table("datasets", ["name", "path"], [[i["name"], i["path"] or Text("missing", style="red")] for i in items]))


def data_verify(
    names: Annotated[list[str] | None, typer.Argument(help="Datasets to check (default: all).")] = None,
    data_dir: DataDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check each dataset file's sha256 against the registry; exit 1 if any is missing or differs."""
    from recurbench.data import verify  # noqa: PLC0415 - torch, pandas
    from recurbench.data.registry import (  # noqa: PLC0415 - torch, pandas
        check_data_dir,
        get_spec,
        not_found_message,
        search_dirs,
    )

    check_data_dir(data_dir)  # one error, not a table of datasets all "missing"
    results = verify(names, data_dir)
    if as_json:
        print_json([{**r.__dict__, "path": str(r.path) if r.path else None} for r in results])
    else:
        colour = {"ok": "green", "mismatch": "red", "missing": "yellow"}
        # A missing file's message lists the folders searched and how to get it: the error below prints it whole.
        detail = {"ok": "", "missing": "not found (see below)"}
        rows = [[r.name, Text(r.status, style=colour[r.status]), r.path or "-", detail.get(r.status, r.message)]
                for r in results]
        console.print(table("sha256 verification", ["name", "status", "path", "detail"], rows))
    missing = [get_spec(r.name) for r in results if r.status == "missing"]
    bad = [r.message for r in results if r.status == "mismatch"]
    if missing:
        bad.append(not_found_message(list(dict.fromkeys(missing)), search_dirs(data_dir)))
    if bad:
        raise DataError("\n".join(bad))


def data_fetch(
    names: Annotated[list[str] | None, typer.Argument(help="Datasets to download (default: all with a URL).")] = None,
    data_dir: DataDirOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Download again even if a good file exists.")] = False,
) -> None:
    """Download datasets (to --data-dir, else $RECURBENCH_DATA, else the user cache), verified by sha256."""
    from recurbench.data import DATASETS, fetch  # noqa: PLC0415 - torch, pandas

    chosen = names or [n for n, s in DATASETS.items() if s.url]
    for name in chosen:
        with console.status(f"fetching {name}"):
            path = fetch(name, data_dir, force=force)
        console.print(f"[green]ok[/green] {escape(name)} -> {escape(str(path))}")


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
    from recurbench.data import WindowSpec, prepare  # noqa: PLC0415 - torch, pandas

    info = prepare(name, WindowSpec(seq_len, label_len, pred_len), data_dir, target=target).describe()
    if as_json:
        return print_json(info)
    console.print(table(f"{info['name']}", ["key", "value"], [[k, v] for k, v in info.items()]))
