"""Multi-host tests: hosts in network namespaces, made and removed by each test (root only)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "multihost: makes network namespaces and runs roles on several test hosts"
    )
