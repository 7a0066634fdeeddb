"""Whether runs were made at the paper's settings: those of the ``paper`` profile as its suite ships it.

The papers' figures (and their win counts) come from those settings. A run at any other (another
profile such as ``quick``, a ``--set``, a ``--config`` file) is not comparable with them, and every
table that sets the two side by side says so: ``run``'s closing table (the suites' ``summary_rows``),
``compare`` and ``report``. The check reads settings, not profile names, because ``summary_rows`` sees
only the runs' plans, and because ``--profile paper --set training.epochs=2`` is not the paper's
setting either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from recurbench.errors import ConfigError
from recurbench.plugins import names_a_plugin
from recurbench.records import EXECUTION_PARAMS, logged_settings
from recurbench.suites.base import RunOutcome, SuiteDefinition

PAPER_PROFILE = "paper"
SHOWN_CONFIGURATIONS = 3
"""How many configurations the paper profile does not run a caveat names (the rest are counted: the
tables list them anyway). Every differing setting is named, always."""
SHORT_VALUES = 24
"""A caveat for the terminal counts a setting's values where there are several and their text is
longer than this (``rsa.k [0, 2] (paper: 3 values)``); its key is named all the same."""

_Settings = Mapping[str, str | None]
_Runs = Iterable[tuple[Mapping[str, str], Mapping[str, str]]]


@dataclass(frozen=True)
class SettingDifference:
    """A setting in which runs differ from the paper profile: the runs' values and the paper profile's
    for the same configurations (``"None"``: unset), each in the order met."""

    key: str
    ours: tuple[str, ...]
    paper: tuple[str, ...]

    def text(self, *, short: bool = False) -> str:
        """``training.epochs 2 (paper 6)``; ``short``: several values whose text is long, counted."""
        named = [v for v in self.paper if v != "None"]  # null in the profile: no cap, or derived from another
        if not named:
            paper = "paper: unset"
        elif _counted(named, short):
            paper = f"paper: {len(named)} values"
        else:
            paper = f"paper {', '.join(named)}"
        if named and len(named) < len(self.paper):
            paper += ", or unset"
        return f"{self.key} {_values(self.ours, short)} ({paper})"


def _counted(values: Sequence[str], short: bool) -> bool:
    return short and len(values) > 1 and len(", ".join(values)) > SHORT_VALUES


def _values(values: Sequence[str], short: bool) -> str:
    return f"{len(values)} values" if _counted(values, short) else ", ".join(values)


@dataclass(frozen=True)
class PaperDifferences:
    """How runs differ from the paper profile: its settings, and the configurations it does not run."""

    settings: list[SettingDifference]
    outside: list[str]

    def lines(self) -> list[str]:
        return [d.text() for d in self.settings] + ([self.outside_text()] if self.outside else [])

    def outside_text(self) -> str:
        names = self.outside
        return (f"{len(names)} configuration(s) the paper profile does not run: "
                f"{', '.join(names[:SHOWN_CONFIGURATIONS])}" + (", ..." if len(names) > SHOWN_CONFIGURATIONS else ""))


@lru_cache(maxsize=8)
def _paper_settings(definition: SuiteDefinition
                    ) -> tuple[tuple[str, ...], dict[tuple[str, ...], _Settings], dict[str, str]] | None:
    """The paper profile's configuration tag keys, its settings per configuration and the suite's
    param defaults; None for a suite without a shipped paper profile."""
    try:
        cfg = definition.load_profile(PAPER_PROFILE)
    except ConfigError:
        return None
    shipped = definition.shipped_settings(cfg)
    keys = tuple(shipped[0][0]) if shipped else ()  # every configuration is named by the same tags
    # The paper never ran a plugin's model: its configurations are outside, not at the class's defaults.
    table = {tuple(str(tags[k]) for k in keys): params for tags, params in shipped
             if not any(names_a_plugin(v) for v in tags.values())}
    return keys, table, definition.param_defaults()


def differences(definition: SuiteDefinition, runs: _Runs) -> PaperDifferences | None:
    """How the settings of ``runs`` (each its tags and its params as logged text) differ from the paper
    profile's for the same configuration (None for a suite that ships no paper profile): every differing
    param with every value the runs have and every value the paper profile has for those configurations,
    and the configurations the paper profile does not have. A param a run did not log is read at the
    suite's default for it (an older version's run)."""
    paper = _paper_settings(definition)
    if paper is None:
        return None
    keys, table, defaults = paper
    differing: dict[str, tuple[dict[str, None], dict[str, None]]] = {}  # key -> (ours, the paper's), ordered sets
    outside: dict[str, None] = {}
    for tags, params in runs:
        config = tuple(str(tags.get(k)) for k in keys)
        settings = table.get(config)
        if settings is None:
            outside.setdefault("/".join(config))
            continue
        for key, want in settings.items():
            if want is None or key in EXECUTION_PARAMS:
                continue
            have = params.get(key, defaults.get(key))
            if have != want:
                ours, theirs = differing.setdefault(key, ({}, {}))
                ours.setdefault("not logged" if have is None else have)
                theirs.setdefault(want)
    # Top-level settings first (a suite's budget: total_timesteps, eval_episodes), then by section.
    ordered = sorted(differing.items(), key=lambda item: (item[0].count("."), item[0]))
    return PaperDifferences([SettingDifference(k, tuple(ours), tuple(theirs)) for k, (ours, theirs) in ordered],
                            list(outside))


def paper_differences(definition: SuiteDefinition, runs: _Runs) -> list[str]:
    """:func:`differences` as lines: ``"training.epochs 2 (paper 6)"`` per differing param, then a count
    of configurations the paper profile does not have. Empty when every run is at the paper's settings."""
    found = differences(definition, runs)
    if found is None:
        return [f"suite {definition.name!r} ships no {PAPER_PROFILE!r} profile to compare with"]
    return found.lines()


