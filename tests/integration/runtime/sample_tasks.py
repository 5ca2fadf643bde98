"""A RunTask target for the tests: listed in BROKER_TASK_MODULES by the worker's environment."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(name="sample.double")  # type: ignore[untyped-decorator]
def double(payload: dict[str, Any]) -> dict[str, Any]:
    return {"doubled": int(payload["n"]) * 2}
