"""Comparison tables and figures from tracked runs.

* :mod:`.runs` reads a suite's runs back from MLflow (which runs count, at which settings);
* :mod:`.compare` aggregates them over seeds beside the papers' values (a :class:`~.compare.Comparison`),
  :mod:`.render` turns that into a terminal table, Markdown, CSV or LaTeX;
* :mod:`.report` writes an HTML (or Markdown + PNG) report with the figures of :mod:`.figures`;
* :mod:`.by_suite` holds each suite's part and the entry points by suite name:
  :func:`~.by_suite.compare` and :func:`~.by_suite.write_report`.
"""
