"""Times, sizes and ratios as the tables print them (recurbench.units, their one home)."""

from __future__ import annotations

import pytest

from recurbench.units import duration, megabytes, times


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (0.1834, "183 ms"), (0.0004, "0.4 ms"), (1.2449, "1.24 s"),
                                               (61.0, "61 s"), (403.2, "403 s"), (5432.4, "5,432 s")])
def test_a_measured_time_reads_in_three_figures(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (42.4, "42 s"), (89.0, "89 s"), (90.0, "2 min"),
                                               (12 * 60 + 10, "12 min"), (5399.0, "90 min"), (5400.0, "1.5 h"),
                                               (3.44 * 3600, "3.4 h")])
def test_an_estimate_reads_roughly_in_its_unit(seconds, text):
    assert duration(seconds, rough=True) == text


def test_sizes_and_ratios():
    assert [megabytes(n) for n in (None, 12.34e6, 6511.2e6)] == ["-", "12.3 MB", "6,511 MB"]
    assert [times(r) for r in (None, 24.44, 1)] == ["-", "24.4×", "1×"]
