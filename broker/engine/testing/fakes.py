"""The authors' kit's fakes: HTTP answered from a table, mail kept in an outbox."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Literal

from broker.engine.run.ports import EmailMessage, HttpRequest, HttpResponse
from broker.errors import RetryLater


@dataclasses.dataclass(frozen=True)
class HttpAnswer:
    """What the table answers to one call: a status, a JSON (or text) body, headers (no body:
    an empty one). ``error`` instead fails the call as a server that cannot be reached
    (``"connect"``) or does not answer in time (``"timeout"``) would."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    error: Literal["connect", "timeout"] | None = None

    def response(self) -> HttpResponse:
        """The response; for an ``error`` answer, the ``RetryLater`` an HTTP activity handles
        through its ``Failed to connect`` or ``Timeout`` port (or retries)."""
        if self.error is not None:
            raise RetryLater(f"simulated {self.error} failure", reason=self.error)
        if self.body is None:
            return HttpResponse(self.status, dict(self.headers), b"", None)
        if isinstance(self.body, bytes):
            raw, content = self.body, self.body.decode("utf-8", "replace")
            kind = "application/octet-stream"
        elif isinstance(self.body, str):
            raw, content, kind = self.body.encode(), self.body, "text/plain"
        else:
            raw, content = json.dumps(self.body).encode(), self.body
            kind = "application/json"
        headers = {"Content-Type": kind, **self.headers}
        return HttpResponse(self.status, headers, raw, content)


class HttpTable:
    """An ``HttpClient`` that answers from a table keyed by ``"METHOD url"`` (or the URL alone
    for any method) and records every call; a call the table does not know fails the test, or
    gets ``otherwise`` when one is given (e.g. ``HttpAnswer(error="connect")``: no server)."""

    def __init__(
        self,
        answers: Mapping[str, HttpAnswer | int | Any] | None = None,
        *,
        otherwise: HttpAnswer | None = None,
    ) -> None:
        self.answers: dict[str, HttpAnswer] = {}
        self.calls: list[HttpRequest] = []
        self.otherwise = otherwise
        for key, answer in (answers or {}).items():
            self.answers[_http_key(key)] = _as_answer(answer)

    def send(self, request: HttpRequest) -> HttpResponse:
        self.calls.append(request)
        for key in (f"{request.method.upper()} {request.url}", request.url):
            if key in self.answers:
                return self.answers[key].response()
        if self.otherwise is not None:
            return self.otherwise.response()
        known = ", ".join(sorted(self.answers)) or "none"
        raise AssertionError(
            f"no answer for {request.method.upper()} {request.url} in the HTTP table ({known})"
        )


class MailOutbox:
    """A ``Mailer`` that keeps what it is given."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []

    def send(self, message: EmailMessage) -> None:
        self.messages.append(message)


def _http_key(key: str) -> str:
    method, sep, url = key.strip().partition(" ")
    return f"{method.upper()} {url.strip()}" if sep else method


def _as_answer(answer: HttpAnswer | int | Any) -> HttpAnswer:
    if isinstance(answer, HttpAnswer):
        return answer
    if isinstance(answer, int) and not isinstance(answer, bool):
        return HttpAnswer(status=answer)
    return HttpAnswer(body=answer)
