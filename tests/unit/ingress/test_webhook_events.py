"""``POST /webhook-events``: an inbound webhook event (Elsa's ``WebhookEvent``) from an mTLS
client becomes a bookmark queue item owned by that client; a malformed one changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.registry.triggers import trigger_hash
from broker.store.models import BookmarkQueueItem


def test_an_event_is_queued_for_its_sender_with_its_stimulus_hash(
    client_as: Callable[[str], FlaskClient], session_factory: sessionmaker[Session]
) -> None:
    event = {
        "eventType": "order.shipped",
        "payload": {"id": 7},
        "timestamp": "2026-01-01T00:00:00Z",
    }
    response = client_as("ClientA").post("/webhook-events", json=event)
    assert response.status_code == 202
    item_id = response.get_json()["queueItemId"]
    with session_factory() as session:
        item = session.get_one(BookmarkQueueItem, item_id)
        assert (item.name, item.client_key, item.payload) == (
            "Elsa.WebhookEventReceived",
            "clienta",
            event,
        )
        assert item.hash == trigger_hash(
            "Elsa.WebhookEventReceived", {"eventType": "order.shipped"}
        )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "eventType"),
        ({"eventType": ""}, "eventType"),
        ({"eventType": "a\nb"}, "eventType"),
        ({"eventType": "x", "timestamp": "yesterday"}, "timestamp"),
        ({"eventType": "x", "extra": 1}, "body"),
        ([], "body"),
    ],
)
def test_a_malformed_event_is_refused_naming_the_field_and_nothing_is_queued(
    client_as: Callable[[str], FlaskClient],
    session_factory: sessionmaker[Session],
    body: Any,
    field: str,
) -> None:
    response = client_as("ClientA").post("/webhook-events", json=body)
    assert response.status_code == 400
    assert response.get_json()["field"] == field
    with session_factory() as session:
        assert session.scalars(select(BookmarkQueueItem)).all() == []
