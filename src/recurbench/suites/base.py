"""What a suite is: a YAML file shipped in this folder (``<name>.yaml``) plus a
:class:`SuiteDefinition` that validates its profiles, plans its runs and executes one of them.

Suite YAML layout::

    suite: ltsf                    # must equal the file's name
    description: ...
    profiles:
      quick: {...}                 # validated by the suite's profile model
      paper: {...}

YAML anchors and merge keys (``<<: *base``) are the way to share settings between profiles. The
suites register in :mod:`recurbench.suites.registry`; :mod:`recurbench.suites.runner` runs them.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from recurbench.config import StrictModel, check_names, deep_merge, parse_overrides, read_yaml, validate
from recurbench.devices import resolve_device
from recurbench.errors import ConfigError
from recurbench.tracking import RunHandle

if TYPE_CHECKING:
    import torch

#: Reports progress of one run: ``progress(completed, total, description)``.
ProgressFn = Callable[[float, float, str], None]


@dataclass(frozen=True)
class RunPlan:
    """One configuration x seed of a suite, fully resolved before anything trains."""

    name: str
    seed: int
    tags: dict[str, str]
    params: dict[str, Any]
    payload: Any = None
    """Whatever the suite needs to execute the run (typed configs, not strings)."""


@dataclass
class RunOutcome:
    plan: RunPlan
    status: str  # FINISHED | FAILED | PLANNED (a dry run) | RUNNING (by another driver: ``owner``)
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    run_id: str | None = None
    seconds: float = 0.0
    reused: bool = False
    """A run found FINISHED in the store (``skip_finished``), not run by this invocation."""
    owner: str | None = None
    """RUNNING: the driver that runs it elsewhere (host, pid, since when), left to it (``skip_finished``)."""
    resumed_from: str | None = None
    """The run whose checkpoint this one continued from (``skip_finished``, a resumable suite)."""
    resumed_at: int | None = None
    """The step of that checkpoint (the memory suite: updates)."""
    notes: list[str] = field(default_factory=list)
    """Lines for the user about resuming: checkpoints passed over or refused, each naming its run and why."""


def seconds_per_run(done: Sequence[RunOutcome]) -> str:
    """The mean wall time of the runs, for a summary's ``s/run`` column: two significant digits below
    10 s (a sub-second run reads ``0.43``, not ``0``), whole seconds above; ``-`` for none."""
    if not done:
        return "-"
    mean = sum(o.seconds for o in done) / len(done)
    return f"{mean:.2g}" if mean < 10 else f"{mean:,.0f}"


@dataclass
class SuiteResult:
    suite: str
    profile: str
    parent_run_id: str | None
    outcomes: list[RunOutcome]

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == "FAILED"]

    @property
    def reused(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.reused]

    @property
    def elsewhere(self) -> list[RunOutcome]:
        """Runs another live driver is running (``skip_finished``): left to it."""
        return [o for o in self.outcomes if o.status == "RUNNING"]

    stale: list[str] = field(default_factory=list)
    """Runs found RUNNING for the configurations run here whose driver is provably gone, ended FAILED."""


class SuiteDefinition(ABC):
    """What a suite provides to the runner."""

    name: str
    profile_model: type[StrictModel]
    default_device: str = "auto"
    """The device its runs train on when ``--device`` is not given (see :mod:`recurbench.devices`)."""
    headline_metrics: tuple[str, ...] = ()
    """The metrics :meth:`execute` returns (and logs): a stored run is reused only if it has them all."""
    execute_params: tuple[str, ...] = ()
    """Params :meth:`execute` logs beside the plan's (the data's window counts, say): any value matches."""
    added_params: Mapping[str, str] = MappingProxyType({})
    """Params added after runs were stored, as logged (dotted key -> text), each at the value that does
    what the runs stored before it did. A plan logs them, but its key
    (:func:`~recurbench.suites.runner.plan_key`, which finds a plan's runs) leaves one out at that value,
    so a run stored before it is still found (its checkpoint resumed, a live one left to its driver);
    :meth:`param_defaults` reads a run without one at that value."""
    selection_keys: tuple[str, ...] | None = None
    """The command line's choices :meth:`plan` reads from its ``selection`` (``datasets``, ``lengths``,
    ...), seeds aside: ``run`` refuses another suite's option (``--datasets`` for the memory suite)
    instead of ignoring it. None: every choice is passed on unchecked (a plugin suite that does not say)."""
    resumable: bool = False
    """Whether a run can continue from a checkpoint (:mod:`recurbench.suites.checkpoints`): then
    :meth:`execute` also takes ``resume``, a :class:`~recurbench.suites.checkpoints.Checkpoint` or
    None, and saves checkpoints with a :class:`~recurbench.suites.checkpoints.CheckpointWriter`. With
    ``run --skip-finished``, a plan whose earlier run ended FAILED or KILLED (or stale) with a checkpoint
    is handed the newest one; ``execute`` continues from it and calls ``resume.accept(run)``, or calls
    ``resume.refuse(run, reason)`` and starts from the beginning. A run resumed must end as the same run
    never interrupted would (its metrics too, at their steps). Suites that leave this False are
    called without ``resume``."""
    cap_param: str | None = None
    """For a resumable suite: the setting (a dotted param key) that only says how far a run goes, in
    its checkpoints' steps (the memory suite: ``training.updates``). A run's state at a step before its
    cap must not depend on the cap. Then ``run --skip-finished`` also hands a plan the checkpoints of
    the runs that differ from it only in this setting, FINISHED ones included, at steps before the
    plan's own cap: a run raised from 200,000 to 1,000,000 updates goes on from the last checkpoint of
    the 200,000-update run instead of repeating it."""

    def load_profile(self, profile: str, path: str | os.PathLike[str] | None = None,
                     overrides: Sequence[str] = ()) -> BaseModel:
        """Profile ``profile`` of this suite's shipped file (or of the YAML at ``path``), validated, with
        the command line's ``--set KEY=VALUE`` ``overrides`` applied on top of it (see
        :func:`recurbench.config.parse_overrides`)."""
        source = Path(path) if path is not None else self.suite_path()
        header = validate(SuiteFile, read_yaml(source), str(source))
        if header.suite != self.name:
            raise ConfigError(f"{source}: suite: the file defines suite {header.suite!r}, expected {self.name!r}")
        if profile not in header.profiles:
            raise ConfigError(
                f"{source}: profiles: no profile {profile!r}; available: {', '.join(header.profiles)}"
            )
        raw_profile = header.profiles[profile]
        command_line = parse_overrides(overrides) if overrides else {}
        if command_line:
            raw_profile = deep_merge(raw_profile, command_line)
        try:
            validated = validate(self.profile_model, raw_profile, str(source), prefix=f"profiles.{profile}")
        except ConfigError as exc:
            if not overrides:
                raise
            raise ConfigError(_blame_command_line(str(exc), f"{source}: profiles.{profile}.", overrides)) from None
        return self.with_command_line(validated, command_line)

    def with_command_line(self, profile: BaseModel, command_line: Mapping[str, Any]) -> BaseModel:
        """``profile`` (validated, the ``--set`` settings merged in) told which settings the command line
        set (``command_line``: :func:`~recurbench.config.parse_overrides`' nested mapping), for a suite
        where a more specific block of the file would otherwise shadow them (the memory suite's
        ``per_model``). Default: ``profile`` as it is."""
        return profile

    def suite_path(self) -> Path:
        """The suite's YAML: ``<name>.yaml`` shipped in this folder; a plugin suite returns its own."""
        return suite_file(self.name)

    def target_device(self, device: str | None) -> torch.device:
        """``--device`` (None: :attr:`default_device`) as a device this machine has, else a ConfigError."""
        return resolve_device(device or self.default_device, what="--device")

    @abstractmethod
    def plan(self, profile: BaseModel, selection: Mapping[str, Any], *, data_dir: str | None) -> list[RunPlan]:
        """Expand a profile (narrowed by command-line ``selection``) into runs, validating everything
        that can be checked before training (names, shapes, data availability)."""

    @abstractmethod
    def execute(
        self, plan: RunPlan, run: RunHandle, progress: ProgressFn, *, data_dir: str | None, device: torch.device
    ) -> dict[str, float]:
        """Run one plan on ``device``, logging to ``run``; returns its headline metrics."""

    def param_defaults(self, tags: Mapping[str, str] | None = None) -> dict[str, str]:
        """The value each logged setting takes when a run does not log it, as dotted param keys:
        :meth:`setting_defaults` and :attr:`added_params`.

        A run logged by an older version lacks the settings added since; each was added with the old
        behaviour as its default, so comparisons read the missing param as this value (see
        :func:`recurbench.records.settings_diff`). With ``tags`` (a run's), only the params a run of that
        configuration logs (:meth:`logs_param`): a run never gains a setting its configuration does not have."""
        defaults = {**self.setting_defaults(), **self.added_params}
        if tags is None:
            return defaults
        return {k: v for k, v in defaults.items() if self.logs_param(k, tags)}

    def setting_defaults(self) -> dict[str, str]:
        """The suite's own part of :meth:`param_defaults` (its config classes' defaults, as logged text;
        :attr:`added_params` are merged in by :meth:`param_defaults`). Default: none."""
        return {}

    def logs_param(self, key: str, tags: Mapping[str, str]) -> bool:
        """Whether a run with ``tags`` logs the param ``key`` at all (say, a memory run whose core has no
        gates logs no ``network.gate_init``). Default: every run logs every setting."""
        return True

    def shipped_settings(self, profile: BaseModel) -> list[tuple[dict[str, str], dict[str, str | None]]]:
        """What a run of each configuration logs with ``profile`` as it stands: ``(tags, params)``
        pairs, the tags naming the configuration (``dataset``/``horizon``/``model``), the params as
        the logged text (dotted keys, seed aside), ``None`` where the value is not the profile's to
        decide (say, the data's feature count). Comparisons prefer runs with these settings (see
        :func:`recurbench.reporting.runs.load_runs`). Default: none known."""
        return []

    def summary_rows(self, outcomes: Sequence[RunOutcome]) -> tuple[list[str], list[list[str]]]:
        """Header and rows of the table printed at the end (default: one row per run)."""
        keys = sorted({k for o in outcomes for k in o.metrics})
        rows = [
            [o.plan.name, o.status, *(f"{o.metrics[k]:.4f}" if k in o.metrics else "-" for k in keys)]
            for o in outcomes
        ]
        return ["run", "status", *keys], rows


def with_overrides(overrides: Sequence[str]) -> str:
    """``(with --set a=1 --set b=2)``: what an error about the profile was judged with."""
    return f"(with {' '.join('--set ' + o for o in overrides)})"


def in_profile_file(message: str, profile: BaseModel, source: str | os.PathLike[str], name: str,
                    overrides: Sequence[str] = ()) -> str:
    """A plan's error about a key of the profile (``per_model.rnn.model.nonlinearity: ...``) as a schema
    error reads: ``<file>: profiles.<name>.<key>: ...``, or ``--set <item>: ...`` where one of the
    ``--set`` items ``overrides`` gave that key (:func:`_set_item`); any other message (about
    ``--lengths``, a dataset) as it is."""
    head, sep, rest = message.partition(": ")
    if not sep or " " in head or head.split(".", 1)[0] not in type(profile).model_fields:
        return message
    if (item := _set_item(head, overrides)) is not None:
        return f"{item}: {rest}"
    return f"{source}: profiles.{name}.{message}"


def _set_item(key: str, overrides: Sequence[str]) -> str | None:
    """The ``--set`` item of ``overrides`` that gave the dotted ``key``, as typed: ``--set
    training.epochs=0`` for ``training.epochs``, followed by the key within it where the item gave a
    whole list or mapping (``--set models=[lstm,nosuch]: models.1``); None where none did (the last
    item that did, where several)."""
    given = [item for item in overrides if key == (k := item.partition("=")[0].strip()) or key.startswith(f"{k}.")]
    if not given:
        return None
    item = given[-1]
    return f"--set {item}" + ("" if item.partition("=")[0].strip() == key else f": {key}")


def _blame_command_line(message: str, prefix: str, overrides: Sequence[str]) -> str:
    """A schema error of a profile loaded with ``--set`` items (``message``: a line per key, each
    ``<prefix><key>: ...``, ``prefix`` = ``<file>: profiles.<name>.``), each line about a key that a
    ``--set`` item gave named as that item (``--set training.epoch=1: unknown key (got 1)``: it named
    the shipped file); the others as they are, the whole then followed by the ``--set`` items it was
    judged with."""
    lines = []
    for line in message.splitlines():
        key, sep, rest = line.removeprefix(prefix).partition(": ")
        item = _set_item(key, overrides) if line.startswith(prefix) and sep else None
        lines.append(line if item is None else f"{item}: {rest}")
    text = "\n".join(lines)
    return text if all(line.startswith("--set ") for line in lines) else f"{text} {with_overrides(overrides)}"




def selected_names(
    selection: Mapping[str, Any], key: str, default: Sequence[str], known: Mapping[str, Any], what: str
) -> list[str]:
    """The command line's ``--<key>`` choice, else the profile's ``default``; each name checked
    against ``known`` (a typo in the profile itself is already caught when the profile is validated)."""
    names = list(selection.get(key) or default)
    check_names(names, known, what, f"--{key}")
    return names


def selected_seeds(selection: Mapping[str, Any], default: int) -> range:
    """The seeds to run: ``--seeds`` (else the profile's seed count) consecutive seeds starting at
    ``--first-seed`` (default 0), so that more seeds can be added to a finished set later."""
    seeds = int(selection.get("seeds") or default)
    if seeds < 1:
        raise ConfigError(f"seeds: must be at least 1 (from --seeds or the profile), got {seeds}")
    first = int(selection.get("first_seed") or 0)
    if first < 0:
        raise ConfigError(f"first seed: must be at least 0 (from --first-seed), got {first}")
    return range(first, first + seeds)


def suite_file(name: str) -> Path:
    return Path(str(resources.files("recurbench.suites").joinpath(f"{name}.yaml")))


class SuiteFile(StrictModel):
    suite: str
    description: str = ""
    profiles: dict[str, dict[str, Any]]
