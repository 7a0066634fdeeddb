"""``recurbench list``: suites, models, datasets and env pairs."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

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
    """List suites, models (forecasters, memory cores, language models), datasets or environment pairs;
    suites and models with the package each comes from ('recurbench' or a plugin's)."""
    from recurbench.data import DATASETS  # noqa: PLC0415 - torch, pandas
    from recurbench.suites.registry import SUITES, list_suites  # noqa: PLC0415 - every suite: torch, SB3, sktime

    if what == "suites":
        suites = list_suites()
        if as_json:
            return print_json(suites)
        rows = [[name, ", ".join(s["profiles"]), s["package"], s["description"]] for name, s in suites.items()]
        console.print(table("suites", ["suite", "profiles", "package", "description"], rows))
        _print_problems([SUITES])
    elif what == "models":
        items, registries = _models()
        if as_json:
            return print_json(items)
        columns = ["name", "kind", "suites", "package", "description"]
        console.print(table("models", columns, [[i[c] for c in columns] for i in items if i["left_out"] is None]))
        _print_problems(registries)
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


def _models() -> tuple[list[dict[str, str | None]], list[Any]]:
    """Every model of every kind (built-ins first, then plugins), then every plugin left out (its
    ``left_out``: why; None for the others), and the registries they came from."""
    from recurbench.agents.cores import CORES  # noqa: PLC0415 - torch
    from recurbench.forecasters.models import ARCHITECTURES  # noqa: PLC0415 - torch
    from recurbench.langs.models import LANG_MODELS  # noqa: PLC0415 - torch

    kinds = [
        (ARCHITECTURES, lambda _: "ltsf", lambda a: a.description),
        # a core that cannot drive an agent (SAB) runs in the memory tasks only
        (CORES, lambda c: "memory" if c.not_for_agents else "minigrid, memory",
         lambda c: c.description),
        (LANG_MODELS, lambda _: "langs", lambda a: a.description),
    ]
    items = [
        {"name": name, "kind": registry.kind, "suites": suites(entry), "package": registry.source(name).package,
         "description": describe(entry), "left_out": None}
        for registry, suites, describe in kinds for name, entry in registry.items()
    ]
    items += [
        {"name": name, "kind": registry.kind, "suites": "", "package": package, "description": "", "left_out": why}
        for registry, _, _ in kinds for name, package, why in registry.refused
    ]
    return items, [registry for registry, _, _ in kinds]


def _print_problems(registries: list[Any]) -> None:
    """The plugins left out (already printed once on stderr as they were loaded), under the table."""
    for registry in registries:
        for line in registry.problems:
            console.print(escape(line), highlight=False, soft_wrap=True)
