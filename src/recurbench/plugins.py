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
and the reason (also kept in :attr:`PluginRegistry.problems`, which ``recurbench list`` shows). A Ray
task does not print again a line its driver printed (:func:`said_by_driver`).

**A plugin's own settings.** Besides what the suite hands every model of its kind (a forecaster's or
language model's ``cfg``; a core's ``input_size``, ``hidden_size`` and the suite's core settings), a
plugin class may take settings of its own: the keyword parameters of its ``__init__`` after those. Every
suite's profile has a ``plugin_settings`` mapping, model name -> {setting: value}, set in a suite file
or on the command line (``--set plugin_settings.gru.layers=2``, ``--set
plugin_settings.my_module:TinyGRU.width=16``). :meth:`PluginRegistry.own_settings` checks them against
the class's signature (an unknown key, or a value its annotation refuses, is one line naming the key and
the class, when the profile loads); :meth:`PluginRegistry.settings_for` gives a run's settings (the
class's defaults with the given values over them), which the suite passes to the class and logs as
``plugin_settings.<key>`` params. A class that takes ``**kwargs`` accepts any key. The built-ins' settings
are the suites' own keys, so ``plugin_settings`` refuses a built-in's name.

Ray workers load plugins the way the driver does, from the entry points and ``module:Class`` names they
read; :func:`plugin_paths` names the folders a fresh interpreter would not search (a ``pip install
--target`` folder put on ``sys.path``, a quick-path module's folder), which the engine hands its local
Ray instance's workers on ``PYTHONPATH``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import site
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BeforeValidator, ConfigDict, TypeAdapter, ValidationError

from recurbench.config import KeyPathError, unknown_name
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
    constructor : callable, optional
        ``constructor(entry) -> callable``: what builds an entry's model, whose keyword parameters after
        the first ``supplied`` positional ones are the model's own settings (:meth:`own_settings`).
        None: the kind's entries take no settings of their own (suites).
    supplied : int
        How many leading parameters of the constructor the suite always passes itself (a forecaster's
        ``cfg``: 1; a core's ``input_size, hidden_size``: 2).
    """

    def __init__(self, kind: str, builtins: Mapping[str, T], adapt: Callable[[object, str], T], *,
                 quick_path: bool = True, constructor: Callable[[T], Callable[..., object]] | None = None,
                 supplied: int = 0) -> None:
        self.kind, self.group, self.quick_path = kind, GROUPS[kind], quick_path
        _REGISTRIES.append(self)
        self._builtins = dict(builtins)
        self._adapt = adapt
        self._constructor, self._supplied = constructor, supplied
        self._entries: dict[str, T] | None = None
        self._sources: dict[str, PluginSource] = {}
        self.problems: list[str] = []
        """One line per plugin left out (failed to import, clashing name, not the kind's contract)."""
        self.refused: list[tuple[str, str, str]] = []
        """Each plugin left out as (its name, its package, why), in :attr:`problems`' order."""

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
        self.refused.append((ep.name, _package(ep), why))
        if line not in _SAID_BY_DRIVER:
            print(line, file=sys.stderr)

    def left_out(self, name: str) -> str | None:
        """Why an installed plugin of this name was left out (its package and the reason); None if none was."""
        self._loaded()
        if name in self._builtins:  # a clash with a built-in leaves the name known
            return None
        return next((f"package {package!r}: {why}" for left, package, why in reversed(self.refused) if left == name),
                    None)

    def _quick_path(self, name: str) -> T:
        entries = self._loaded()
        if name not in entries:
            entries[name] = self._adapt_quick(import_target(name, self.kind), name)
            self._sources[name] = PluginSource("module path", name)
            _QUICK_PATH_MODULES.add(name.partition(":")[0])
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

    def is_plugin(self, name: str) -> bool:
        """Whether ``name`` is an entry not recurbench's own: an installed plugin's, one set in-process, or
        a ``module:Class`` named so far (never imported here for the asking)."""
        return name in self._loaded() and self._sources[name].package != BUILT_IN

    def reload(self) -> None:
        """Forget the loaded plugins: the next read looks the group up again (after an install)."""
        self._entries, self._sources, self.problems, self.refused = None, {}, [], []

    # -- a plugin's own settings -------------------------------------------------------------------
    def _subject(self, name: str) -> str:
        constructor = _unwrap(self._constructor(self[name])) if self._constructor is not None else None
        return f"{self.kind} {name!r}" + (f" (class {_qualified(constructor)})" if constructor is not None else "")

    def own_settings(self, name: str) -> dict[str, inspect.Parameter] | None:
        """The settings model ``name`` takes of its own: its constructor's keyword parameters after the
        ones the suite supplies, by name; None where it takes ``**kwargs`` (any key)."""
        if self._constructor is None:
            return {}
        return own_parameters(_unwrap(self._constructor(self[name])), self._supplied)

    def check_settings(self, name: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` (setting -> value, for model ``name``) checked against the model's own settings:
        each key one of them, each value of its annotated type (validated as pydantic does, not
        strictly: ``2`` for a float). Returns the validated values; a :class:`SettingError` names the
        first bad key and the class."""
        if self.is_builtin(name):
            raise SettingError(None, f"{name!r} is a built-in {self.kind}: its settings are the suite's own keys "
                                     "(see the suite file), not plugin_settings")
        own = self.own_settings(name)
        if own is None:
            return dict(given)
        out = {}
        for key, value in given.items():
            if key not in own:
                takes = f"its settings: {', '.join(own)}" if own else "it takes none of its own"
                raise SettingError(key, f"unknown setting {key!r} of {self._subject(name)}; {takes}")
            out[key] = _validated(own[key], value, f"setting {key!r} of {self._subject(name)}")
        return out

    def settings_for(self, name: str, given: Mapping[str, Any] | None = None, *,
                     shared: Collection[str] = ()) -> dict[str, Any]:
        """The own settings a run of model ``name`` passes to its class and logs: each of its own
        settings at its default (those with a plain default: a number, text, a bool, None or a list of
        them), with ``given`` (checked by :meth:`check_settings`) over them. ``shared``: the suite's
        settings every model of the kind is handed anyway (a core's ``nu``, logged with the suite's
        settings): left out, and refused in ``given``. A built-in without ``given`` has none. A setting
        without a default that is neither given nor shared is a :class:`SettingError`."""
        given = self.check_settings(name, given) if given else {}
        if self.is_builtin(name):
            return given
        for key in given:
            if key in shared:  # the class would get this value, while the run's name and tables show the suite's
                raise SettingError(key, f"{key!r} is a setting the suite hands every {self.kind}: set it among the "
                                        "suite's own settings (see the suite file), not under plugin_settings")
        own = self.own_settings(name) or {}
        out: dict[str, Any] = {}
        for key, parameter in own.items():
            if key in given or key in shared:
                continue
            if parameter.default is inspect.Parameter.empty:
                raise SettingError(key, f"{self._subject(name)} needs setting {key!r}, which has no default: "
                                        f"give it with --set plugin_settings.{name}.{key}=VALUE")
            if _plain(parameter.default):
                out[key] = parameter.default
        return {**out, **given}


def own_parameters(constructor: Callable[..., object], supplied: int) -> dict[str, inspect.Parameter] | None:
    """The keyword parameters of ``constructor`` after its first ``supplied`` positional ones (what the
    suite passes itself), by name: a model's own settings; None where it takes ``**kwargs`` (any key) or
    has no signature to read."""
    try:
        parameters = list(_signature(constructor).parameters.values())
    except (TypeError, ValueError):  # a builder without a signature: nothing can be checked
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    skipped = {p.name for p in positional[:supplied]}
    return {p.name: p for p in parameters
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skipped}


class SettingError(ConfigError):
    """A plugin setting that cannot be had; ``key`` is the setting (None: the whole mapping)."""

    def __init__(self, key: str | None, message: str) -> None:
        super().__init__(message)
        self.key, self.message = key, message


KIND_BASES: dict[str, type] = {}
"""The base class of each kind that has one (``memory core``: ``MemoryCore``; ``language model``:
``Recognizer``), set by the module that defines it: a class derived from it has imported that module."""


def other_kind(cls: type, kind: str) -> None:
    """Refuse (``TypeError``) a class of another kind than ``kind`` that its adapter would take for one:
    a memory core or a language model is an ``nn.Module`` too, so it would pass for a forecaster until
    its first run."""
    for its_kind, base in KIND_BASES.items():
        if its_kind != kind and issubclass(cls, base):
            raise TypeError(f"{_qualified(cls)} is a {its_kind} (a {base.__name__} subclass), not a {kind}: "
                            f"declare it in group {GROUPS[its_kind]}")


def _qualified(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _unwrap(constructor: Callable[..., object]) -> Callable[..., object]:
    """The class behind ``functools.partial(call_with_settings, cls)`` (a plugin core's builder)."""
    if isinstance(constructor, functools.partial) and constructor.func is call_with_settings and constructor.args:
        return constructor.args[0]
    return constructor


def _signature(constructor: Callable[..., object]) -> inspect.Signature:
    try:
        return inspect.signature(constructor, eval_str=True)
    except (NameError, SyntaxError, TypeError):  # an annotation that names what its module lacks: unchecked
        return inspect.signature(constructor)


def _plain(value: object) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, (list, tuple)) and all(_plain(v) for v in value)


def _validated(parameter: inspect.Parameter, value: object, subject: str) -> object:
    """``value`` validated against ``parameter``'s annotation (unchecked where it has none, or one
    pydantic cannot read)."""
    annotation = parameter.annotation
    if annotation is inspect.Parameter.empty or isinstance(annotation, str):
        return value
    try:
        adapter = TypeAdapter(annotation, config=ConfigDict(arbitrary_types_allowed=True))
    except Exception:  # noqa: BLE001 - a type pydantic has no schema for: left to the class
        return value
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise SettingError(parameter.name, f"{subject}: {error['msg']} (got {value!r})") from None


def plugin_settings_field(registry: PluginRegistry[Any]) -> Any:
    """The type of a suite profile's ``plugin_settings``: model name -> {setting: value}, each model a
    plugin of ``registry`` and each setting checked against its class (:meth:`PluginRegistry.check_settings`),
    as the profile loads; an error names its key path (``plugin_settings.gru.layrs``).

    ``--set plugin_settings.my.module:Net.width=8`` splits the name at its dots: those parts are joined
    again into the name ``my.module:Net``."""

    def join_names(value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        out: dict[str, Any] = {}
        for name, settings in value.items():
            for full, own in _joined(str(name), settings, registry):
                out[full] = {**out.get(full, {}), **own} if isinstance(own, Mapping) else own
        return out

    def check(value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        out = {}
        for name, settings in value.items():
            try:
                known = name in registry
            except ConfigError as exc:
                raise KeyPathError((name,), str(exc)) from None
            if not known:
                raise KeyPathError((name,), unknown_name(registry.kind, name, registry))
            try:
                out[name] = registry.check_settings(name, settings)
            except SettingError as exc:
                raise KeyPathError((name,) if exc.key is None else (name, exc.key), exc.message) from None
        return out

    return Annotated[dict[str, dict[str, Any]], BeforeValidator(join_names), AfterValidator(check)]


def planned_settings(registry: PluginRegistry[Any], name: str, plugin_settings: Mapping[str, Mapping[str, Any]], *,
                     shared: Collection[str] = ()) -> dict[str, Any]:
    """What a suite's ``plan`` calls for each model: :meth:`PluginRegistry.settings_for` with the
    profile's ``plugin_settings`` of model ``name``; a :class:`ConfigError` names the key
    (``plugin_settings.<name>.<key>: ...``)."""
    try:
        return registry.settings_for(name, plugin_settings.get(name), shared=shared)
    except SettingError as exc:
        key = f"plugin_settings.{name}" + (f".{exc.key}" if exc.key else "")
        raise ConfigError(f"{key}: {exc.message}") from None


def _joined(name: str, settings: Any, registry: PluginRegistry[Any]) -> Iterator[tuple[str, Any]]:
    """``(model name, settings)`` pairs of one key of ``plugin_settings``, a dotted module path that
    ``--set`` split into nested keys joined again: a name is complete once it has a ``:`` or is a
    registry's name. One whose settings hold no mapping to descend into cannot be completed: it stays as
    it is (an unknown name, which the check then names, rather than ``name.key`` with a value for settings)."""
    if (":" in name or not isinstance(settings, Mapping) or name in registry
            or not any(isinstance(below, Mapping) for below in settings.values())):
        yield name, settings
        return
    for part, below in settings.items():
        yield from _joined(f"{name}.{part}", below, registry)


_REGISTRIES: list[PluginRegistry[Any]] = []
"""Every registry made in this process (each kind's module makes its own)."""


def names_a_plugin(value: object) -> bool:
    """Whether ``value`` (a run's tag, say) names a model or suite of any registry that is not recurbench's
    own (:meth:`PluginRegistry.is_plugin`)."""
    return isinstance(value, str) and any(registry.is_plugin(value) for registry in _REGISTRIES)


_SAID_BY_DRIVER: set[str] = set()
"""In a Ray task: the left-out lines its driver printed already, which the task's own loading keeps
off stderr (every task is a fresh worker that loads the plugins again; the driver's user saw them once).
A line the driver did not print (a worker machine whose plugin fails otherwise) is printed."""


def left_out_lines() -> list[str]:
    """The left-out lines this process's registries have found so far, each once (what a Ray task is told
    was said)."""
    return list(dict.fromkeys(line for registry in _REGISTRIES for line in registry.problems))


def said_by_driver(lines: Collection[str]) -> None:
    """Keep ``lines`` (the driver's :func:`left_out_lines`) off this process's stderr: a Ray task's first
    step. Kept in :attr:`PluginRegistry.problems` all the same, so a name left out still says why."""
    _SAID_BY_DRIVER.update(lines)


_QUICK_PATH_MODULES: set[str] = set()
"""The modules named by ``module:Class`` so far in this process."""


def plugin_paths() -> list[str]:
    """The ``sys.path`` folders this process finds plugins in that a fresh interpreter of this Python
    would not search: where each installed plugin distribution of recurbench's groups lies (a ``pip
    install --target`` folder put on the path, say) and where each ``module:Class`` named so far was
    imported from. The site-packages folders (an ordinary or editable install) are left out. A local Ray
    instance's workers get these on ``PYTHONPATH``, so that they load the plugins the driver loaded."""
    default = {*site.getsitepackages(), site.getusersitepackages(), *os.environ.get("PYTHONPATH", "").split(os.pathsep)}
    default = {os.path.realpath(p) for p in default if p}
    found: list[str] = []

    def add(folder: str | os.PathLike[str]) -> None:
        real = os.path.realpath(folder)
        if real not in default and real not in found and os.path.isdir(real):
            found.append(real)

    for group in GROUPS.values():
        for ep in metadata.entry_points(group=group):
            dist = getattr(ep, "dist", None)
            if dist is not None and (where := dist.locate_file("")) is not None:
                add(where)
    for module_name in sorted(_QUICK_PATH_MODULES):
        module = sys.modules.get(module_name)
        file = getattr(module, "__file__", None)
        if file is None:
            continue
        root = Path(file).parent
        for _ in range(module_name.count(".") + (Path(file).name == "__init__.py")):
            root = root.parent
        add(root)
    return found


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
