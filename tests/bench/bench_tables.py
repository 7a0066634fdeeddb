"""A bench table as a terminal of a given width prints it, read back cell by cell."""

import io

from rich.console import Console


def rendered(renderable, width: int = 80) -> str:
    console = Console(width=width, file=io.StringIO())
    console.print(renderable)
    return console.file.getvalue()


def header(text: str, columns: int) -> list[str]:
    """The first header line of a table of ``columns`` columns."""
    line = next(line for line in text.splitlines() if line.count("┃") == columns + 1)
    return [cell.strip() for cell in line.split("┃")[1:-1]]


def body(text: str, columns: int) -> list[list[str]]:
    """Every body line of the tables of ``columns`` columns, as its cells (a wrapped cell would show as a
    line of its own, so a table whose cells all fit reads back row for row)."""
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines()
            if line.count("│") == columns + 1]


def legend(text: str) -> str:
    """What prints under the last table (its caption), on one line: a caption wraps at any width."""
    lines = text.splitlines()
    last = max(i for i, line in enumerate(lines) if line.lstrip().startswith("└"))
    return " ".join(" ".join(lines[last + 1:]).split())
