"""``recurbench list``: suites, models, datasets and env pairs."""

from __future__ import annotations

from typing import Annotated

import typer

from recurbench.cli.common import (
    JsonOpt,
    console,
    print_json,
    table,
)
from recurbench.envs import ENV_PAIRS, registered_env_ids
from recurbench.errors import RecurbenchError


def list_cmd(
    what: Annotated[str, typer.Argument(help="suites | models | datasets | envs")] = "suites",
    as_json: JsonOpt = False,
) -> None:
    """List shipped suites, models (forecasters and agent cores), datasets or environment pairs."""
    from recurbench.agents.cores import CORES  # noqa: PLC0415 - torch
    from recurbench.data import DATASETS  # noqa: PLC0415 - torch, pandas
    from recurbench.forecasters.models import ARCHITECTURES  # noqa: PLC0415 - torch
    from recurbench.suites.registry import list_suites  # noqa: PLC0415 - every suite: torch, SB3, sktime

    if what == "suites":
        suites = list_suites()
        if as_json:
            return print_json(suites)
        rows = [[name, ", ".join(s["profiles"]), s["description"]] for name, s in suites.items()]
        console.print(table("suites", ["suite", "profiles", "description"], rows))
    elif what == "models":
        items = [{"name": n, "kind": "forecaster", "description": a.description} for n, a in ARCHITECTURES.items()]
        items += [{"name": n, "kind": "agent core", "description": c.description} for n, c in CORES.items()]
        if as_json:
            return print_json(items)
        console.print(table("models", ["name", "kind", "description"], [list(i.values()) for i in items]))
    elif what == "datasets":
        items = [
            {"name": s.name, "file": s.filename, "rows": s.rows, "target": s.target, "split": s.split, "sha256": s.sha256}
            for s in DATASETS.values()
        ]
        if as_json:
            return print_json(items)
        console.print(table("datasets", list(items[0]), [list(i.values()) for i in items]))
    elif what == "envs":
        known = registered_env_ids()
        items = [
            {"pair": p.name, "train": p.train, "test": p.test, "registered": p.train in known and p.test in known}
            for p in ENV_PAIRS.values()
        ]
        if as_json:
            return print_json(items)
        console.print(table("MiniGrid train/test pairs", ["pair", "train", "test", "registered"], [list(i.values()) for i in items]))
        missing = [i["pair"] for i in items if not i["registered"]]
        if missing:
            raise RecurbenchError(f"environment ids not registered by the installed minigrid: {', '.join(missing)}")
    else:
        raise RecurbenchError(f"unknown listing {what!r}; choose one of: suites, models, datasets, envs")
