"""Typed configuration: strict pydantic models loaded from YAML, with errors that name their path.

Every config class derives from :class:`StrictModel`: frozen, unknown keys rejected, no coercion of
strings into numbers. :func:`load_yaml_model` turns a YAML file into such a model and reports a bad
file as ``<file>: <dotted.path.in.file>: <what is wrong> (got <value>)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from recurbench.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every config: frozen, extra keys forbidden, strict types (an int is not a str)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def format_validation_error(exc: ValidationError, source: str, prefix: str = "") -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(part) for part in (prefix, *err["loc"]) if part != "")
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown key"
        elif err["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
        lines.append(f"{source}: {loc or '<root>'}: {message}{shown}")
    return "\n".join(lines)


def validate(model: type[M], data: Any, source: str, prefix: str = "") -> M:
    """Validate ``data`` into ``model``; a :class:`ConfigError` names ``source`` and the key path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, prefix)) from None


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return dict(data)


def load_yaml_model(model: type[M], path: str | os.PathLike[str]) -> M:
    return validate(model, read_yaml(path), str(path))


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` on top of ``base``, recursively for nested mappings (lists are replaced)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def check_names(values: list[str], known: Mapping[str, Any] | list[str], what: str, where: str) -> None:
    """Raise a :class:`ConfigError` for the first name in ``values`` that is not in ``known``."""
    for i, value in enumerate(values):
        if value not in known:
            raise ConfigError(f"{where}.{i}: unknown {what} {value!r}; known: {', '.join(known)}")


def known_name(registry: Mapping[str, Any], what: str) -> Any:
    """A ``str`` type that only accepts keys of ``registry`` (checked at validation time, so a bad
    name in a suite file is reported with its file and key path, e.g. ``profiles.quick.models.1``)::

        models: list[known_name(MODELS, "model")]
    """

    def check(value: str) -> str:
        if value not in registry:
            raise ValueError(f"unknown {what} {value!r}; known: {', '.join(registry)}")
        return value

    return Annotated[str, AfterValidator(check)]
