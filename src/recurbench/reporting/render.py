"""Rendering a :class:`~recurbench.reporting.compare.Comparison` as text: a terminal table (rich),
Markdown, CSV or LaTeX. Missing values print as ``—`` (``n/a`` in LaTeX, empty in CSV), never as a
number; a dash in a title or a sentence stays a dash (LaTeX ``---``, ``--``).

A cell reads ``mean ± std (n=k)``; beside the paper: ``mean ± std (n=k); paper p; Δ ours−paper``. A
metric that counts (the layout's ``integer_metrics``: updates) reads as whole numbers, ``50 (n=4)``,
with ``± std`` only where its runs differ.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd
from rich.markup import escape

from recurbench.errors import ConfigError
from recurbench.reporting.compare import Comparison, layout
from recurbench.tables import FittedTable

FORMATS = ("table", "markdown", "csv", "latex")
MISSING = "—"
_METRIC_LABELS = {
    "mse": "MSE",
    "mae": "MAE",
    "train_reward": "train reward",
    "test_reward": "test reward",
    "generalisation_ratio": "test/train",
}


@dataclass(frozen=True)
class TextTable:
    """A titled table of strings: ``frame``'s index columns are ordinary columns already."""

    title: str
    frame: pd.DataFrame


def _num(x: Any, digits: int = 3, signed: bool = False, integer: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    if integer:  # a count: whole numbers, thousands apart (a mean over seeds rounds to one)
        return f"{x:+,.0f}" if signed else f"{x:,.0f}"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def format_cell(row: pd.Series, *, reference: bool, sep: str, integer: bool = False) -> str:
    """``mean ± std (n=k)``, with the paper's value and the difference when ``reference``; with
    ``integer`` (a count) as whole numbers, without ``± 0`` where every run has the same count."""
    if row["n"] == 0 or math.isnan(row["mean"]):
        ours = MISSING
    elif math.isnan(row["std"]) or (integer and row["std"] == 0):
        ours = f"{_num(row['mean'], integer=integer)} (n={row['n']})"
    else:
        ours = f"{_num(row['mean'], integer=integer)} ± {_num(row['std'], integer=integer)} (n={row['n']})"
    if not reference:
        return ours
    return sep.join([ours, f"paper {_num(row.get('paper'), integer=integer)}",
                     f"Δ {_num(row.get('diff'), signed=True, integer=integer)}"])


def _iqm_text(row: pd.Series) -> str:
    if "iqm" not in row or math.isnan(row["iqm"]):
        return MISSING
    return f"{_num(row['iqm'])} [{_num(row['iqm_lo'])}, {_num(row['iqm_hi'])}]"


def text_tables(comp: Comparison, *, sep: str = "; ", short: bool = False) -> list[TextTable]:
    """The comparison as titled string tables: the main table, then win counts or the aggregate IQM,
    then the runs that did not finish; ``short``: for the terminal (:attr:`Comparison.paper_caveat_short`)."""
    text = comp.paper_caveat_short if short else comp.paper_caveat
    caveat = f" — {text}" if text else ""  # said beside the paper's values
    # No run finished: no aggregates to show (a note says so), only the suite's own tables and the list.
    tables = [] if comp.cells.empty else [_main_table(comp, sep, caveat)]
    tables += [TextTable(f"{title}{caveat}", frame) for title, frame in comp.tables]
    if comp.wins is not None:
        rows = []
        for w in comp.wins.to_dict("records"):
            if not w["ours_cells"]:  # no cell has both models: 0/0 says nothing
                continue
            row = {"RSA vs baseline": f"{w['rsa']} vs {w['baseline']}", "ours": _ratio(w, "ours")}
            if "paper_wins" in w:
                row["paper, same cells"] = _ratio(w, "paper")
                row["paper, all cells"] = _ratio(w, "paper_all")
            rows.append(row)
        title = "cells where RSA ≤ baseline (MSE and MAE; ties count as wins, as in the paper)"
        if comp.paper_caveat:
            title += " — ours only: the paper's counts are left out, not comparable (see the table above)"
        if rows:
            tables.append(TextTable(title, pd.DataFrame(rows)))
    if comp.aggregate is not None and len(comp.aggregate):
        agg = comp.aggregate.copy()
        agg["IQM [95% CI]"] = [_iqm_text(r) for _, r in agg.iterrows()]
        agg["metric"] = agg["metric"].map(lambda m: _METRIC_LABELS.get(m, m))
        tables.append(
            TextTable(
                "IQM over all env pairs with ≥ 3 seeds (stratified bootstrap)",
                agg[["agent", "metric", "envs", "runs", "IQM [95% CI]"]].astype(str),
            )
        )
    if len(unresolved := comp.unresolved):
        listed = unresolved.drop(columns=["run_id", "finished_as", "taken_over_by", "driver_gone"])
        listed["status"] = [f"{s} (driver gone)" if gone else s for s, gone in zip(listed["status"], unresolved["driver_gone"], strict=True)]
        if not listed["settings"].astype(bool).any():  # every run at its configuration's settings
            listed = listed.drop(columns="settings")
        for column, fmt in layout(comp.suite).progress.values():  # how far each got; blank if not logged
            listed[column] = ["" if v is None or math.isnan(v) else format(v, fmt) for v in listed[column]]
        listed = listed.fillna("").astype(str)
        tables.append(TextTable("runs that did not finish (not in the aggregates)", listed))
    return tables


def _main_table(comp: Comparison, sep: str, caveat: str) -> TextTable:
    """The aggregates: LTSF's default layout a column per model, every other one a column per metric."""
    counts = layout(comp.suite).integer_metrics
    cells = comp.cells.copy()
    cells["text"] = [format_cell(r, reference=comp.reference == "paper", sep=sep, integer=r["metric"] in counts)
                     for _, r in cells.iterrows()]
    cells["metric"] = cells["metric"].map(lambda m: _METRIC_LABELS.get(m, m))
    label = f"{comp.experiment}" + (f" (profile {comp.profile})" if comp.profile else "")
    if comp.suite == "ltsf" and comp.default_layout:
        wide = cells.pivot_table(index=["dataset", "horizon", "metric"], columns="model", values="text", aggfunc="first", sort=False)
        wide = wide[list(dict.fromkeys(cells["model"]))]
        return TextTable(f"{label}: test MSE/MAE over seeds{caveat}", wide.reset_index())
    index = list(comp.by)
    metrics = list(dict.fromkeys(cells["metric"]))
    wide = cells.pivot_table(index=index, columns="metric", values="text", aggfunc="first", sort=False)[metrics]
    if "iqm" in cells:
        iqm = cells.assign(iqm_text=[_iqm_text(r) for _, r in cells.iterrows()])
        for metric in ("train reward", "test reward"):
            sub = iqm[iqm["metric"] == metric].set_index(index)["iqm_text"]
            if not sub.empty:
                wide[f"{metric} IQM [95% CI]"] = sub
    return TextTable(f"{label}: mean over seeds{caveat}", wide.reset_index())


def _ratio(w: dict[str, Any], prefix: str) -> str:
    text = f"{w[f'{prefix}_wins']}/{w[f'{prefix}_cells']}"
    return text + (f" ({w[f'{prefix}_ties']} tied)" if w.get(f"{prefix}_ties") else "")


def render(comp: Comparison, fmt: str) -> str:
    """Markdown, CSV (the long-form cells, one row per group and metric; beside the paper's values, a
    ``paper_caveat`` column: :attr:`~recurbench.reporting.compare.Comparison.paper_caveat`) or LaTeX text."""
    if fmt == "csv":
        cells = comp.cells
        if comp.reference == "paper":  # beside the paper's values, why they are not comparable ("" where they are)
            cells = cells.assign(paper_caveat=comp.paper_caveat or "")
        return cells.to_csv(index=False, float_format="%.10g")  # no float noise like 0.6999999999999998
    if fmt == "markdown":
        parts = [f"### {t.title}\n\n{markdown_table(t.frame)}" for t in text_tables(comp)]
        return "\n\n".join(parts + [f"*{n}*" for n in comp.notes]) + "\n"
    if fmt == "latex":
        return "\n".join(latex_table(t.frame, t.title) for t in text_tables(comp))
    if fmt == "table":
        raise ConfigError("format 'table' is rendered by rich_tables(), not as plain text")
    raise ConfigError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")


def rich_tables(comp: Comparison) -> list[Any]:
    """rich renderables for the terminal (multi-line cells; values are escaped, never read as markup)."""
    out: list[Any] = []
    for t in text_tables(comp, sep="\n", short=True):
        # Fitted to the terminal (recurbench.tables): cells wrap at spaces, no name or number is cut.
        rows = [[MISSING if _missing(v) else str(v) for v in row] for row in t.frame.itertuples(index=False)]
        names = {"dataset", "horizon", "metric", *comp.by}  # the columns that name a row lead each part of a split
        keys = next((i for i, c in enumerate(t.frame.columns) if c not in names), 0)
        out.append(FittedTable(t.title, [str(c) for c in t.frame.columns], rows, show_lines=True, keys=keys))
    out += [f"[dim]{escape(n)}[/dim]" for n in comp.notes]
    return out


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def markdown_table(frame: pd.DataFrame) -> str:
    def cell(v: Any) -> str:
        return MISSING if _missing(v) else str(v).replace("|", "\\|").replace("\n", "<br>")

    header = "| " + " | ".join(cell(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}"}


#: A missing value inside a cell: ``—`` alone on its line or part, or right after a label (``paper —``,
#: ``Δ —``), and nothing after it on that part. A dash within a sentence (``seeds — not comparable``)
#: is punctuation.
_MISSING_VALUE = re.compile(rf"(?:^|(?<=\n)|(?<=; )|(?<=\w ))(?:{MISSING})(?=$|\n|;)")
_LATEX_SYMBOLS = {"±": r"$\pm$", "Δ": r"$\Delta$", "≤": r"$\leq$", "≥": r"$\geq$", "—": "---", "–": "--"}


def _latex(v: Any, *, cell: bool = True) -> str:
    """``v`` as LaTeX text: a missing value (in a ``cell``: :data:`_MISSING_VALUE`) as ``n/a``; a dash
    in text as LaTeX's em dash (``---``) or en dash (``--``)."""
    if _missing(v) or (cell and v == MISSING):
        return "n/a"
    text = "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(v))
    if cell:
        text = _MISSING_VALUE.sub("n/a", text)
    for symbol, latex in _LATEX_SYMBOLS.items():
        text = text.replace(symbol, latex)
    return text.replace("\n", "; ")


def latex_table(frame: pd.DataFrame, caption: str) -> str:
    """A booktabs ``table`` environment."""
    lines = [
        r"\begin{table}[ht]",
        r"\centering",
        rf"\caption{{{_latex(caption, cell=False)}}}",
        r"\begin{tabular}{" + "l" * len(frame.columns) + "}",
        r"\toprule",
        " & ".join(_latex(c) for c in frame.columns) + r" \\",
        r"\midrule",
        *(" & ".join(_latex(v) for v in row) + r" \\" for row in frame.itertuples(index=False)),
        r"\bottomrule",
        r"\end{tabular}",
        r"\end{table}",
        "",
    ]
    return "\n".join(lines)
