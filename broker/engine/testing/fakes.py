"""The authors' kit's fakes: HTTP answered from a table, mail kept in an outbox, files kept in
memory. They keep the production contract: every status is an answer, only a missing
connection raises (docs/design.md, "HTTP statuses and resilience")."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Literal

from broker.engine.activities import catalog
from broker.engine.run.ports import FILE_ID, EmailMessage, HttpRequest, HttpResponse, StoredFile
from broker.errors import BadRequest, NotFound, PayloadTooLarge, RetryLater


@dataclasses.dataclass(frozen=True)
class HttpAnswer:
    """What the table answers to one call: a status (any, 5xx included: routing or retrying it
    is the workflow's decision), a JSON (or text, or bytes) body, headers (no body: an empty
    one). ``error`` instead fails the call as a server that cannot be reached (``"connect"``)
    or does not answer in time (``"timeout"``) would."""

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
    gets ``otherwise`` when one is given (e.g. ``HttpAnswer(error="connect")``: no server).

    An entry may be a list of answers: the calls get them in turn, and the last one again once
    the list is spent (a server that fails twice, then answers)."""

    def __init__(
        self,
        answers: Mapping[str, HttpAnswer | int | Any] | None = None,
        *,
        otherwise: HttpAnswer | None = None,
    ) -> None:
        self.answers: dict[str, list[HttpAnswer]] = {}
        self.calls: list[HttpRequest] = []
        self.otherwise = otherwise
        for key, answer in (answers or {}).items():
            sequence: list[Any] = (
                answer if isinstance(answer, list) and _is_sequence(answer) else [answer]
            )
            self.answers[_http_key(key)] = [_as_answer(a) for a in sequence]

    def send(self, request: HttpRequest) -> HttpResponse:
        self.calls.append(request)
        for key in (f"{request.method.upper()} {request.url}", request.url):
            if key in self.answers:
                queue = self.answers[key]
                answer = queue.pop(0) if len(queue) > 1 else queue[0]
                return answer.response()
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


class MemoryFiles:
    """A ``FileStore`` in memory, with the production store's id rule and size cap."""

    def __init__(self, max_bytes: int = 10 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.files: dict[str, tuple[StoredFile, bytes]] = {}

    def put(
        self,
        file_id: str,
        data: bytes,
        *,
        filename: str,
        content_type: str,
        etag: str | None = None,
    ) -> StoredFile:
        if not FILE_ID.fullmatch(file_id):
            raise BadRequest(f"file id {file_id!r} is not a plain name", field="fileId")
        if len(data) > self.max_bytes:
            raise PayloadTooLarge(f"file of {len(data)} bytes exceeds {self.max_bytes} bytes")
        stored = StoredFile(file_id, filename, content_type, len(data), etag)
        self.files[file_id] = (stored, bytes(data))
        return stored

    def read(self, file_id: str) -> tuple[StoredFile, bytes]:
        if file_id not in self.files:
            raise NotFound(f"file {file_id!r} is not stored")
        return self.files[file_id]

    def text(self, reference: Any) -> str:
        """The stored text of a file reference (a ``StoredFile.to_json`` value)."""
        found = StoredFile.from_json(reference)
        assert found is not None, f"{reference!r} is not a file reference"
        return self.read(found.file_id)[1].decode("utf-8")


def _http_key(key: str) -> str:
    method, sep, url = key.strip().partition(" ")
    return f"{method.upper()} {url.strip()}" if sep else method


def _is_sequence(answer: Any) -> bool:
    """A list of ``HttpAnswer`` is a sequence of answers (any other list is a JSON body)."""
    return (
        isinstance(answer, list) and bool(answer) and all(isinstance(a, HttpAnswer) for a in answer)
    )


def _as_answer(answer: HttpAnswer | int | Any) -> HttpAnswer:
    if isinstance(answer, HttpAnswer):
        return answer
    if isinstance(answer, int) and not isinstance(answer, bool):
        return HttpAnswer(status=answer)
    return HttpAnswer(body=answer)


def check_fakes(fakes: Mapping[str, Any]) -> None:
    """Refuse a stand-in for a type that is no Python activity declared in this process (a typo
    would otherwise leave the real activity running under the test)."""
    declared = sorted(set(catalog.CATALOG) - catalog.BUILT_IN)
    for type_name in fakes:
        if type_name not in declared:
            raise ValueError(
                f"activities={{{type_name!r}: ...}} names no Python activity declared in this "
                f"process (declared: {', '.join(declared) or 'none'}); import the team's module "
                "or fix the type name"
            )
