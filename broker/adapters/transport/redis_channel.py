"""kombu's Redis transport, with a worker that survives losing Redis while it holds messages
(docs/design.md, section 8)."""

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
