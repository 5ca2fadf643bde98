"""Chaos tests: real worker processes killed, paused and cut off from their transport.

They are marked ``chaos``. In one process they run after every other test; under pytest-xdist
(``make test``) each file runs whole on one worker, beside other files. Either way is safe: a test
kills and pauses only processes it started, and restarts only a private Redis or PostgreSQL.
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
