"""Task adapters and beat jobs while the database is unreachable."""

from __future__ import annotations

import logging

import pytest
from celery.exceptions import TimeLimitExceeded

from broker.adapters.transport.celery_config import step_time_limits
from broker.errors import ConfigError, StoreUnavailable
from broker.names import STEP_KILL_GRACE
from broker.runtime import ids
from broker.runtime.steps import ceiling
from broker.settings import Settings, get_settings
from tasks import app, celery_app
from tasks.celery_app import StepTask, maintenance_job


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
def test_workflow_tasks_retry_soon_while_the_database_is_down(name: str) -> None:
    # Given a task adapter that runs workflow steps
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


@pytest.mark.parametrize(
    "name", ["broker.run_request", "broker.run_child", "broker.resume_instance"]
)
def test_step_tasks_have_a_hard_time_limit_just_past_the_step_ceiling(name: str) -> None:
    # Given the app built from the settings (BROKER_STEP_TIME_LIMIT, default 300 s)
    limit = get_settings().step_time_limit
    # Then each step task is killed by the pool STEP_KILL_GRACE seconds after the ceiling
    task = app.tasks[name]
    assert task.time_limit == limit + STEP_KILL_GRACE
    assert isinstance(task, StepTask)


def test_a_users_run_task_has_no_step_ceiling() -> None:
    assert app.tasks["broker.run_task"].time_limit is None


def test_step_time_limits_follow_the_setting() -> None:
    settings = Settings.from_env({"BROKER_STEP_TIME_LIMIT": "12.5"})
    assert step_time_limits(settings)["broker.run_request"] == {
        "time_limit": 12.5 + STEP_KILL_GRACE
    }


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_step_time_limit_that_is_not_a_positive_number_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="BROKER_STEP_TIME_LIMIT"):
        Settings.from_env({"BROKER_STEP_TIME_LIMIT": value})


def test_a_killed_step_is_faulted_by_the_main_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the pool killed a run_request step at its hard time limit
    calls: list[dict[str, object]] = []
    monkeypatch.setattr(ceiling, "fault_overdue_step", lambda rt, **kw: calls.append(kw))
    monkeypatch.setattr(celery_app, "get_runtime", lambda: None)
    task = app.tasks["broker.run_request"]
    # When Celery reports the failure to the task in the worker's main process
    task.on_failure(
        TimeLimitExceeded(305.0), "t1", (), {"request_id": "r1", "outbox_id": "o1"}, None
    )
    # Then the step's fault is recorded for the request's instance and outbox row
    assert calls == [
        {
            "instance_id": ids.instance_id_for_request("r1"),
            "outbox_id": "o1",
            "request_id": "r1",
        }
    ]
    # And any other failure is left to Celery
    task.on_failure(RuntimeError("boom"), "t2", (), {"request_id": "r2"}, None)
    assert len(calls) == 1
