"""Terminal tables that fit the terminal they are printed on (80 columns, 120, a log file's 160).

rich narrows every wrappable column alike when a table is too wide, so a name folds
(``rsa_info`` / ``rmer``) while a cell of several words still had room to wrap, and a column it
cannot narrow enough is cut (``transform…``). :class:`FittedTable` plans the widths itself when it is
rendered, from the width it is given: a column never becomes narrower than its longest word (or its
header's), and the widest columns give way first, so cells wrap at spaces and names stay whole. Where
that would wrap a line of a cell into more than :data:`MAX_PIECES` lines (``paper`` / ``0.290``), a table
with columns naming its rows is split into even parts that keep each line nearly whole. Where
even the longest words do not fit side by side, a short table is transposed, a long one split into
parts that each repeat the columns naming its rows, else printed as one block per row; a single word
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
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

_PADDING = 2  # rich's default: one space each side of a cell
_BORDER = 1
TRANSPOSE_MAX_ROWS = 4
"""A table of at most this many rows is transposed where it is too wide; a longer one is split."""
MAX_PIECES = 2
"""Where narrowing a table to the width would wrap a line of a cell into more pieces than this
(``0.025 ±`` / ``0.000`` / ``(n=2)``, ``paper`` / ``0.290``), and the table has key columns, it is split
into parts instead wherever the parts keep every line within this many pieces."""


def _plain(cell: Any) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _words(text: str, glue: bool = True) -> list[str]:
    # "0.762 ± 0.144" wraps as "0.762 ±" / "0.144" where it can: a ± stays with the number before it.
    return (text.replace(" ±", "_±") if glue else text).split()


def _longest_word(text: str, glue: bool = True) -> int:
    return max((cell_len(word) for word in _words(text, glue)), default=0)


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

    Four layouts, the first that fits: the table as given, its columns narrowed where wrapping costs
    least (split into even parts instead where narrowing would wrap a line into more than
    :data:`MAX_PIECES` and parts keep every line within that); transposed (a row per column, a
    column per row) when it has at most :data:`TRANSPOSE_MAX_ROWS` rows; split into several tables
    side by side no more, each repeating the first ``keys`` columns (the names of a row:
    ``language``, ``model``) before as many other columns as fit; one block per row (a
    ``column: value`` line per cell), which fits any width."""

    def __init__(self, title: str, header: Sequence[Any], rows: Sequence[Sequence[Any]], *,
                 caption: str | None = None, show_lines: bool = False, keys: int = 0) -> None:
        self.title = title
        self.header = [str(h) for h in header]
        self.rows = [[row[i] if i < len(row) else "" for i in range(len(self.header))] for row in rows]
        self.caption = caption
        self.show_lines = show_lines
        self.keys = keys

    def tables(self, width: int) -> list[Table]:
        """The rich table(s) laid out for ``width`` columns."""
        for glue in (True, False):  # "0.762 ±" / "0.144" on two lines, else on three before any split
            if (plan := _plan(self.header, self.rows, width, glue=glue)) is not False:
                if (plan is not None and 0 < self.keys < len(self.header)
                        and _pieces(self.header, self.rows, plan, glue) > MAX_PIECES
                        and (split := self._split(width, max_pieces=MAX_PIECES))):
                    return split  # parts whose lines stay nearly whole read better than lines in shreds
                return [self._build(self.title, self.header, self.rows, plan)]
        columns = [[h, *(row[i] for row in self.rows)] for i, h in enumerate(self.header)]
        if len(self.rows) <= TRANSPOSE_MAX_ROWS and (plan := _plan([""] * len(columns[0]), columns, width)) is not False:
            return [self._build(self.title, [""] * len(columns[0]), columns, plan, show_header=False)]
        if 0 < self.keys < len(self.header) and (split := self._split(width)):
            return split
        records = [[h, row[i]] for row in self.rows for i, h in enumerate(self.header)]
        table = self._build(self.title, ["", ""], [], _plan(["", ""], records, width) or None, show_header=False)
        for row in self.rows:
            for i, h in enumerate(self.header):
                table.add_row(escape(h), _cell(row[i]), end_section=i == len(self.header) - 1)
        return [table]

    def _split(self, width: int, max_pieces: int | None = None) -> list[Table]:
        """Column groups that each fit beside the key columns, as tables one under the other; [] when
        the keys and any one other column do not fit together. With ``max_pieces``, a group fits only
        where no line of its cells wraps into more pieces than that, and the groups (as many as packing
        them in order needs) are as even in size as fit: four columns in two parts, two and two, not
        three and one (a split only to keep lines whole; otherwise each part takes as many as fit)."""
        def fits(group: Sequence[int]) -> bool:
            header, rows = self._columns(group)
            plan = _plan(header, rows, width)
            return plan is not False and (max_pieces is None or plan is None or _pieces(header, rows, plan) <= max_pieces)

        groups: list[list[int]] = []
        group: list[int] = []
        for i in range(self.keys, len(self.header)):
            if fits([*group, i]):
                group.append(i)
            elif not group:
                return []
            else:
                groups.append(group)
                group = [i]
        groups.append(group)
        others = list(range(self.keys, len(self.header)))
        size, extra = divmod(len(others), len(groups))
        even = [others[n * size + min(n, extra):(n + 1) * size + min(n + 1, extra)] for n in range(len(groups))]
        if max_pieces is not None and all(fits(g) for g in even):
            groups = even
        out = []
        for n, group in enumerate(groups, start=1):
            header, rows = self._columns(group)
            # A title of several lines (a caveat) prints in full once; the later parts say whose they are.
            title = self.title if n == 1 or cell_len(self.title) <= width else "the table above, continued"
            out.append(self._build(f"{title} ({n}/{len(groups)})", header, rows, _plan(header, rows, width) or None))
        return out

    def _columns(self, group: Sequence[int]) -> tuple[list[str], list[list[Any]]]:
        """The header and rows of the key columns and then the columns ``group``."""
        chosen = [*range(self.keys), *group]
        return [self.header[c] for c in chosen], [[row[c] for c in chosen] for row in self.rows]

    def _build(self, title: str, header: Sequence[str], rows: Sequence[Sequence[Any]], widths: list[int] | None, *,
               show_header: bool = True) -> Table:
        table = Table(title=escape(title), show_header=show_header, show_lines=self.show_lines)
        for i, name in enumerate(header):
            table.add_column(escape(name), overflow="fold", width=None if widths is None else widths[i])
        for row in rows:
            table.add_row(*map(_cell, row))
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for table in self.tables(options.max_width):
            title = str(table.title or "")
            if cell_len(title) > Measurement.get(console, options, table).maximum:
                # A title wider than its table (a caveat) reads at the terminal's width, not squeezed above it.
                table.title = None
                yield Text(Text.from_markup(title).plain, style="italic")
            yield table
        if self.caption:  # at the terminal's width, not the table's (a narrow table would squeeze it)
            yield Text(self.caption)


