"""Suites: YAML definitions shipped with the package (``<name>.yaml``), each with its
:class:`~recurbench.suites.base.SuiteDefinition` (``<name>.py``); :mod:`~recurbench.suites.registry`
names them, :mod:`~recurbench.suites.runner` runs them (:func:`~recurbench.suites.runner.run_suite`).
"""
