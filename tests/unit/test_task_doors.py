"""Task doors and beat jobs while the database is unreachable."""

from __future__ import annotations

import logging

import pytest

from broker.errors import StoreUnavailable
from tasks import app
from tasks.celery_app import maintenance_job


@pytest.mark.parametrize(
    "name",
    [
        "broker.run_request",
        "broker.run_child",
        "broker.resume_instance",
        "broker.run_task",
        "broker.deliver_webhook",
    ],
)
def test_workflow_doors_retry_soon_while_the_database_is_down(name: str) -> None:
    # Given a door that runs workflow steps
    task = app.tasks[name]
    # Then a StoreUnavailable retries it with a short, capped backoff instead of failing it
    assert StoreUnavailable in task.autoretry_for
    assert task.retry_backoff_max <= 10
    assert task.max_retries is not None


def test_a_beat_job_skips_its_tick_with_one_warning_while_the_database_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a job whose database is unreachable
    @maintenance_job
    def relay() -> int:
        raise StoreUnavailable("the database is unreachable")

    # When beat runs it
    with caplog.at_level(logging.WARNING):
        result = relay()
    # Then the tick is skipped with one warning and no traceback
    assert result is None
    [record] = [r for r in caplog.records if "skipped this tick" in r.getMessage()]
    assert record.exc_info is None