def _cell(cell: Any) -> Any:
    return cell if isinstance(cell, Text) else escape(str(cell))


def _wrapped_lines(text: str, width: int, glue: bool = True) -> int:
    """How many lines ``text``'s longest-wrapping line takes in a column ``width`` wide, wrapped at
    spaces as rich wraps it (a ``±`` kept with the number before it where ``glue``)."""
    most = 1
    for line in text.splitlines():
        lines, used = 1, -1
        for word in _words(line, glue):
            if used >= 0 and used + 1 + cell_len(word) > width:
                lines, used = lines + 1, cell_len(word)
            else:
                used += 1 + cell_len(word)
        most = max(most, lines)
    return most


def _pieces(header: Sequence[str], rows: Sequence[Sequence[Any]], widths: Sequence[int], glue: bool = True) -> int:
    """The most lines any one line of a cell (or of the header) wraps into at ``widths``."""
    return max(_wrapped_lines(_plain(cell), widths[i], glue)
               for line in (header, *rows) for i, cell in enumerate(line) if i < len(widths))


def _plan(header: Sequence[str], rows: Sequence[Sequence[Any]], width: int, *,
          glue: bool = True) -> list[int] | None | bool:
    """Column widths for ``width`` (None: rich's own layout fits), or False where even the longest
    words do not fit side by side."""
    columns = range(len(header))
    texts = [[_plain(row[i]) for row in rows if i < len(row)] for i in columns]
    maximum = [max([_longest_line(header[i]), *map(_longest_line, texts[i])]) for i in columns]
    minimum = [max([_longest_word(header[i]), *(_longest_word(t, glue) for t in texts[i])]) for i in columns]
    available = width - len(header) * _PADDING - (len(header) + 1) * _BORDER
    if sum(minimum) > available:
        return False
    return fit_widths(maximum, minimum, available)
