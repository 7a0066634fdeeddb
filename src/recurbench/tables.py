"""Terminal tables that fit the terminal they are printed on (80 columns, 120, a log file's 160).

rich narrows every wrappable column alike when a table is too wide, so a name folds
(``rsa_info`` / ``rmer``) while a cell of several words still had room to wrap, and a column it
cannot narrow enough is cut (``transform…``). :class:`FittedTable` plans the widths itself when it is
rendered, from the width it is given: a column never becomes narrower than its longest word (or its
header's), and the widest columns give way first, so cells wrap at spaces and names stay whole. Where
even the longest words do not fit, the cells fold (``overflow="fold"``): every character still prints.

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
    """A titled table of text cells whose column widths are planned for the width it is printed at
    (see the module docstring); ``caption`` (a legend, notes) prints under it, wrapped to the width."""

    def __init__(self, title: str, header: Sequence[Any], rows: Sequence[Sequence[Any]], *,
                 caption: str | None = None, show_lines: bool = False) -> None:
        self.title = title
        self.header = [str(h) for h in header]
        self.rows = [list(row) for row in rows]
        self.caption = caption
        self.show_lines = show_lines

    def _widths(self, available: int) -> list[int] | None:
        columns = range(len(self.header))
        texts = [[_plain(row[i]) for row in self.rows if i < len(row)] for i in columns]
        maximum = [max([_longest_line(self.header[i]), *map(_longest_line, texts[i])]) for i in columns]
        minimum = [max([_longest_word(self.header[i]), *map(_longest_word, texts[i])]) for i in columns]
        frame = len(self.header) * _PADDING + (len(self.header) + 1) * _BORDER
        return fit_widths(maximum, minimum, available - frame)

    def table(self, width: int) -> Table:
        """The rich table planned for ``width`` columns."""
        widths = self._widths(width)
        table = Table(title=escape(self.title), show_lines=self.show_lines)
        for i, name in enumerate(self.header):
            table.add_column(escape(name), overflow="fold", width=None if widths is None else widths[i])
        for row in self.rows:
            table.add_row(*(cell if isinstance(cell, Text) else escape(str(cell)) for cell in row))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)
        if self.caption:  # at the terminal's width, not the table's (a narrow table would squeeze it)
            yield Text(self.caption)
