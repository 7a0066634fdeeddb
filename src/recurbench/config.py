"""Typed configuration: strict pydantic models loaded from YAML, with errors that name their path.

Every config class derives from :class:`StrictModel`: frozen, unknown keys rejected, no coercion of
strings into numbers. :func:`load_yaml_model` turns a YAML file into such a model and reports a bad
file as ``<file>: <dotted.path.in.file>: <what is wrong> (got <value>)``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from recurbench.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every config: frozen, extra keys forbidden, strict types (an int is not a str)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class KeyPathError(ValueError):
    """A validator's error about a value below the field it validates: ``path`` (keys and indices)
    continues the field's location, so that the message names the exact key in the file, e.g.
    ``profiles.paper.rem_heads.ETTh1.24.rsa_informer.k`` for a validator of ``rem_heads``."""

    def __init__(self, path: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.path = tuple(path)


def _union_member(part: object) -> bool:
    """Whether a location part is pydantic's name for one member of a union (``constrained-int``,
    ``literal['episode']``, ``int``), not a key of the file."""
    return (isinstance(part, str) and part != "[key]"  # pydantic's mark of a mapping's key at fault: kept
            and (re.search(r"[\[\-]", part) is not None or part in _TYPE_NAMES))


_TYPE_NAMES = frozenset({"int", "str", "float", "bool", "none", "list", "dict", "tuple"})


def format_validation_error(exc: ValidationError, source: str, prefix: str = "") -> str:
    """One line per key at fault: ``<source>: <dotted.key>: <what is wrong> (got <value>)``. A value
    that fits no member of a union (``memory_window: int >= 1 | 'episode'``) is one line, the members'
    complaints joined by "or", not a line per member under pydantic's names for them."""
    lines: dict[str, list[str]] = {}
    for err in exc.errors():
        below = err.get("ctx", {}).get("error")
        below_path = below.path if isinstance(below, KeyPathError) else ()
        parts = list(err["loc"])
        if parts and _union_member(parts[-1]):
            parts.pop()
        loc = ".".join(str(part) for part in (prefix, *parts, *below_path) if part != "")
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown key"
        elif err["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, (dict, list)) or below_path else f" (got {got!r})"
        key = f"{source}: {loc or '<root>'}"
        if key in lines:  # another member of the same union
            lines[key].insert(-1, f" or {message[0].lower()}{message[1:]}")
        else:
            lines[key] = [f"{key}: {message}", shown]
    return "\n".join("".join(parts) for parts in lines.values())


def validate(model: type[M], data: Any, source: str, prefix: str = "") -> M:
    """Validate ``data`` into ``model``; a :class:`ConfigError` names ``source`` and the key path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, prefix)) from None


class _Loader(yaml.SafeLoader):
    """YAML as a person writes it: a number in exponent form (``1e-3``, ``1.5e3``: strings to YAML 1.1)
    is a float, as in YAML 1.2, except a whole number written so (``2e5``, no point, no negative
    exponent), which is an int, so that ``training.updates=2e5`` is a count (a float setting takes
    it all the same); a key given twice in one mapping is an error naming
    both lines (PyYAML keeps the last silently). Keys merged in with ``<<:`` may be given again: that is
    how a profile changes what it merges."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first given on line {first.start_mark.line + 1})",
                        key_node.start_mark)
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]


_WHOLE_EXPONENT = "tag:recurbench,2026:whole-exponent"
_Loader.add_implicit_resolver(_WHOLE_EXPONENT, re.compile(r"^[-+]?[0-9][0-9_]*[eE]\+?[0-9]+$"), list("-+0123456789"))
_Loader.add_constructor(
    _WHOLE_EXPONENT, lambda loader, node: int(Decimal(loader.construct_scalar(node).replace("_", ""))))
_Loader.add_implicit_resolver(  # after the whole numbers: resolvers are tried in the order added
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"))


def load_yaml_text(text: str) -> Any:
    """``text`` read as YAML the way every recurbench file is (:class:`_Loader`)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader


def yaml_problem(exc: yaml.YAMLError, *, lines: bool = True) -> str:
    """A YAML error in one line: where (``line L, column C``, unless ``lines`` is False: a one-line value)
    and what, without PyYAML's ``in "<unicode string>"`` and its excerpt over three more lines."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(str(exc).split())
    what = "; ".join(" ".join(part.split()) for part in (exc.context, exc.problem) if part)
    mark = exc.problem_mark or exc.context_mark
    if not lines or mark is None:
        return what
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}"


