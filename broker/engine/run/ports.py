"""The ports from the pure engine to the outside world (HTTP, mail, files, the clock), as
protocols."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from broker.engine.model.resilience import HttpStrategy


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
    #: 0 for the first call of an activity, n for its n-th resilience retry: a retry is a new
    #: call (its own recorded effect), under the same ``Idempotency-Key``
    attempt: int = 0
    #: the largest body read (None: the configured cap); a download reads up to the file cap
    max_response_bytes: int | None = None


@dataclasses.dataclass(frozen=True)
class HttpResponse:
    """What came back; ``content`` is parsed JSON when the response was JSON, else text."""

    status_code: int
    headers: Mapping[str, str]
    body: bytes
    content: Any = None


class HttpClient(Protocol):
    def send(self, request: HttpRequest) -> HttpResponse:
        """Send the request and answer whatever status comes back (routing or retrying a status
        is the caller's decision). Raises ``OutboundBlocked`` for a host outside the allowlist
        and ``RetryLater`` (``reason`` ``connect`` or ``timeout``) when no response arrives."""


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


@dataclasses.dataclass(frozen=True)
class StoredFile:
    """A file in the broker's file storage, as activities pass it on (Elsa's ``HttpFile``):
    ``to_json`` is the reference a workflow holds in variables and outputs."""

    file_id: str
    filename: str
    content_type: str
    size: int
    etag: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "fileId": self.file_id,
            "filename": self.filename,
            "contentType": self.content_type,
            "size": self.size,
            "eTag": self.etag,
        }

    @classmethod
    def from_json(cls, value: Any) -> StoredFile | None:
        """The file a reference names, or None when ``value`` is no file reference."""
        if not isinstance(value, Mapping) or not isinstance(value.get("fileId"), str):
            return None
        size = value.get("size")
        return cls(
            file_id=value["fileId"],
            filename=str(value.get("filename") or ""),
            content_type=str(value.get("contentType") or ""),
            size=size if isinstance(size, int) and not isinstance(size, bool) else 0,
            etag=value.get("eTag") if isinstance(value.get("eTag"), str) else None,
        )


#: what a stored file's id may be: a plain name, never a path
FILE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


class FileStore(Protocol):
    """The broker's storage for files (downloads, file responses)."""

    max_bytes: int

    def put(
        self,
        file_id: str,
        data: bytes,
        *,
        filename: str,
        content_type: str,
        etag: str | None = None,
    ) -> StoredFile:
        """Store ``data`` under ``file_id`` (the same id again replaces it: a redone step stores
        its file once). Raises ``PayloadTooLarge`` over ``max_bytes``, ``BadRequest`` for an id
        that is not a plain name."""

    def read(self, file_id: str) -> tuple[StoredFile, bytes]:
        """The file and its bytes; raises ``NotFound`` when it is gone (purged, never stored)."""


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclasses.dataclass(frozen=True)
class EngineServices:
    """What the engine calls out to: HTTP, mail, the clock (tests fix it), a WriteLine sink, the
    ReadLine source (the next line, or None at the end of the input), file storage, and the
    resilience strategies an activity may name (by id)."""

    http: HttpClient | None = None
    mailer: Mailer | None = None
    clock: Callable[[], dt.datetime] = _utc_now
    write_line: Callable[[str], None] | None = None
    read_line: Callable[[], str | None] | None = None
    files: FileStore | None = None
    strategies: Mapping[str, HttpStrategy] = dataclasses.field(default_factory=dict)
    #: Python activities' stand-ins by type name (the kit's fakes), and whether task-mode
    #: activities run in the step instead of as their own task (the kit runs them in-process)
    activities: Mapping[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    inline_tasks: bool = False
