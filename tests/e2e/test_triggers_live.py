"""Triggers through the real runtime: gunicorn over mutual TLS, a Celery worker and two beats.

The workflows are the files of ``tests/fixtures/workflows/triggers``: a Timer every 2 s, a Cron
every 3 s, an Event and an HttpEndpoint open to DevClient only. Two beats run on purpose: each
schedule firing must still start one instance. Only generous upper time bounds are asserted.
"""

from __future__ import annotations

import datetime as dt
import itertools
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from broker.runtime import ids
from broker.store.db import transaction
from broker.store.models import Request, RequestEvent, StepResult
from tests.e2e.live import DEV, OTHER, LiveStack, running_stack
from tests.support.services import PROJECT_ROOT

pytestmark = pytest.mark.slow

TRIGGERS = PROJECT_ROOT / "tests" / "fixtures" / "workflows" / "triggers"
WAIT = 60.0


def started(stack: LiveStack, definition_id: str) -> list[tuple[Request, dict[str, Any]]]:
    """The requests a definition's trigger started, with their trigger, oldest first."""
    with transaction(stack.factory, write=False) as session:
        rows = list(
            session.scalars(
                select(Request)
                .where(Request.definition_id == definition_id)
                .order_by(Request.submitted_at)
            )
        )
        found = []
        for row in rows:
            pending = session.get(
                StepResult, (ids.instance_id_for_request(row.id), "pending-start")
            )
            trigger = dict((pending.output or {}).get("trigger") or {}) if pending else {}
            found.append((row, trigger))
        session.expunge_all()
        return found


def test_triggers_start_workflows_through_the_real_runtime(tmp_path: Path) -> None:
    root = tmp_path / "stack"
    (root / "workflows").mkdir(parents=True)
    for path in TRIGGERS.glob("*.json"):
        if path.name != "start-at-trigger.json":  # a date in the past would fire at once
            shutil.copy(path, root / "workflows" / path.name)
    with running_stack(root, beats=2) as stack:
        # An HttpEndpoint answers its WriteHttpResponse synchronously over mutual TLS
        answer = stack.call(DEV, "POST", "/workflows/hello", {"greeting": "hi"})
        assert answer.status == 201, answer
        assert answer.body == {"greeting": "hi"}
        assert answer.headers["Content-Type"].startswith("application/json")
        # and a client not permitted its request type gets 403
        assert stack.call(OTHER, "POST", "/workflows/hello", {"greeting": "hi"}).status == 403

        # An Event trigger starts exactly one instance per event, for a permitted sender
        for n in (1, 2):
            response = stack.event("order-placed", f"order-{n}", {"order": n})
            assert response.status == 202
        assert stack.event("order-placed", "order-x", {"order": 0}, client=OTHER).status == 202

        def events_done() -> bool:
            runs = started(stack, "event-trigger")
            return len(runs) == 2 and all(r.status == "Completed" for r, _ in runs)

        stack.wait_for(
            events_done, timeout=WAIT, interval=0.3, what="two event-started requests to complete"
        )

        # The Timer fires three times on schedule, and two beats do not double it
        def three_ticks() -> bool:
            runs = started(stack, "timer-trigger")
            return len(runs) >= 3 and all(r.status == "Completed" for r, _ in runs[:3])

        stack.wait_for(three_ticks, timeout=WAIT, interval=0.3, what="three timer firings")
        # The Cron fires at its due times (every 3 seconds)
        stack.wait_for(
            lambda: any(r.status == "Completed" for r, _ in started(stack, "cron-trigger")),
            timeout=WAIT,
            interval=0.3,
            what="a cron firing",
        )
        time.sleep(2.5)  # both beats keep ticking a little longer

        # Then: one request per event, owned by the sender, with the event as its result
        events = started(stack, "event-trigger")
        assert len(events) == 2
        assert {r.client_id for r, _ in events} == {DEV}
        assert sorted(r.result["order"]["order"] for r, _ in events) == [1, 2]
        # And one instance per timer due time, due times on the 2-second schedule, each
        # started at or after its due time
        ticks = started(stack, "timer-trigger")
        due = [dt.datetime.fromisoformat(t["dueAt"]) for _, t in ticks]
        assert len(set(due)) == len(due) >= 3
        # (a loaded machine may make the job late: a missed tick then fires once, in phase)
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(due)]
        assert all(gap > 0 and gap % 2 == 0 for gap in gaps), gaps
        assert all(r.submitted_at >= d for (r, _), d in zip(ticks, due, strict=True))
        assert {r.client_id for r, _ in ticks} == {"system"}
        # And the cron fired on its 3-second marks, once per mark
        crons = started(stack, "cron-trigger")
        cron_due = [dt.datetime.fromisoformat(t["dueAt"]) for _, t in crons]
        assert all(d.second % 3 == 0 and d.microsecond == 0 for d in cron_due)
        assert len(set(cron_due)) == len(cron_due)
        assert all(r.submitted_at >= d for (r, _), d in zip(crons, cron_due, strict=True))
        # And each started request has its audit history, naming the trigger: the event's
        # through the API for its owner, the timer's (owned by the system client) in the store
        history = stack.call(DEV, "GET", f"/requests/{events[0][0].id}/events")
        assert history.status == 200, history
        first = history.body[0] if isinstance(history.body, list) else history.body["items"][0]
        assert first["eventType"] == "RequestSubmitted"
        with transaction(stack.factory, write=False) as session:
            tick = session.scalars(
                select(RequestEvent)
                .where(RequestEvent.request_id == ticks[0][0].id)
                .order_by(RequestEvent.id)
            ).first()
            assert tick is not None
            assert (tick.source, tick.message) == ("beat", "Started by trigger Elsa.Timer (tick)")
