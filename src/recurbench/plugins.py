"""Plugins: models and suites from other installed packages, found through Python entry points.

A package adds to recurbench by declaring entry points in one of these groups (its ``pyproject.toml``)::

    [project.entry-points."recurbench.cores"]          # memory cores: minigrid agents, memory tasks
    gru = "my_package.cores:GRUCore"
    [project.entry-points."recurbench.forecasters"]    # forecasters: the ltsf suite
    [project.entry-points."recurbench.langs"]          # language models: the langs suite
    [project.entry-points."recurbench.suites"]         # whole suites

The entry point's name is the model's name on the command line (``--models gru``); its object is a
class that keeps the kind's contract (the docstrings of :class:`recurbench.agents.cores.MemoryCore`,
:func:`recurbench.forecasters.models.build_network`, :class:`recurbench.langs.models.Recognizer`,
:class:`recurbench.suites.base.SuiteDefinition`), checked by :mod:`recurbench.testing`.

Each registry (``CORES``, ``ARCHITECTURES``, ``LANG_MODELS``, ``SUITES``) is a :class:`PluginRegistry`:
the built-ins plus the group's plugins, loaded the first time the registry is read. So any process
that looks a name up loads the plugins by itself, a Ray worker included, and a process that never
reads a registry pays nothing. A name ``module.path:ClassName`` is the quick path without packaging:
the class is imported from the user's module when first named.

Bad plugins never take the built-ins down: a plugin that fails to import, or whose name clashes with a
built-in or another plugin, is left out with one line on stderr naming the entry point, its package
and the reason (also kept in :attr:`PluginRegistry.problems`, which ``recurbench list`` shows).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from importlib import metadata
from typing import Generic, TypeVar

from recurbench.errors import ConfigError

T = TypeVar("T")

GROUPS: dict[str, str] = {
    "memory core": "recurbench.cores",
    "forecaster": "recurbench.forecasters",
    "language model": "recurbench.langs",
    "suite": "recurbench.suites",
}
"""The entry-point group of each kind of plugin."""

BUILT_IN = "recurbench"
"""What :meth:`PluginRegistry.origin` says of a built-in."""


@dataclass(frozen=True)
class PluginSource:
    """Where a registry entry came from."""

    package: str
    """The distribution that declared it (``recurbench`` for a built-in, ``module path`` for the quick path)."""
    target: str
    """``module:attribute`` it was loaded from ("" for a built-in)."""


def _package(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None else "?"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def first_doc_line(obj: object) -> str:
    """The first line of ``obj``'s docstring (what ``recurbench list`` shows of a plugin)."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0].replace("``", "") if doc else ""


