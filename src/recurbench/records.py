"""Stored runs and their settings: one home, below the suites (``--skip-finished``) and the reports
(``compare``/``report``), which both ask whether a stored run has given settings.

A run's settings are its params as MLflow stores them: nested mappings as dotted keys
(:func:`flatten`), each value as text (:func:`param_value`); :func:`logged_settings` does both.
A run is read back as a :class:`RunRecord`. Execution params (:data:`EXECUTION_PARAMS`: seed,
thread count, checkpoint interval) say how a run was executed, not what was run, and never separate two runs' settings.
A param an older version did not log is read at the suite's default for it
(:meth:`~recurbench.suites.base.SuiteDefinition.param_defaults`), the behaviour that version had.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

MAX_PARAM_CHARS = 6000
"""MLflow's limit on a param's text (longer values are cut, with ``...``)."""

EXECUTION_PARAMS = frozenset({"seed", "torch_threads", "checkpoint_every"})
"""Params that say how a run was executed, not what was run: runs differing only in these pool
(``checkpoint_every``: a run resumed from a checkpoint ends as the uninterrupted run)."""


@dataclass(frozen=True)
class RunRecord:
    """One tracked run read back: its latest metric values, tags and params (as the logged text)."""

    run_id: str
    name: str
    status: str
    start_time: int
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]
    parent_id: str | None

    @property
    def seed(self) -> int | None:
        value = self.tags.get("seed", self.params.get("seed"))
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings become dotted keys (``model.d_model``), the form MLflow params take."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def param_value(value: Any) -> str:
    """``value`` as the text an MLflow param stores (lists, tuples and mappings as JSON)."""
    text = json.dumps(value) if isinstance(value, (list, tuple, dict)) else str(value)
    return text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."


def logged_settings(params: Mapping[str, Any]) -> dict[str, str]:
    """``params`` as a run logs them: dotted keys, each value as text."""
    return {k: param_value(v) for k, v in flatten(params).items()}


def has_settings(run: RunRecord, settings: Mapping[str, str | None], defaults: Mapping[str, str] | None = None) -> bool:
    """Whether ``run`` logged exactly ``settings`` (execution params aside): every key of
    ``settings`` at its value (``None``: any value), a key the run lacks read at its default in
    ``defaults``, and no key of its own beyond them (a setting the suite no longer has)."""
    return not settings_mismatches(run, settings, defaults)


def settings_mismatches(
    run: RunRecord, settings: Mapping[str, str | None], defaults: Mapping[str, str] | None = None
) -> list[tuple[str, str | None, str | None]]:
    """Where ``run`` lacks ``settings`` (:func:`has_settings`' rule), sorted by key: ``(key, the run's
    value, the value wanted)``; the run's value is None where it did not log the key and ``defaults``
    has none, the value wanted None for a key of the run's own beyond ``settings``."""
    defaults = defaults or {}
    beyond = [(k, run.params[k], None) for k in run.params.keys() - EXECUTION_PARAMS - settings.keys()]
    differing = [
        (k, run.params.get(k, defaults.get(k)), want) for k, want in settings.items()
        if k not in EXECUTION_PARAMS and want is not None and run.params.get(k, defaults.get(k)) != want
    ]
    return sorted(beyond + differing)


def shipped_settings_diff(run: RunRecord, settings: Mapping[str, str | None],
                          defaults: Mapping[str, str] | None = None, *, label: str = "shipped") -> str:
    """:func:`settings_mismatches` as :func:`settings_diff` words them (a key beyond ``settings`` as
    ``(<label>: not a setting)``); empty when ``run`` has the settings."""
    return _diff_text(
        [(k, have, "not a setting" if want is None else want) for k, have, want in settings_mismatches(run, settings, defaults)],
        label,
    )


def settings_diff(
    run: RunRecord, reference: RunRecord, defaults: Mapping[str, str] | None = None, *, label: str = "newest"
) -> str:
    """The params whose values differ between the two runs (execution params aside), as
    ``"key value (<label>: value)"``, comma-separated (at most three); empty when the settings agree.

    A param only one of the runs logged (one added by a later version) is read at its default in
    ``defaults`` for the run that lacks it; without a default it counts as different ("not logged"),
    so runs whose settings cannot be told apart are never pooled."""
    defaults = defaults or {}

    def value(r: RunRecord, key: str) -> str | None:
        return r.params.get(key, defaults.get(key))

    keys = sorted(
        k for k in run.params.keys() | reference.params.keys()
        if k not in EXECUTION_PARAMS and value(run, k) != value(reference, k)
    )
    return _diff_text([(k, value(run, k), value(reference, k)) for k in keys], label)


def _diff_text(differences: Sequence[tuple[str, str | None, str | None]], label: str) -> str:
    """``"key value (<label>: value)"`` for the first three differences, comma-separated; a value
    None reads "not logged"."""
    def shown(text: str | None) -> str:
        return "not logged" if text is None else text

    parts = [f"{k} {shown(have)} ({label}: {shown(want)})" for k, have, want in differences[:3]]
    return ", ".join(parts) + (", ..." if len(differences) > 3 else "")


def with_param_defaults(run: RunRecord, defaults: Mapping[str, str]) -> RunRecord:
    """``run`` with each param it did not log read at its default in ``defaults``: one added by a
    later version, which the run's version used at that value. Only in the sections (``training.``,
    ``rsa.``, ...) the run logged at all, so a baseline gains no ``rsa.`` params."""
    sections = {_section(k) for k in run.params} - {None}
    missing = {k: v for k, v in defaults.items() if k not in run.params and _section(k) in sections}
    return replace(run, params={**run.params, **missing}) if missing else run


def _section(key: str) -> str | None:
    return key.split(".", 1)[0] if "." in key else None


def lacks_a_param_of_its_sections(runs: Sequence[RunRecord]) -> bool:
    """Whether some run did not log a param that another run logged in a section both logged: only
    then does :func:`with_param_defaults` change anything."""
    logged: dict[str, set[str]] = {}
    for r in runs:
        for k in r.params:
            if (s := _section(k)) is not None:
                logged.setdefault(s, set()).add(k)
    return any(
        not logged[s] <= r.params.keys() for r in runs for s in {_section(k) for k in r.params} - {None}
    )
