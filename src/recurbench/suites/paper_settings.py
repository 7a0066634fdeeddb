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
SHOWN_DIFFERENCES = 5
"""How many differing settings a caveat names (the rest are counted)."""

_Settings = Mapping[str, str | None]


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


def paper_differences(definition: SuiteDefinition, runs: Iterable[tuple[Mapping[str, str], Mapping[str, str]]]) -> list[str]:
    """How the settings of ``runs`` (each its tags and its params as logged text) differ from the paper
    profile's for the same configuration: ``"training.epochs 2 (paper 6)"`` per differing param, and a
    count of configurations the paper profile does not have. Empty when every run is at the paper's
    settings. A param a run did not log is read at the suite's default for it (an older version's run)."""
    paper = _paper_settings(definition)
    if paper is None:
        return [f"suite {definition.name!r} ships no {PAPER_PROFILE!r} profile to compare with"]
    keys, table, defaults = paper
    differing: dict[str, tuple[dict[str, None], str]] = {}
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
                differing.setdefault(key, ({}, want))[0].setdefault("not logged" if have is None else have)
    # Top-level settings first (a suite's budget: total_timesteps, eval_episodes), then by section.
    ordered = sorted(differing.items(), key=lambda item: (item[0].count("."), item[0]))
    # A setting the paper's profile leaves unset (null: no cap, or derived from another) reads "paper: unset".
    out = [f"{key} {', '.join(values)} (paper{': unset' if want == 'None' else ' ' + want})" for key, (values, want) in ordered]
    if outside:
        names = list(outside)
        out.append(f"{len(names)} configuration(s) the paper profile does not run: {', '.join(names[:3])}"
                   + (", ..." if len(names) > 3 else ""))
    return out


def not_comparable(differences: Sequence[str], profile: str | None = None) -> str | None:
    """The caveat for results beside the paper's figures (None when there is nothing to say): the
    profile, where it is not ``paper``, and the first :data:`SHOWN_DIFFERENCES` differing settings. A
    profile whose runs all have the paper's settings (a subset of its grid, as ``memory``'s ``table5``)
    gets none: the settings, not the profile's name, make results comparable."""
    if not differences:
        return None
    what = [f"profile {profile}"] if profile not in (None, PAPER_PROFILE) else []
    if differences:
        shown = "; ".join(differences[:SHOWN_DIFFERENCES])
        more = len(differences) - SHOWN_DIFFERENCES
        what.append(f"settings other than the paper's: {shown}" + (f"; and {more} more" if more > 0 else ""))
    return "not comparable with the paper's figures: " + ", ".join(what)


def outcomes_caveat(definition: SuiteDefinition, outcomes: Sequence[RunOutcome]) -> str | None:
    """:func:`not_comparable` for the runs of a ``run`` invocation (their plans' tags and settings)."""
    return not_comparable(paper_differences(definition, ((o.plan.tags, logged_settings(o.plan.params)) for o in outcomes)))


def footnote_row(note: str, header: Sequence[str]) -> list[str]:
    """A closing row of ``run``'s table: ``note`` in the first cell, the other cells empty. The note is
    one line: the terminal table wraps it to the column's width (text wrapped here beforehand would be
    wrapped again, line by line, wherever the terminal is narrower)."""
    return [note, *[""] * (len(header) - 1)]
