"""The shipped suites by name (``SUITES``: name -> :class:`~recurbench.suites.base.SuiteDefinition`
class), and loading one of their profiles from YAML.

Importing this module imports every suite (and so torch, SB3 and sktime): the command line imports
it only in the commands that need a suite.

A whole suite can come from another package (entry-point group ``recurbench.suites``): a
:class:`~recurbench.suites.base.SuiteDefinition` subclass whose ``name`` is the entry point's and
whose :meth:`~recurbench.suites.base.SuiteDefinition.suite_path` returns its YAML (the same layout as
the shipped files: ``suite``, ``description``, ``profiles`` with at least ``quick``). The recipe in
CONTRIBUTING.md is its contract; the runner, tracking, engines, ``compare`` and ``report`` treat it as
a built-in.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from recurbench.config import read_yaml
from recurbench.errors import ConfigError
from recurbench.plugins import PluginRegistry
from recurbench.suites.base import SuiteDefinition
from recurbench.suites.langs import LangsSuite
from recurbench.suites.ltsf import LTSFSuite
from recurbench.suites.memory import MemorySuite
from recurbench.suites.minigrid import MinigridSuite


def _plugin_suite(obj: object, name: str) -> type[SuiteDefinition]:
    """A plugin's entry: a :class:`SuiteDefinition` subclass named as its entry point."""
    if not (isinstance(obj, type) and issubclass(obj, SuiteDefinition)):
        raise TypeError(f"{obj!r} is not a SuiteDefinition subclass")
    if getattr(obj, "name", None) != name:
        raise TypeError(f"{obj.__name__}.name is {getattr(obj, 'name', None)!r}, not the entry point's name {name!r}")
    return obj


SUITES: PluginRegistry[type[SuiteDefinition]] = PluginRegistry("suite", {
    "ltsf": LTSFSuite,
    "minigrid": MinigridSuite,
    "langs": LangsSuite,
    "memory": MemorySuite,
}, _plugin_suite, quick_path=False)
"""Every suite by name: the shipped ones and the plugins' (a ``module:Class`` name is not a suite)."""


def list_suites() -> dict[str, dict[str, Any]]:
    """Every suite (shipped and plugins') with its description, profile names and package."""
    out = {}
    for name in SUITES:
        path = SUITES[name]().suite_path()
        if path.is_file():
            raw = read_yaml(path)
            out[name] = {"description": raw.get("description", ""), "profiles": list(raw.get("profiles", {})),
                         "package": SUITES.source(name).package}
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
