"""The ports from the pure engine to the outside world (HTTP, mail, the clock), as protocols."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, Protocol


@dataclasses.dataclass(frozen=True)
class HttpRequest:
    """An outbound HTTP call; ``idempotency_key`` is sent as the ``Idempotency-Key`` header."""

    method: str
    url: str
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    body: bytes | None = None
    idempotency_key: str | None = None
    timeout: float | None = None  # seconds; None means the configured default
    follow_redirects: bool = True  # False: a 3xx is answered as it is (webhooks)


@dataclasses.dataclass(frozen=True)
class HttpResponse:
    """What came back; ``content`` is parsed JSON when the response was JSON, else text."""

    status_code: int
    headers: Mapping[str, str]
    body: bytes
    content: Any = None


class HttpClient(Protocol):
    def send(self, request: HttpRequest) -> HttpResponse:
        """Send the request. Raises ``OutboundBlocked`` for a host outside the allowlist and
        ``RetryLater`` for connect errors, timeouts, 5xx and 429; other statuses are returned."""


@dataclasses.dataclass(frozen=True)
class EmailMessage:
    to: tuple[str, ...]
    subject: str
    body: str
    sender: str | None = None
    cc: tuple[str, ...] = ()
    bcc: tuple[str, ...] = ()
    message_id: str | None = None  # deterministic, so a retried send can be recognised


class Mailer(Protocol):
    def send(self, message: EmailMessage) -> None:
        """Deliver the message; raises ``RetryLater`` when the server is unreachable."""


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclasses.dataclass(frozen=True)
class EngineServices:
    """What the engine calls out to: HTTP, mail, the clock (tests fix it), a WriteLine sink and
    the ReadLine source (the next line, or None at the end of the input)."""

    http: HttpClient | None = None
    mailer: Mailer | None = None
    clock: Callable[[], dt.datetime] = _utc_now
    write_line: Callable[[str], None] | None = None
    read_line: Callable[[], str | None] | None = None
