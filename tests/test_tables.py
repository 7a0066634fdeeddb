"""Terminal tables fit 80 and 120 columns with every name and number whole."""

from __future__ import annotations

import pytest
from rich.console import Console

from recurbench.tables import FittedTable, fit_widths

# The shapes of the tables the issue found cut: langs' model names, memory's exponents, ltsf's ten columns.
HEADER = ["language", "model", "seeds", "bin 0 (last)", "bin 1 (last)", "bin 0 (best epoch)", "bin 1 (best epoch)",
          "paper bin 0", "paper bin 1", "grad norm t=1", "grad norm t=T", "s/epoch"]
ROWS = [
    ["parity", model, "1/1", "0.512 ± 0.010", "0.498 ± 0.012", "0.530", "0.501", "1.00 ± 0.00", "0.52 ± 0.01",
     "4.02e-05", "1.75e-12", "3.1"]
    for model in ("transformer", "transformer_rel", "rsa_ii", "lstm")
]


def _render(renderable, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


@pytest.mark.parametrize("width", [80, 120])
def test_a_wide_table_fits_the_terminal_with_every_word_whole(width):
    text = _render(FittedTable("langs / quick", HEADER, ROWS, caption="seeds n/m: n finished of m"), width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    words = {word for row in ROWS for cell in row for word in cell.split()}
    for word in words:  # wrapping may move a word to the next line, never split or cut it
        assert word in text, (word, text)
    assert "seeds n/m: n finished of m" in " ".join(text.split())


def test_the_widest_columns_give_way_first_and_never_below_their_longest_word():
    # maximum widths 20, 10, 5 with minimums 8, 9, 5 in 27 columns: the first narrows from 20 to 12 and no further.
    assert fit_widths([20, 10, 5], [8, 9, 5], 27) == [12, 10, 5]
    assert fit_widths([20, 10, 5], [8, 9, 5], 20) == [8, 9, 5]  # as narrow as the words allow; rich folds the rest
    assert fit_widths([20, 10, 5], [8, 9, 5], 40) is None  # fits: rich's own layout


def test_a_name_longer_than_the_terminal_folds_rather_than_being_cut():
    name = "a_model_name_far_longer_than_any_terminal_column_could_hold_at_forty"
    text = _render(FittedTable("t", ["model", "MSE"], [[name, "0.901"]]), 40)
    assert "…" not in text and "0.901" in text
    # Its pieces, read line after line in its column, give the whole name back.
    pieces = [line.split("│")[2].strip() for line in text.splitlines() if line.count("│") == 3]
    assert name in "".join(pieces), text


def test_a_long_table_too_wide_splits_into_parts_each_led_by_the_names_of_its_rows():
    rows = ROWS * 3  # 12 rows: too many to transpose
    text = _render(FittedTable("langs / quick", HEADER, rows, keys=2), 80)
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    parts = [line.strip() for line in text.splitlines() if line.strip().startswith("langs / quick (")]
    assert len(parts) >= 2 and parts[0] == f"langs / quick (1/{len(parts)})"
    # Each part names its rows: every model appears once per row in each part.
    assert text.count("transformer_rel") == 3 * len(parts)
    for header in HEADER:  # every column is in some part, whole or wrapped at its spaces
        assert all(word in text for word in header.split()), header


def test_a_table_whose_lines_would_wrap_to_shreds_splits_into_even_parts_with_lines_whole():
    """`compare langs` at 80 columns: four cells of three lines each ("0.025 ± 0.000 (n=2)", "paper 0.290",
    "Δ -0.265") were narrowed to ten characters, six lines a cell ("paper" / "0.290"). It now prints
    two parts of two columns each, every line of a cell whole; a caveat of a title prints once."""
    cell = "0.025 ± 0.000 (n=2)\npaper 0.290\nΔ -0.265"
    header = ["language", "model", "bin0_last", "bin1_last", "bin0_best", "bin1_best"]
    rows = [[language, model, cell, cell, cell, cell] for language in ("parity", "d2") for model in ("transformer", "rsa_ii")]
    title = "recurbench-langs (profile tiny): mean over seeds — not comparable with the paper's figures: " * 2
    text = _render(FittedTable(title, header, rows, keys=2, show_lines=True), 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    heads = [[c.strip() for c in line.split("┃")[1:-1]] for line in text.splitlines() if line.count("┃") == 5]
    assert heads == [["language", "model", "bin0_last", "bin1_last"], ["language", "model", "bin0_best", "bin1_best"]]
    lines = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.count("│") == 5]
    assert [line[2:] for line in lines] == [[part, part] for _ in range(2 * len(rows)) for part in cell.splitlines()]
    assert " ".join(text.split()).count("not comparable") == 2  # the title (which says it twice) once
    assert "the table above, continued (2/2)" in text
    # Where the table fits with lines wrapped into two pieces at most, it stays one table.
    wide = _render(FittedTable("t", header, rows, keys=2, show_lines=True), 100)
    assert "(1/2)" not in wide and wide.count("┃ language") == 1
