"""Suites: YAML definitions shipped with the package and the runner that executes them."""

from recurbench.suites.runner import (
    SUITES,
    RunOutcome,
    RunPlan,
    SuiteDefinition,
    SuiteResult,
    list_suites,
    load_profile,
    run_suite,
)

__all__ = [
    "SUITES",
    "RunOutcome",
    "RunPlan",
    "SuiteDefinition",
    "SuiteResult",
    "list_suites",
    "load_profile",
    "run_suite",
]
