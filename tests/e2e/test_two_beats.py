"""Two beats running at once by mistake, under load: no maintenance job's effect happens twice.

Both ``celery -A tasks beat`` processes send every tick (relay, bookmark queue, timers, recovery,
purge) to the same worker; only the jobs' own locks and deterministic row ids keep them apart.
The run lasts ``DURATION`` seconds, with ``REQUESTS`` requests that each post to the sink once,
sleep on a timer and wait for an event sent at once. At the stack's 0.3 s intervals both beats
send each fast job about sixty times in that while, and the recovery job (every 5 s) several
times; a longer run adds ticks, not new overlaps.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select

from broker.runtime import ids
from broker.store.db import transaction
from broker.store.models import (
    ActivityExecution,
    BookmarkQueueItem,
    Request,
    RequestEvent,
    Timer,
)
from tests.e2e.live import LiveStack, running_stack

pytestmark = pytest.mark.slow

REQUESTS = 100
DURATION = 20.0
COMPLETION_TIMEOUT = 90.0


def run_load(stack: LiveStack) -> tuple[list[str], list[str]]:
    """Submit the load (an event right behind each request); answers (request ids, item ids)."""
    request_ids, item_ids = [], []
    for n in range(REQUESTS):
        key = f"load-{n}"
        request_id = stack.submit("Load", payload={"n": n}, idempotency_key=key)
        # A client retrying its submission gets the same record, not a second request.
        assert stack.submit("Load", payload={"n": n}, idempotency_key=key) == request_id
        response = stack.event("load-go", request_id)
        assert response.status == 202
        request_ids.append(request_id)
        item_ids.append(response.body["queueItemId"])
    return request_ids, item_ids


def wait_all_completed(stack: LiveStack, request_ids: list[str]) -> None:
    deadline = time.monotonic() + COMPLETION_TIMEOUT
    while True:
        with transaction(stack.factory, write=False) as session:
            done = session.scalar(
                select(func.count())
                .select_from(Request)
                .where(Request.id.in_(request_ids), Request.status == "Completed")
            )
        if done == len(request_ids):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{done}/{len(request_ids)} completed\n{stack.tails()}")
        time.sleep(0.5)


def ticks(stack: LiveStack, index: int) -> Counter[str]:
    """How many ticks of each job a beat sent (from its log)."""
    sent: Counter[str] = Counter()
    for line in stack.beat(index).log_text().splitlines():
        if "Sending due task" in line:
            sent[line.rsplit("Sending due task", 1)[1].split()[0]] += 1
    return sent


def check_no_double_effects(stack: LiveStack, request_ids: list[str], item_ids: list[str]) -> None:
    instance_ids = [ids.instance_id_for_request(r) for r in request_ids]
    with transaction(stack.factory, write=False) as session:
        # Each request completed once: one RequestCompleted event each.
        completed = Counter(
            session.scalars(
                select(RequestEvent.request_id).where(
                    RequestEvent.request_id.in_(request_ids),
                    RequestEvent.event_type == "RequestCompleted",
                )
            )
        )
        assert completed == Counter(request_ids)
        # Each timer fired once: one row per instance, fired, and its delay resumed once.
        timers = session.scalars(select(Timer).where(Timer.instance_id.in_(instance_ids))).all()
        assert sorted(t.instance_id for t in timers) == sorted(instance_ids)
        assert all(t.fired_at is not None and t.fired_at >= t.due_at for t in timers)
        for activity_id in ("delay", "wait"):
            resumed = Counter(
                session.scalars(
                    select(ActivityExecution.instance_id).where(
                        ActivityExecution.instance_id.in_(instance_ids),
                        ActivityExecution.activity_id == activity_id,
                        ActivityExecution.event_name == "Resumed",
                    )
                )
            )
            assert resumed == Counter(instance_ids), activity_id
        # Each event was delivered to its one bookmark once.
        attempts = dict(
            session.execute(
                select(BookmarkQueueItem.id, BookmarkQueueItem.delivery_attempts).where(
                    BookmarkQueueItem.id.in_(item_ids)
                )
            ).all()
        )
        # (every item is still there: a missing one was dead-lettered, not delivered)
        assert set(attempts) == set(item_ids), attempts
        assert all(attempts[i] == 1 for i in item_ids), attempts
    # Each instance's HTTP call reached the sink once, under its own Idempotency-Key.
    with stack.sink.lock:
        calls = Counter(key for path, key in stack.sink.calls if path == "/load")
    assert len(calls) == REQUESTS
    assert set(calls.values()) == {1}
    assert {str(key).split(":")[0] for key in calls} == set(instance_ids)


@pytest.mark.parametrize("backend", ["embedded", "production"])
def test_two_beats_under_load_cause_no_double_effects(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    urls: dict[str, str] = {}
    if backend == "production":
        redis_url = str(request.getfixturevalue("redis_url"))
        urls = {
            "database_url": str(request.getfixturevalue("postgres_url")),
            "queue_url": redis_url,
            "lock_url": redis_url,
        }
    # Given a stack with two beats
    with running_stack(tmp_path / "stack", beats=2, **urls) as stack:
        began = time.monotonic()
        # When a hundred requests, their timers and their events run through it
        request_ids, item_ids = run_load(stack)
        wait_all_completed(stack, request_ids)
        # (and both beats keep ticking for the rest of the run)
        remaining = DURATION - (time.monotonic() - began)
        if remaining > 0:
            time.sleep(remaining)
        # Then both beats sent every fast job's ticks
        for index in (1, 2):
            sent = ticks(stack, index)
            for job in ("relay-outbox", "process-bookmark-queue", "fire-timers"):
                assert sent[job] > 10, (index, sent)
            assert sent["recover-stalled"] >= 2, (index, sent)
        # And no effect happened twice
        check_no_double_effects(stack, request_ids, item_ids)
