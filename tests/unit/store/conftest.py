"""Store unit tests run on SQLite files under tmp_path; each test starts with no cached engines."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.store.db import dispose_engines


@pytest.fixture(autouse=True)
def fresh_engines() -> Iterator[None]:
    dispose_engines()
    yield
    dispose_engines()
