"""Comparison tables and figures from tracked runs.

* :func:`compare` reads a suite's MLflow runs and returns a :class:`Comparison` (DataFrames: cells
  aggregated over seeds beside the papers' values, win counts or IQM aggregates, failed runs);
  :func:`render` / :func:`rich_tables` turn it into Markdown, CSV, LaTeX or a terminal table.
* :func:`write_report` writes an HTML (or Markdown + PNG) report with the figures and tables, and
  logs the figures to the suite's latest parent run.
"""

from recurbench.reporting.compare import LAYOUTS, Comparison, compare, compare_runs
from recurbench.reporting.render import FORMATS, render, rich_tables
from recurbench.reporting.report import REPORT_FORMATS, Report, write_report
from recurbench.reporting.runs import SuiteRuns, load_runs

__all__ = [
    "FORMATS",
    "LAYOUTS",
    "REPORT_FORMATS",
    "Comparison",
    "Report",
    "SuiteRuns",
    "compare",
    "compare_runs",
    "load_runs",
    "render",
    "rich_tables",
    "write_report",
]
