"""Terminal tables that fit the terminal they are printed on (80 columns, 120, a log file's 160).

rich narrows every wrappable column alike when a table is too wide, so a name folds
(``rsa_info`` / ``rmer``) while a cell of several words still had room to wrap, and a column it
cannot narrow enough is cut (``transform…``). :class:`FittedTable` plans the widths itself when it is
rendered, from the width it is given: a column never becomes narrower than its longest word (or its
header's), and the widest columns give way first, so cells wrap at spaces and names stay whole. Where
even the longest words do not fit side by side, the table is transposed (fewer rows than columns: a
row per column) or printed as one block per row (a ``column: value`` line per cell), and a single word
wider than the terminal folds (``overflow="fold"``): every character still prints.

Cells are plain text, never rich markup (``[informer]`` would vanish); a :class:`rich.text.Text` cell
keeps its style.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.table import Table
from rich.text import Text

_PADDING = 2  # rich's default: one space each side of a cell
_BORDER = 1


def _plain(cell: Any) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _longest_word(text: str) -> int:
    # "0.762 ± 0.144" wraps as "0.762 ±" / "0.144": a ± stays with the number before it.
    return max((cell_len(word) for word in text.replace(" ±", "_±").split()), default=0)


def _longest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def fit_widths(maximum: Sequence[int], minimum: Sequence[int], available: int) -> list[int] | None:
    """Column widths (content only) that sum to at most ``available``: the widest column is narrowed
    first, one character at a time, never below its ``minimum``. None when every column fits as it is."""
    widths = list(maximum)
    excess = sum(widths) - available
    if excess <= 0:
        return None
    while excess > 0:
        narrowable = [i for i, w in enumerate(widths) if w > minimum[i]]
        if not narrowable:
            break  # even the longest words do not fit: rich folds them
        widest = max(narrowable, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return widths


class FittedTable:
    """A titled table of text cells laid out for the width it is printed at (see the module docstring);
    ``caption`` (a legend, notes) prints under it, wrapped to the width.

    Three layouts, the first that fits: the table as given, its columns narrowed where wrapping costs
    least; transposed (a row per column, a column per row) when there are more columns than rows; one
    block per row (a ``column: value`` line per cell), which fits any width."""

    def __init__(self, title: str, header: Sequence[Any], rows: Sequence[Sequence[Any]], *,
                 caption: str | None = None, show_lines: bool = False) -> None:
        self.title = title
        self.header = [str(h) for h in header]
        self.rows = [list(row) for row in rows]
        self.caption = caption
        self.show_lines = show_lines

    def table(self, width: int) -> Table:
        """The rich table laid out for ``width`` columns."""
        plan = _plan(self.header, self.rows, width)
        if plan is not False:
            return self._build(self.header, self.rows, plan, show_header=True)
        columns = [[h, *(row[i] if i < len(row) else "" for row in self.rows)] for i, h in enumerate(self.header)]
        if len(self.rows) < len(self.header) and (plan := _plan([""] * len(columns[0]), columns, width)) is not False:
            return self._build([""] * len(columns[0]), columns, plan, show_header=False)
        records: list[list[Any]] = []
        for row in self.rows:
            records += [[h, row[i] if i < len(row) else ""] for i, h in enumerate(self.header)]
        plan = _plan(["", ""], records, width)
        table = self._build(["", ""], [], plan or None, show_header=False)
        for row in self.rows:
            for i, h in enumerate(self.header):
                last = i == len(self.header) - 1
                table.add_row(escape(h), _cell(row[i] if i < len(row) else ""), end_section=last)
        return table

    def _build(self, header: Sequence[str], rows: Sequence[Sequence[Any]], widths: list[int] | None, *,
               show_header: bool, show_lines: bool | None = None) -> Table:
        table = Table(title=escape(self.title), show_header=show_header,
                      show_lines=self.show_lines if show_lines is None else show_lines)
        for i, name in enumerate(header):
            table.add_column(escape(name), overflow="fold", width=None if widths is None else widths[i])
        for row in rows:
            table.add_row(*map(_cell, row))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)
        if self.caption:  # at the terminal's width, not the table's (a narrow table would squeeze it)
            yield Text(self.caption)


def _cell(cell: Any) -> Any:
    return cell if isinstance(cell, Text) else escape(str(cell))


def _plan(header: Sequence[str], rows: Sequence[Sequence[Any]], width: int) -> list[int] | None | bool:
    """Column widths for ``width`` (None: rich's own layout fits), or False where even the longest
    words do not fit side by side."""
    columns = range(len(header))
    texts = [[_plain(row[i]) for row in rows if i < len(row)] for i in columns]
    maximum = [max([_longest_line(header[i]), *map(_longest_line, texts[i])]) for i in columns]
    minimum = [max([_longest_word(header[i]), *map(_longest_word, texts[i])]) for i in columns]
    available = width - len(header) * _PADDING - (len(header) + 1) * _BORDER
    if sum(minimum) > available:
        return False
    return fit_widths(maximum, minimum, available)
