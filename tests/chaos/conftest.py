"""Chaos tests: real worker processes killed, paused and cut off from their transport.

They are marked ``chaos`` and run after every other test, one at a time: in one process by this
hook, and in ``make test`` by a second pytest run (``-m chaos``) after the parallel one, since
they time their recovery, which other tests' load would only blur. A test kills and pauses only
processes it started, and restarts only a private Redis or PostgreSQL.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: kills or pauses real processes; runs last")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Stable partition: everything else first, chaos tests last, in their own order.
    chaos = [item for item in items if item.get_closest_marker("chaos")]
    if chaos:
        others = [item for item in items if not item.get_closest_marker("chaos")]
        items[:] = others + chaos
