"""kombu's Redis transport, with a worker that survives losing Redis while it holds messages.

When a worker's connection to Redis breaks, Celery first collects the connection (kombu detaches
the transport from it) and then closes it. If the consumer's channel was still reading at the
first close, it is closed again at the second, and closing it puts the unacknowledged messages
back, which needs the transport's connection settings, gone by then: kombu raises
``AttributeError``, not a connection error, and the worker stops with "Unrecoverable error"
instead of reconnecting. Here that case raises a connection error, which the close ignores, and
the worker reconnects. Nothing is lost by not putting those messages back from the worker: Redis
keeps them in its unacknowledged set (given back after the visibility timeout), and after a
restart that emptied Redis the outbox relay publishes them again (docs/design.md, section 7).
Celery selects it with ``broker_transport`` (``celery_config.configure``); the URL stays
``redis://``.
"""

from __future__ import annotations

from typing import Any

import redis.exceptions
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError(
                "the Redis transport was closed (connection lost); not reconnecting this channel"
            )
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]


class Transport(kombu_redis.Transport):
    Channel = Channel