def paper_caveat(definition: SuiteDefinition, runs: _Runs, profile: str | None = None, *, short: bool = False
                 ) -> str | None:
    """The caveat for ``runs`` beside the paper's figures, or None where they are at its settings: the
    profile, where it is not ``paper``, then every setting that differs and the configurations the paper
    profile does not run. A key the user changed is never hidden behind a count, in a table or a file;
    ``short`` (the terminal's tables) only counts a setting's values where they are several and long. A
    profile whose runs all have the paper's settings (a subset of its grid, as ``memory``'s ``table5``)
    gets none: the settings, not the profile's name, make results comparable."""
    found = differences(definition, runs)
    if found is None:
        return f"not comparable with the paper's figures: suite {definition.name!r} ships no {PAPER_PROFILE!r} profile"
    return not_comparable([d.text(short=short) for d in found.settings], profile,
                          found.outside_text() if found.outside else None)


def not_comparable(settings: Sequence[str], profile: str | None = None, outside: str | None = None) -> str | None:
    """The caveat for results beside the paper's figures (None when there is nothing to say): the
    profile, where it is not ``paper``, the differing ``settings`` (:func:`paper_differences`' lines)
    and the configurations the paper profile does not run (``outside``)."""
    if not settings and not outside:
        return None
    what = [f"profile {profile}"] if profile not in (None, PAPER_PROFILE) else []
    if settings:
        what.append(f"settings other than the paper's: {'; '.join(settings)}")
    if outside:
        what.append(outside)
    return "not comparable with the paper's figures: " + ", ".join(what)


def outcomes_caveat(definition: SuiteDefinition, outcomes: Sequence[RunOutcome]) -> str | None:
    """:func:`paper_caveat` for the runs of a ``run`` invocation (their plans' tags and settings), for the
    terminal table that closes it (``short``)."""
    return paper_caveat(definition, ((o.plan.tags, logged_settings(o.plan.params)) for o in outcomes), short=True)


def footnote_row(note: str, header: Sequence[str]) -> list[str]:
    """A closing row of ``run``'s table: ``note`` in the first cell, the other cells empty. The note is
    one line: the terminal table wraps it to the column's width (text wrapped here beforehand would be
    wrapped again, line by line, wherever the terminal is narrower)."""
    return [note, *[""] * (len(header) - 1)]
