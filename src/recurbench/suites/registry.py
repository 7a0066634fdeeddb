"""The shipped suites by name (``SUITES``: name -> :class:`~recurbench.suites.base.SuiteDefinition`
class), and loading one of their profiles from YAML.

Importing this module imports every suite (and so torch, SB3 and sktime): the command line imports
it only in the commands that need a suite.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from recurbench.config import read_yaml
from recurbench.errors import ConfigError
from recurbench.suites.base import SuiteDefinition, suite_file
from recurbench.suites.langs import LangsSuite
from recurbench.suites.ltsf import LTSFSuite
from recurbench.suites.memory import MemorySuite
from recurbench.suites.minigrid import MinigridSuite

SUITES: dict[str, type[SuiteDefinition]] = {
    "ltsf": LTSFSuite,
    "minigrid": MinigridSuite,
    "langs": LangsSuite,
    "memory": MemorySuite,
}


def list_suites() -> dict[str, dict[str, Any]]:
    """Shipped suites with their description and profile names."""
    out = {}
    for name in SUITES:
        path = suite_file(name)
        if path.is_file():
            raw = read_yaml(path)
            out[name] = {"description": raw.get("description", ""), "profiles": list(raw.get("profiles", {}))}
    return out


def load_profile(
    name: str, profile: str, path: str | os.PathLike[str] | None = None, overrides: Sequence[str] = ()
) -> tuple[SuiteDefinition, BaseModel]:
    """Load suite ``name`` (or the YAML at ``path``) and validate one of its profiles, with the
    command line's ``--set KEY=VALUE`` ``overrides`` applied on top of it (see
    :func:`recurbench.config.parse_overrides`)."""
    if name not in SUITES:
        raise ConfigError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    definition = SUITES[name]()
    return definition, definition.load_profile(profile, path, overrides)