def import_target(target: str, what: str) -> object:
    """The object ``module.path:Name`` names; a :class:`ConfigError` in one line if it cannot be had.

    The module is searched on ``sys.path`` and then in the working directory (the quick path: a file
    beside the command). A module found only there puts the directory on ``PYTHONPATH`` too, so that
    Ray workers started afterwards by this process find it as well."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"{what} {target!r}: expected module.path:ClassName")
    try:
        module = _import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises, reported in one line
        raise ConfigError(f"{what} {target!r}: importing {module_name!r} failed: {_one_line(exc)}") from None
    obj: object = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{what} {target!r}: module {module_name!r} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    return obj


def _import_module(name: str) -> object:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        if exc.name != name.split(".")[0] or cwd in sys.path:
            raise
        sys.path.append(cwd)
        module = importlib.import_module(name)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if cwd not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([*paths, cwd])
        return module


class PluginRegistry(MutableMapping[str, T], Generic[T]):
    """Name -> entry of one kind: the built-ins, then the installed plugins of the kind's group, then
    any ``module.path:ClassName`` named so far. An entry can also be set in-process (``registry[name]
    = entry``, as a test's ``monkeypatch.setitem`` does): it lasts until :meth:`reload`.

    Parameters
    ----------
    kind : str
        A key of :data:`GROUPS` (``"memory core"``, ``"forecaster"``, ...): names the group and the
        kind in messages.
    builtins : dict
        The shipped entries, by name.
    adapt : callable
        ``adapt(obj, name) -> entry``: the registry's entry for an object a plugin provides (a class
        that keeps the kind's contract, or a ready entry); raises ``TypeError`` for anything else.
    quick_path : bool
        Whether a ``module.path:ClassName`` name is looked up (models: yes; suites: no).
    """

    def __init__(self, kind: str, builtins: Mapping[str, T], adapt: Callable[[object, str], T], *,
                 quick_path: bool = True) -> None:
        self.kind, self.group, self.quick_path = kind, GROUPS[kind], quick_path
        self._builtins = dict(builtins)
        self._adapt = adapt
        self._entries: dict[str, T] | None = None
        self._sources: dict[str, PluginSource] = {}
        self.problems: list[str] = []
        """One line per plugin left out (failed to import, clashing name, not the kind's contract)."""

    # -- loading -----------------------------------------------------------------------------------
    def _loaded(self) -> dict[str, T]:
        if self._entries is None:
            self._entries = dict(self._builtins)
            self._sources = {name: PluginSource(BUILT_IN, "") for name in self._builtins}
            self._load_group()
        return self._entries

    def _load_group(self) -> None:
        assert self._entries is not None
        found: dict[str, list[metadata.EntryPoint]] = {}
        for ep in metadata.entry_points(group=self.group):
            found.setdefault(ep.name, []).append(ep)
        for name, eps in sorted(found.items()):
            if name in self._builtins:
                for ep in eps:
                    self._refuse(ep, f"name {name!r} clashes with the built-in {self.kind} {name!r} (recurbench)")
                continue
            if len(eps) > 1:
                described = [f"{ep.value} of package {_package(ep)!r}" for ep in eps]
                for ep in eps:
                    self._refuse(ep, f"name {name!r} is also declared by another plugin: {' and '.join(described)}")
                continue
            ep = eps[0]
            try:
                entry = self._adapt(ep.load(), name)
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the others down
                self._refuse(ep, f"failed to load: {_one_line(exc)}")
                continue
            self._entries[name] = entry
            self._sources[name] = PluginSource(_package(ep), ep.value)

    def _refuse(self, ep: metadata.EntryPoint, why: str) -> None:
        line = (f"recurbench: {self.kind} plugin {ep.name!r} (entry point {ep.name} = {ep.value} in group "
                f"{self.group}, package {_package(ep)!r}) left out: {why}")
        self.problems.append(line)
        print(line, file=sys.stderr)

    def _quick_path(self, name: str) -> T:
        entries = self._loaded()
        if name not in entries:
            entries[name] = self._adapt_quick(import_target(name, self.kind), name)
            self._sources[name] = PluginSource("module path", name)
        return entries[name]

    def _adapt_quick(self, obj: object, name: str) -> T:
        try:
            return self._adapt(obj, name)
        except TypeError as exc:
            raise ConfigError(f"{self.kind} {name!r}: {exc}") from None

    # -- the mapping -------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> T:
        if self.quick_path and isinstance(name, str) and ":" in name:
            return self._quick_path(name)
        return self._loaded()[name]

    def __contains__(self, name: object) -> bool:
        if self.quick_path and isinstance(name, str) and ":" in name:
            self._quick_path(name)  # a module that cannot be imported is an error, not an unknown name
            return True
        return name in self._loaded()

    def __setitem__(self, name: str, entry: T) -> None:
        self._loaded()[name] = entry
        builtin = name in self._builtins and self._builtins[name] is entry
        self._sources[name] = PluginSource(BUILT_IN, "") if builtin else PluginSource("in-process", "")

    def __delitem__(self, name: str) -> None:
        del self._loaded()[name]
        del self._sources[name]

    def __iter__(self) -> Iterator[str]:
        return iter([n for n in self._loaded() if self._sources[n].package != "module path"])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"PluginRegistry({self.kind!r}, {list(self)})"

    # -- what came from where ----------------------------------------------------------------------
    def builtins(self) -> list[str]:
        return list(self._builtins)

    def source(self, name: str) -> PluginSource:
        """Where entry ``name`` came from (``package`` ``recurbench`` for a built-in)."""
        self[name]
        return self._sources[name]

    def is_builtin(self, name: str) -> bool:
        return name in self._builtins

    def reload(self) -> None:
        """Forget the loaded plugins: the next read looks the group up again (after an install)."""
        self._entries, self._sources, self.problems = None, {}, []


def call_with_settings(cls: Callable[..., T], *args: object, **settings: object) -> T:
    """``cls(*args, **settings)`` with only the settings its ``__init__`` names (all of them if it takes
    ``**kwargs``): a suite hands every model the same settings and each reads its own, as the
    built-ins' builders do."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return cls(*args, **settings)
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return cls(*args, **settings)
    named = {p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return cls(*args, **{k: v for k, v in settings.items() if k in named})
