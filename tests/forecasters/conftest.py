"""Forecaster tests run single-threaded: the CI machine has 2 shared cores and torch's spinning
intra-op threads slow everything down under contention."""

from __future__ import annotations

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sktime_conformance: sktime's check_estimator suite per estimator (select with -m)"
    )


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    torch.set_num_threads(1)
