"""Triggers start workflows (events, schedules), in-process on SQLite and PostgreSQL.

The workflows are the files of ``tests/fixtures/workflows/triggers``. Each test drives the jobs
with explicit times, so every firing is deterministic; the worker tests show the same on a clock.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from broker.runtime.bookmarks import queue as bookmarks
from broker.runtime.bookmarks import schedules
from broker.runtime.bookmarks.triggers import SYSTEM_CLIENT
from broker.runtime.steps import runner
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import (
    Client,
    OutboxRow,
    Request,
    RequestEvent,
    RequestTypeRule,
    Schedule,
)
from broker.wiring.runtime import Runtime
from tests.support.doubles import RecordingSender
from tests.support.runtime import prepare, request_status, runtime_env, submit_request
from tests.support.services import PROJECT_ROOT
from tests.support.workflows import activity, literal, workflow, write_workflow

TRIGGERS = PROJECT_ROOT / "tests" / "fixtures" / "workflows" / "triggers"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def rt(database_url: str, tmp_path: Path) -> Iterator[Runtime]:
    dispose_engines()
    folder = tmp_path / "wf"
    folder.mkdir()
    for path in TRIGGERS.glob("*.json"):
        shutil.copy(path, folder / path.name)
    settings = Settings.from_env(
        runtime_env(tmp_path / "var", database_url=database_url, workflows=folder)
    )
    factory, registry = prepare(settings)
    with transaction(factory) as session:
        session.add(
            RequestTypeRule(
                client_key="clienta",
                request_type_key="orderplaced",
                client_id="ClientA",
                request_type="OrderPlaced",
                required_keys=[],
                allow_additional_keys=True,
                enabled=True,
            )
        )
    yield Runtime(settings, factory=factory, registry=registry, sender=RecordingSender())
    dispose_engines()


def requests_of(rt: Runtime, definition_id: str) -> list[Request]:
    with transaction(rt.factory, write=False) as session:
        found = list(
            session.scalars(
                select(Request)
                .where(Request.definition_id == definition_id)
                .order_by(Request.submitted_at, Request.id)
            )
        )
        session.expunge_all()
        return found


def send_event(rt: Runtime, item_id: str, client_key: str, payload: Any = None) -> list[str]:
    with transaction(rt.factory) as session:
        bookmarks.enqueue_stimulus(
            session, item_id=item_id, name="order-placed", payload=payload, client_key=client_key
        )
    with transaction(rt.factory) as session:
        _, written = bookmarks.process_due_items(session, rt.settings, registry=rt.registry)
    return written


def run(rt: Runtime, request_id: str) -> None:
    with transaction(rt.factory, write=False) as session:
        row = session.scalars(select(OutboxRow).where(OutboxRow.request_id == request_id)).first()
        assert row is not None
        row_id = row.id
    runner.run_request(rt, request_id, row_id)


def test_an_event_starts_one_instance_per_event_owned_by_its_permitted_sender(
    rt: Runtime,
) -> None:
    # Given ClientA may submit OrderPlaced, whose workflow an order-placed event starts
    # When ClientA sends the event and the queue job runs twice
    written = send_event(rt, "ev-1", "clienta", {"order": 7})
    with transaction(rt.factory) as session:
        _, again = bookmarks.process_due_items(session, rt.settings, registry=rt.registry)
    # Then exactly one request was started, owned by ClientA, with its audit history
    assert len(written) == 1
    assert again == []
    [started] = requests_of(rt, "event-trigger")
    assert (started.client_id, started.request_type, started.status) == (
        "ClientA",
        "OrderPlaced",
        "Queued",
    )
    with transaction(rt.factory, write=False) as session:
        event = session.scalars(
            select(RequestEvent).where(RequestEvent.request_id == started.id)
        ).one()
        assert (event.event_type, event.source) == ("RequestSubmitted", "ingress")
        assert event.properties is not None
        assert event.properties["trigger"] == "Elsa.Event"
    # And the instance starts at its trigger, with the event's payload as the Event's result
    run(rt, started.id)
    assert request_status(rt.factory, started.id) == "Completed"
    with transaction(rt.factory, write=False) as session:
        assert session.get_one(Request, started.id).result == {"order": {"order": 7}}
    # And a second event starts a second instance; an event from a client without the
    # request type, or whose rule requires keys (an event has none), starts none
    with transaction(rt.factory) as session:
        session.add(
            RequestTypeRule(
                client_key="clientk",
                request_type_key="orderplaced",
                client_id="ClientK",
                request_type="OrderPlaced",
                required_keys=["Ref"],
                allow_additional_keys=False,
                enabled=True,
            )
        )
    send_event(rt, "ev-2", "clienta")
    send_event(rt, "ev-3", "clientb")
    send_event(rt, "ev-4", "clientk")
    assert len(requests_of(rt, "event-trigger")) == 2


def test_a_timer_fires_once_per_due_time_then_every_interval_and_once_after_downtime(
    rt: Runtime,
) -> None:
    # Given the published timer trigger (every 2 s), armed at T0
    with transaction(rt.factory) as session:
        schedules.sync(session, rt.registry, T0)
        row = session.scalars(select(Schedule).where(Schedule.kind == "Elsa.Timer")).one()
        assert row.due_at == T0 + dt.timedelta(seconds=2)

    def fire(at: dt.datetime) -> int:
        """Run the job at ``at``; answers how many timer instances exist now."""
        with transaction(rt.factory) as session:
            schedules.sync(session, rt.registry, at)
            schedules.fire_due(session, rt.registry, at)
        return len(requests_of(rt, "timer-trigger"))

    # When the job runs before, at and (a second beat) again at the due time
    assert fire(T0 + dt.timedelta(seconds=1)) == 0
    assert fire(T0 + dt.timedelta(seconds=2)) == 1
    assert fire(T0 + dt.timedelta(seconds=2, milliseconds=500)) == 1
    # And a redelivered firing of the same due time (the row put back) starts nothing more
    with transaction(rt.factory) as session:
        timer = session.scalars(select(Schedule).where(Schedule.kind == "Elsa.Timer")).one()
        timer.due_at = T0 + dt.timedelta(seconds=2)
    assert fire(T0 + dt.timedelta(seconds=3)) == 1
    # Then the next interval fires again, and after 100 s of downtime it fires once, in phase
    assert fire(T0 + dt.timedelta(seconds=4)) == 2
    assert fire(T0 + dt.timedelta(seconds=104, milliseconds=300)) == 3
    with transaction(rt.factory, write=False) as session:
        timer = session.scalars(select(Schedule).where(Schedule.kind == "Elsa.Timer")).one()
        assert timer.due_at == T0 + dt.timedelta(seconds=106)
    started = requests_of(rt, "timer-trigger")
    assert len(started) == 3
    assert {r.client_id for r in started} == {SYSTEM_CLIENT}
    # And each started instance runs through its Timer at once (it is the trigger)
    run(rt, started[0].id)
    assert request_status(rt.factory, started[0].id) == "Completed"


def test_cron_and_start_at_fire_at_their_times(rt: Runtime) -> None:
    with transaction(rt.factory) as session:
        schedules.sync(session, rt.registry, T0 + dt.timedelta(seconds=1))
        due = {r.kind: r.due_at for r in session.scalars(select(Schedule))}
    # Cron "*/3 * * * * *": the next multiple of 3 seconds; StartAt: its date and time
    assert due["Elsa.Cron"] == T0 + dt.timedelta(seconds=3)
    assert due["Elsa.StartAt"] == T0 + dt.timedelta(seconds=10)
    with transaction(rt.factory) as session:
        schedules.fire_due(session, rt.registry, T0 + dt.timedelta(seconds=10))
        rows = {r.kind: r for r in session.scalars(select(Schedule))}
        # StartAt fired once and is disarmed; Cron moved to its next time after now
        assert rows["Elsa.StartAt"].due_at is None
        assert rows["Elsa.Cron"].due_at == T0 + dt.timedelta(seconds=12)
    assert len(requests_of(rt, "cron-trigger")) == 1
    assert len(requests_of(rt, "start-at-trigger")) == 1


def test_the_timer_job_arms_the_schedules_of_new_workflows_itself(rt: Runtime) -> None:
    # Given loaded workflows whose schedules were never armed
    # When the timer job runs, Then it arms them at the current time: the StartAt (in the past)
    # fires, the next cron mark is still ahead
    assert bookmarks.fire_timers(rt) == 1
    assert len(requests_of(rt, "start-at-trigger")) == 1
    assert requests_of(rt, "cron-trigger") == []
    with transaction(rt.factory, write=False) as session:
        cron = session.scalars(select(Schedule).where(Schedule.kind == "Elsa.Cron")).one()
        assert cron.due_at is not None
        assert cron.due_at > dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_queue_job_starts_what_an_event_triggers_for_a_client_of_the_allowlist(
    rt: Runtime, enabled: bool
) -> None:
    # Given ClientA in the allowlist, enabled or withdrawn (its request-type rule stays)
    with transaction(rt.factory) as session:
        session.add(
            Client(client_key="clienta", client_id="ClientA", thumbprint="AB" * 20, enabled=enabled)
        )
        bookmarks.enqueue_stimulus(
            session, item_id="ev-q", name="order-placed", payload=None, client_key="clienta"
        )
    # When the queue job runs, Then the event starts the workflow only for an allowed client
    report = bookmarks.process_queue(rt)
    assert (report.matched, report.waiting) == ((1, 0) if enabled else (0, 1))
    assert len(requests_of(rt, "event-trigger")) == (1 if enabled else 0)


def test_the_timer_job_arms_and_fires_the_schedules_of_the_loaded_workflows(rt: Runtime) -> None:
    # Given schedules armed in the past (the job reads the clock itself)
    with transaction(rt.factory) as session:
        schedules.sync(session, rt.registry, T0)
    # When the timer job runs
    fired = bookmarks.fire_timers(rt)
    # Then every due schedule started its workflow, and the job counted them
    assert len(requests_of(rt, "cron-trigger")) == 1
    assert len(requests_of(rt, "start-at-trigger")) == 1
    assert fired >= 2


def test_a_new_version_moves_its_schedules_and_a_removed_file_takes_them_away(
    rt: Runtime,
) -> None:
    folder = Path(rt.settings.workflow_paths[0])
    with transaction(rt.factory) as session:
        schedules.sync(session, rt.registry, T0)
    # When the timer workflow is changed (a new version) and the registry reloads
    path = folder / "timer-trigger.json"
    document = json.loads(path.read_text())
    document["description"] = "changed"
    path.write_text(json.dumps(document))
    rt.registry.load()
    current = rt.registry.get_definition("timer-trigger")
    with transaction(rt.factory) as session:
        schedules.sync(session, rt.registry, T0 + dt.timedelta(seconds=1))
        [row] = session.scalars(select(Schedule).where(Schedule.definition_id == "timer-trigger"))
        # Then its schedule belongs to the new version and keeps its due time
        assert row.definition_version_id == current.version_id
        assert row.due_at == T0 + dt.timedelta(seconds=2)
    # And when the file is removed, its schedule goes
    path.unlink()
    rt.registry.load()
    with transaction(rt.factory) as session:
        schedules.sync(session, rt.registry, T0 + dt.timedelta(seconds=2))
        kinds = [r.definition_id for r in session.scalars(select(Schedule))]
    assert "timer-trigger" not in kinds


def test_an_event_a_workflow_publishes_starts_the_matching_workflow_for_its_client(
    rt: Runtime, tmp_path: Path
) -> None:
    # Given a workflow of ClientZ that publishes order-placed (ClientZ may not submit OrderPlaced)
    folder = Path(rt.settings.workflow_paths[0])
    write_workflow(
        folder,
        workflow(
            "publisher",
            [activity("publish", "Elsa.PublishEvent", eventName=literal("order-placed"))],
            request_type="Publisher",
        ),
    )
    rt.registry.load()
    request_id = submit_request(rt.factory, rt.registry, "Publisher", client_id="ClientZ")
    run(rt, request_id)
    # When the bookmark-queue job runs
    with transaction(rt.factory) as session:
        _, written = bookmarks.process_due_items(session, rt.settings, registry=rt.registry)
    # Then the event-triggered workflow was started once, owned by the publishing request's client
    assert len(written) == 1
    [started] = requests_of(rt, "event-trigger")
    assert started.client_id == "ClientZ"
    with transaction(rt.factory, write=False) as session:
        event = session.scalars(
            select(RequestEvent).where(RequestEvent.request_id == started.id)
        ).one()
        assert event.source == "workflow"


def test_a_webhook_event_starts_its_workflow_and_resumes_a_waiting_one(rt: Runtime) -> None:
    # Given ClientA may submit WebhookOrders (started by order.shipped) and has an instance of
    # another workflow waiting, mid-way, for an order.shipped webhook event
    with transaction(rt.factory) as session:
        session.add(
            RequestTypeRule(
                client_key="clienta",
                request_type_key="webhookorders",
                client_id="ClientA",
                request_type="WebhookOrders",
                required_keys=[],
                allow_additional_keys=True,
                enabled=True,
            )
        )
    waiting_doc = workflow(
        "webhook-wait",
        [activity("hook", "Elsa.WebhookEventReceived", eventType="order.shipped")],
        request_type="WebhookWait",
    )
    write_workflow(Path(rt.settings.workflow_paths[0]), waiting_doc)
    rt.registry.load()
    waiting = submit_request(rt.factory, rt.registry, "WebhookWait", client_id="ClientA")
    run(rt, waiting)
    assert request_status(rt.factory, waiting) == "Processing"
    # When ClientA's webhook event is queued and the queue job runs (twice)
    event = {"eventType": "order.shipped", "payload": {"id": 7}, "timestamp": None}
    with transaction(rt.factory) as session:
        bookmarks.enqueue_stimulus(
            session,
            item_id="hook-1",
            name="Elsa.WebhookEventReceived",
            payload=event,
            client_key="clienta",
            stimulus={"eventType": "order.shipped"},
        )
    with transaction(rt.factory) as session:
        _, written = bookmarks.process_due_items(session, rt.settings, registry=rt.registry)
    with transaction(rt.factory) as session:
        _, again = bookmarks.process_due_items(session, rt.settings, registry=rt.registry)
    # Then one resume and one start were written, once
    assert len(written) == 2
    assert again == []
    [started] = requests_of(rt, "webhook-trigger")
    assert (started.client_id, started.request_type) == ("ClientA", "WebhookOrders")
    run(rt, started.id)
    with transaction(rt.factory, write=False) as session:
        assert session.get_one(Request, started.id).result == {"shipment": {"id": 7}}
        resume = session.scalars(
            select(OutboxRow).where(
                OutboxRow.request_id == waiting, OutboxRow.task_name == "broker.resume_instance"
            )
        ).one()
        args = dict(resume.args or {})
    runner.resume_instance(
        rt,
        args["instance_id"],
        resume.id,
        bookmark_id=args["bookmark_id"],
        queue_item_id=args["queue_item_id"],
    )
    assert request_status(rt.factory, waiting) == "Completed"


def test_an_event_of_another_type_or_client_starts_and_resumes_nothing(rt: Runtime) -> None:
    # An order.created event, and an order.shipped one from a client without the request type
    with transaction(rt.factory) as session:
        for item_id, kind, client in (
            ("a", "order.created", "clienta"),
            ("b", "order.shipped", "x"),
        ):
            bookmarks.enqueue_stimulus(
                session,
                item_id=item_id,
                name="Elsa.WebhookEventReceived",
                payload={"eventType": kind},
                client_key=client,
                stimulus={"eventType": kind},
            )
    with transaction(rt.factory) as session:
        _, written = bookmarks.process_due_items(session, rt.settings, registry=rt.registry)
    assert written == []
    assert requests_of(rt, "webhook-trigger") == []
