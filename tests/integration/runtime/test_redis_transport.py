"""The broker's Redis transport: a worker that lost Redis while holding unacknowledged messages
closes its broken connection with a connection error (which Celery ignores and reconnects after),
not the ``AttributeError`` that stops stock kombu's worker with "Unrecoverable error"."""

from __future__ import annotations

import kombu
import pytest

from broker.adapters.transport.celery_config import REDIS_TRANSPORT, create_celery
from broker.settings import Settings


def holding_an_unacked_message(url: str, transport: str) -> kombu.Connection:
    """A connection whose channel has delivered one message not yet acknowledged."""
    conn = kombu.Connection(url, transport=transport)
    channel = conn.default_channel
    raw = channel.prepare_message("{}")
    raw["properties"]["delivery_tag"] = "tag-1"
    raw["properties"]["delivery_info"] = {"exchange": "", "routing_key": "broker.default"}
    channel.qos.append(channel.message_to_python(raw), "tag-1")
    return conn


def close_as_the_consumer_does_after_a_connection_loss(conn: kombu.Connection) -> None:
    # Celery's consumer collects the broken connection (the transport is detached) and then
    # closes it; the channel, still open when its first close failed mid-read, closes again.
    conn._do_close_transport()
    conn.close()


def test_stock_kombu_fails_to_close_a_detached_channel_holding_messages(redis_url: str) -> None:
    # Given stock kombu's Redis transport holding an unacknowledged message
    conn = holding_an_unacked_message(redis_url, "redis")
    # When the consumer closes it after a connection loss
    # Then kombu raises AttributeError: no connection error, so the worker stops
    with pytest.raises(AttributeError):
        close_as_the_consumer_does_after_a_connection_loss(conn)


def test_the_broker_transport_closes_a_detached_channel_holding_messages(redis_url: str) -> None:
    # Given the broker's Redis transport holding an unacknowledged message
    conn = holding_an_unacked_message(redis_url, REDIS_TRANSPORT)
    # When the consumer closes it after a connection loss
    # Then it closes without error (the worker goes on to reconnect)
    channel = conn.default_channel
    close_as_the_consumer_does_after_a_connection_loss(conn)
    assert channel.closed


def test_redis_urls_select_the_broker_transport(tmp_path: object) -> None:
    settings = Settings.from_env(
        {"BROKER_QUEUE_URL": "redis://127.0.0.1:6379/0", "BROKER_VAR_DIR": str(tmp_path)}
    )
    app = create_celery(settings, set_as_current=False)
    assert app.conf.broker_transport == REDIS_TRANSPORT