def read_config_text(path: Path) -> str:
    """The text of the config file at ``path``; a :class:`ConfigError` in one line for a path that is
    missing, a directory or unreadable, and for bytes that are not UTF-8 (naming the first bad byte)."""
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a config file")
    if not path.exists():
        raise ConfigError(f"{path}: no such config file")
    if not path.is_file():
        raise ConfigError(f"{path}: not a regular file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}: line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}: {exc.reason})"
        ) from None


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    text = read_config_text(path)
    try:
        data = load_yaml_text(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {yaml_problem(exc)}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return dict(data)


def load_yaml_model(model: type[M], path: str | os.PathLike[str]) -> M:
    return validate(model, read_yaml(path), str(path))


def deep_merge(base: Mapping[Any, Any], override: Mapping[Any, Any]) -> dict[Any, Any]:
    """``override`` on top of ``base``, recursively for nested mappings (lists are replaced).

    A text key from the command line meets the integer key a YAML file wrote (``--set
    rem_heads.ETTh1.48...`` and ``48:``); a new all-digit key among integer keys becomes an integer."""
    out = dict(base)
    for key, value in override.items():
        key = _merge_key(out, key)
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _merge_key(base: Mapping[Any, Any], key: Any) -> Any:
    """``key``, or its integer where ``base`` has integer keys and ``key`` is all digits."""
    if key in base or not isinstance(key, str) or not re.fullmatch(r"-?\d+", key):
        return key
    return int(key) if any(isinstance(k, int) and not isinstance(k, bool) for k in base) else key


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Command-line ``KEY=VALUE`` settings with dotted keys as a nested mapping, e.g.
    ``["training.rsa_lr_factor=100", "model.keep_positional=true"]``. Values are read as YAML
    (``true``, ``null``, ``[24, 48]``) as the files are (:func:`load_yaml_text`: ``1e-4`` is a number)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        path = [part.strip() for part in key.split(".")]
        if not sep or not all(path):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. training.learning_rate=3e-4")
        try:
            value = load_yaml_text(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: cannot read the value as YAML: {yaml_problem(exc, lines=False)}") from None
        node = out
        for depth, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(path[: depth + 1])} was already set to a value")
            node = child
        if isinstance(node.get(path[-1]), dict):
            raise ConfigError(f"--set {item!r}: {key.strip()} already has keys set below it")
        node[path[-1]] = value
    return out


def check_names(values: list[str], known: Mapping[str, Any] | list[str], what: str, where: str) -> None:
    """Raise a :class:`ConfigError` for the first name in ``values`` that is not in ``known``, or that
    repeats an earlier one (a repeated model would run twice and count as two seeds)."""
    for i, value in enumerate(values):
        if value not in known:
            raise ConfigError(f"{where}.{i}: {unknown_name(what, value, known)}")
    check_unique(values, what, where)


def unknown_name(what: str, value: str, known: Mapping[str, Any] | list[str]) -> str:
    """``unknown {what} {value!r}; known: ...``, and where ``known`` is a plugin registry that left out an
    installed plugin of that name (:meth:`recurbench.plugins.PluginRegistry.left_out`), why."""
    text = f"unknown {what} {value!r}; known: {', '.join(known)}"
    why = getattr(known, "left_out", lambda _: None)(value)
    return text + (f" (a plugin of that name is installed but was left out: {why})" if why else "")


def _first_repeat(values: Sequence[Any]) -> tuple[int, int] | None:
    """``(first, repeat)`` indices of the first value given twice, or None."""
    seen: dict[Any, int] = {}
    for i, value in enumerate(values):
        if value in seen:
            return seen[value], i
        seen[value] = i
    return None


def check_unique(values: Sequence[Any], what: str, where: str) -> None:
    """Raise a :class:`ConfigError` naming the first value of ``values`` given twice."""
    if (pair := _first_repeat(values)) is not None:
        first, i = pair
        raise ConfigError(f"{where}.{i}: {what} {values[i]!r} is given twice (also {where}.{first})")


def _unique(values: list[Any]) -> list[Any]:
    if (pair := _first_repeat(values)) is not None:
        first, i = pair
        raise ValueError(f"{values[i]!r} is given twice (items {first} and {i})")
    return values


Unique = AfterValidator(_unique)
"""For a list field of a suite profile, ``Annotated[list[X], Unique]``: no item twice."""


def known_name(registry: Mapping[str, Any], what: str) -> Any:
    """A ``str`` type that only accepts keys of ``registry`` (checked at validation time, so a bad
    name in a suite file is reported with its file and key path, e.g. ``profiles.quick.models.1``)::

        models: list[known_name(MODELS, "model")]
    """

    def check(value: str) -> str:
        if value not in registry:
            raise ValueError(unknown_name(what, value, registry))
        return value

    return Annotated[str, AfterValidator(check)]
