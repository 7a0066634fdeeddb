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
from functools import lru_cache

from recurbench.errors import ConfigError
from recurbench.records import EXECUTION_PARAMS, logged_settings
from recurbench.suites.base import RunOutcome, SuiteDefinition

PAPER_PROFILE = "paper"
SHOWN_CONFIGURATIONS = 3
"""How many configurations the paper profile does not run a caveat names (the rest are counted: the
tables list them anyway). Every differing setting is named, always."""

_Settings = Mapping[str, str | None]
_Runs = Iterable[tuple[Mapping[str, str], Mapping[str, str]]]


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
    table = {tuple(str(tags[k]) for k in keys): params for tags, params in shipped}
    return keys, table, definition.param_defaults()


def _differences(definition: SuiteDefinition, runs: _Runs) -> tuple[list[str], list[str]] | None:
    """:func:`paper_differences` in two parts: the differing settings (``"training.epochs 2 (paper 6)"``)
    and the configurations the paper profile does not run; None for a suite without a paper profile."""
    paper = _paper_settings(definition)
    if paper is None:
        return None
    keys, table, defaults = paper
    # key -> (the runs' values, the paper's values for the same configurations), each in order met
    differing: dict[str, tuple[dict[str, None], dict[str, None]]] = {}
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
                values, paper_values = differing.setdefault(key, ({}, {}))
                values.setdefault("not logged" if have is None else have)
                paper_values.setdefault(want)
    # Top-level settings first (a suite's budget: total_timesteps, eval_episodes), then by section.
    ordered = sorted(differing.items(), key=lambda item: (item[0].count("."), item[0]))
    return [f"{key} {', '.join(values)} ({_paper_values(list(wants))})" for key, (values, wants) in ordered], list(outside)


def _paper_values(values: Sequence[str]) -> str:
    """The paper profile's values of a setting, in words: one that leaves it unset (null: no cap, or
    derived from another) reads ``paper: unset``, not ``paper None``."""
    named = [v for v in values if v != "None"]
    if not named:
        return "paper: unset"
    return f"paper {', '.join(named)}" + (", or unset" if len(named) < len(values) else "")


def paper_differences(definition: SuiteDefinition, runs: _Runs) -> list[str]:
    """How the settings of ``runs`` (each its tags and its params as logged text) differ from the paper
    profile's for the same configuration: ``"training.epochs 2 (paper 6)"`` per differing param (every
    value the runs have, and every value the paper profile has for their configurations), and a count of
    configurations the paper profile does not have. Empty when every run is at the paper's settings. A
    param a run did not log is read at the suite's default for it (an older version's run)."""
    found = _differences(definition, runs)
    if found is None:
        return [f"suite {definition.name!r} ships no {PAPER_PROFILE!r} profile to compare with"]
    settings, outside = found
    return settings + ([_outside_text(outside)] if outside else [])


def _outside_text(names: Sequence[str]) -> str:
    return (f"{len(names)} configuration(s) the paper profile does not run: {', '.join(names[:SHOWN_CONFIGURATIONS])}"
            + (", ..." if len(names) > SHOWN_CONFIGURATIONS else ""))


def paper_caveat(definition: SuiteDefinition, runs: _Runs, profile: str | None = None) -> str | None:
    """The caveat for ``runs`` beside the paper's figures (:func:`not_comparable` of their differences),
    or None where they are at the paper's settings."""
    found = _differences(definition, runs)
    if found is None:
        return f"not comparable with the paper's figures: suite {definition.name!r} ships no {PAPER_PROFILE!r} profile"
    settings, outside = found
    return not_comparable(settings, profile, outside)


def not_comparable(differences: Sequence[str], profile: str | None = None, outside: Sequence[str] = ()
                   ) -> str | None:
    """The caveat for results beside the paper's figures (None when there is nothing to say): the
    profile, where it is not ``paper``, every setting that differs (``differences``: a key the user
    changed is never hidden behind a count, in a table or a file), and the configurations the paper
    profile does not run (``outside``). A profile whose runs all have the paper's settings (a subset of
    its grid, as ``memory``'s ``table5``) gets none: the settings, not the profile's name, make results
    comparable."""
    if not differences and not outside:
        return None
    what = [f"profile {profile}"] if profile not in (None, PAPER_PROFILE) else []
    if differences:
        what.append(f"settings other than the paper's: {'; '.join(differences)}")
    if outside:
        what.append(_outside_text(outside))
    return "not comparable with the paper's figures: " + ", ".join(what)


def outcomes_caveat(definition: SuiteDefinition, outcomes: Sequence[RunOutcome]) -> str | None:
    """:func:`not_comparable` for the runs of a ``run`` invocation (their plans' tags and settings)."""
    return paper_caveat(definition, ((o.plan.tags, logged_settings(o.plan.params)) for o in outcomes))


def footnote_row(note: str, header: Sequence[str]) -> list[str]:
    """A closing row of ``run``'s table: ``note`` in the first cell, the other cells empty. The note is
    one line: the terminal table wraps it to the column's width (text wrapped here beforehand would be
    wrapped again, line by line, wherever the terminal is narrower)."""
    return [note, *[""] * (len(header) - 1)]
