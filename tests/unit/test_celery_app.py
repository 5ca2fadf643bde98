"""The worker's queue selection: every workflow queue by default, only `-Q` queues when given."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from celery.signals import setup_logging

from broker.adapters.transport.celery_config import beat_schedule
from broker.names import (
    DEFAULT_QUEUE,
    DELIVER_WEBHOOK,
    MAINTENANCE_QUEUE,
    SYNC_WEBHOOKS,
    WEBHOOK_QUEUE,
)
from broker.registry import WorkflowRegistry
from broker.settings import Settings
from broker.wiring.runtime import Runtime, set_runtime
from tasks.celery_app import _consume_workflow_queues, create_app


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    registry = WorkflowRegistry(settings)
    registry.load()
    rt = Runtime(settings, registry=registry)
    set_runtime(rt)
    yield rt
    set_runtime(None)


def _consumed(app: object) -> set[str]:
    return set(app.amqp.queues.consume_from)  # type: ignore[attr-defined]


def test_a_worker_without_q_consumes_every_workflow_queue(
    settings: Settings, runtime: Runtime
) -> None:
    # Given a worker started without -Q
    app = create_app(settings)
    # When it finishes its setup
    _consume_workflow_queues("w1@host", SimpleNamespace(app=app))
    # Then it consumes the default, maintenance, webhook and each request type's queue
    assert {
        DEFAULT_QUEUE,
        MAINTENANCE_QUEUE,
        WEBHOOK_QUEUE,
        "broker.invoiceprocess",
    } <= _consumed(app)


def test_a_worker_started_with_q_consumes_only_those_queues(
    settings: Settings, runtime: Runtime
) -> None:
    # Given a worker dedicated to the invoice queue (`-Q broker.invoiceprocess`)
    app = create_app(settings)
    app.amqp.queues.select(["broker.invoiceprocess"])
    # When it finishes its setup
    _consume_workflow_queues("w2@host", SimpleNamespace(app=app))
    # Then it did not widen the operator's choice
    assert _consumed(app) == {"broker.invoiceprocess"}


def test_webhook_attempts_have_their_own_queue_and_beat_syncs_the_endpoints(
    settings: Settings,
) -> None:
    app = create_app(settings)
    assert app.conf.task_routes[DELIVER_WEBHOOK] == {"queue": WEBHOOK_QUEUE}
    assert app.conf.task_routes[SYNC_WEBHOOKS] == {"queue": MAINTENANCE_QUEUE}
    assert beat_schedule(settings)["sync-webhooks"]["task"] == SYNC_WEBHOOKS


def test_workers_log_through_the_brokers_redacting_formatter(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the root logger as a Celery worker finds it (restored afterwards)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    monkeypatch.setattr("tasks.celery_app.get_settings", lambda: settings)
    # When Celery asks for its logging to be set up (`celery worker --loglevel DEBUG`)
    setup_logging.send(sender=None, loglevel="DEBUG", logfile=None, format="", colorize=False)
    # Then the broker's formatter logs, at the more verbose level, with credentials masked
    assert root.level == logging.DEBUG
    logging.getLogger("broker.test").warning("calling https://bob:hunter2@elsa.example/x")
    line = capsys.readouterr().err
    assert "elsa.example" in line
    assert "hunter2" not in line


def test_redis_workers_sweep_for_abandoned_messages_within_a_tenth_of_the_visibility_timeout() -> (
    None
):
    from broker.adapters.transport.celery_config import transport_options
    from broker.settings import Settings

    # Given the Redis transport with the default visibility timeout, and a short one
    for visibility, every in (("3600", 10.0), ("8", 1.0), ("40", 4.0)):
        settings = Settings.from_env(
            {
                "BROKER_QUEUE_URL": "redis://127.0.0.1:6379/0",
                "BROKER_TASK_VISIBILITY_TIMEOUT": visibility,
            }
        )
        options = transport_options(settings)
        # Then every worker sweeps on each tick (no throttle), every tenth of it, 1 to 10 s
        assert options["visibility_timeout"] == float(visibility)
        assert options["unacked_restore_interval"] == every
        assert options["unacked_restore_throttle"] == 1


def _record(logger: str, msg: str, args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord(logger, logging.INFO, __file__, 1, msg, args, None)  # type: ignore[arg-type]
    record.__dict__.update(extra)
    return record


def test_celerys_lines_about_maintenance_ticks_are_debug(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a worker's logging at INFO (root handlers restored afterwards)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    monkeypatch.setattr("tasks.celery_app.get_settings", lambda: settings.replace(log_level="INFO"))
    setup_logging.send(sender=None, loglevel="INFO", logfile=None, format="", colorize=False)
    tick = {"name": "broker.relay_outbox", "id": "t1"}
    step = {"name": "broker.run_request", "id": "t2"}
    # When Celery logs a maintenance tick sent, received and done, and a workflow step done
    for name, msg, args, data in [
        (
            "celery.beat",
            "Scheduler: Sending due task %s (%s)",
            ("relay-outbox", tick["name"]),
            None,
        ),
        ("celery.worker.strategy", "Task %(name)s[%(id)s] received", tick, tick),
        ("celery.app.trace", "Task %(name)s[%(id)s] succeeded", tick, tick),
        ("celery.app.trace", "Task %(name)s[%(id)s] succeeded", step, step),
    ]:
        logging.getLogger(name).handle(_record(name, msg, args, data=data))
    # Then only the workflow step's line is written at INFO
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert "broker.run_request[t2] succeeded" in lines[0]
    # And with DEBUG on, the ticks are there again, as DEBUG lines
    level = root.level
    root.setLevel(logging.DEBUG)  # setLevel, not setattr: it clears the loggers' level cache
    try:
        logging.getLogger("celery.app.trace").handle(
            _record("celery.app.trace", "Task %(name)s[%(id)s] succeeded", tick, data=tick)
        )
    finally:
        root.setLevel(level)
    assert '"level": "DEBUG"' in capsys.readouterr().err


def test_the_filesystem_transport_names_a_host_so_kombu_does_not_warn(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Given the embedded default transport
    app = create_app(settings.replace(queue_url="filesystem://"))
    # When its connection is described (as the worker banner and Flower do)
    with caplog.at_level(logging.WARNING, logger="kombu.connection"):
        app.connection_for_read().as_uri()
    # Then kombu has a host and does not warn about a missing one
    assert "No hostname was supplied" not in caplog.text
