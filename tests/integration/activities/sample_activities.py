"""A task-mode activity for the tests, whose service is down while a file exists (the test
creates and removes it): listed in BROKER_TASK_MODULES by the worker's environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.activities import activity


@activity("Samples.Fragile", category="Samples", queue="samples.fragile", outputs=("echo",))
def fragile(text: str, down_while: str) -> dict[str, Any]:
    if Path(down_while).exists():
        raise RuntimeError("the fragile service is down")
    return {"echo": text.upper()}
