"""Bounded polling for the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    check: Callable[[], Any],
    *,
    timeout: float,
    interval: float = 0.1,
    what: str = "",
    detail: Callable[[], str] | None = None,
) -> Any:
    """Poll ``check`` until it answers something truthy; fail after ``timeout`` seconds (with
    ``detail()``, say the logs of the processes under test, in the message)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            message = f"timed out after {timeout}s waiting for {what or check}"
            raise AssertionError(f"{message}\n{detail()}" if detail else message)
        time.sleep(interval)
