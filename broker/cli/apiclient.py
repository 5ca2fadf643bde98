"""A small client for the broker's public API over mutual TLS, the one the operator CLI uses
(docs/design.md, section 1)."""

from __future__ import annotations

import dataclasses
import logging
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import requests

from broker.errors import (
    BadRequest,
    BrokerError,
    ConfigError,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    StoreUnavailable,
    Unauthenticated,
)
from broker.settings import Settings

logger = logging.getLogger(__name__)

DEV_CLIENT = "DevClient"
DEFAULT_TIMEOUT = 10.0
#: largest page the API serves (``GET /requests`` limit, admin ``pageSize``)
MAX_PAGE_SIZE = 500
#: dead-letter kinds and the admin collection that serves each
DEAD_LETTER_KINDS = ("request", "outbox", "webhook", "bookmark")
UNREACHABLE = 0  # ``status`` of an error raised without an HTTP answer

_BY_STATUS: dict[int, type[BrokerError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    503: StoreUnavailable,
}


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where the public listener is and which files prove who we are."""

    url: str
    cert: str
    key: str
    ca: str


def default_endpoint(settings: Settings) -> Endpoint:
    """The development defaults: ``https://localhost:<public port>`` and the DevClient files.

    The certificates sit in the folder of ``BROKER_TLS_CLIENT_CA`` (``var/certs`` by default),
    where ``broker run`` and ``broker certs client DevClient`` put them; the CA file verifies
    the server, as the development CA signs both sides.
    """
    host, _, port = settings.public_bind.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::", "127.0.0.1", "::1"):  # noqa: S104 - a bind, not a listen
        host = "localhost"  # the name the development server certificate carries
    folder = Path(settings.tls_client_ca).parent
    return Endpoint(
        url=f"https://{host}:{port or 5001}",
        cert=str(folder / f"{DEV_CLIENT}.pem"),
        key=str(folder / f"{DEV_CLIENT}.key"),
        ca=settings.tls_client_ca,
    )


@dataclasses.dataclass(frozen=True)
class Submitted:
    """The answer to a submission: 202 for a new record, 200 for an idempotent repeat."""

    correlation_id: str
    status: str
    created: bool
    body: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of ``GET /requests`` and the cursor of the next one (None on the last)."""

    items: list[dict[str, Any]]
    next: str | None


class BrokerApi:
    """Calls every public endpoint of the broker, presenting a client certificate."""

    def __init__(
        self,
        base_url: str,
        *,
        cert: str | Path,
        key: str | Path,
        ca: str | Path,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        for role, path in (("client certificate", cert), ("client key", key), ("CA", ca)):
            if not Path(path).is_file():
                raise ConfigError(f"{role} file {path} not found", path=str(path))
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        # Passed with every call: requests lets REQUESTS_CA_BUNDLE override a session's verify.
        self._tls: dict[str, Any] = {"cert": (str(cert), str(key)), "verify": str(ca)}
        self._http = requests.Session()
        self._http.headers.update({"Accept": "application/json"})

    def __enter__(self) -> BrokerApi:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # Requests -------------------------------------------------------------------------------------

    def submit(
        self,
        request_type: str,
        keys: Mapping[str, str],
        payload: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Submitted:
        """``POST /requests``; with an idempotency key a repeat answers the first record."""
        body: dict[str, Any] = {"requestType": request_type, "keys": dict(keys)}
        if payload is not None:
            body["payload"] = dict(payload)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        response = self._call("POST", "/requests", json=body, headers=headers)
        answer = response.json()
        return Submitted(
            correlation_id=str(answer["correlationId"]),
            status=str(answer["status"]),
            created=response.status_code == 202,
            body=answer,
        )

    def get(self, request_id: str) -> dict[str, Any]:
        """``GET /requests/{id}``: the record with its status, result and workflow."""
        return self._json("GET", f"/requests/{_segment(request_id)}")

    def list_requests(
        self,
        *,
        status: str | None = None,
        request_type: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page:
        """One page of ``GET /requests`` (newest first, this client's records only)."""
        params = _params(
            status=status, requestType=request_type, since=since, limit=limit, cursor=cursor
        )
        body = self._json("GET", "/requests", params=params)
        return Page(items=list(body["items"]), next=body.get("next"))

    def iter_requests(
        self,
        *,
        status: str | None = None,
        request_type: str | None = None,
        since: str | None = None,
        page_size: int = MAX_PAGE_SIZE,
    ) -> Iterator[dict[str, Any]]:
        """Every matching record, following the ``next`` cursor page by page."""
        cursor: str | None = None
        while True:
            page = self.list_requests(
                status=status,
                request_type=request_type,
                since=since,
                limit=page_size,
                cursor=cursor,
            )
            yield from page.items
            if not page.next:
                return
            cursor = page.next

    def events(self, request_id: str) -> list[dict[str, Any]]:
        """``GET /requests/{id}/events``: the audit history, oldest first."""
        answer: list[dict[str, Any]] = self._call(
            "GET", f"/requests/{_segment(request_id)}/events"
        ).json()
        return answer

    def cancel(self, request_id: str) -> dict[str, Any]:
        """``POST /requests/{id}/cancel``; ``Conflict`` when the request is already terminal."""
        return self._json("POST", f"/requests/{_segment(request_id)}/cancel")

    def send_event(
        self, name: str, correlation_id: str, payload: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """``POST /events/{name}``: resume this client's workflows waiting on that event."""
        body: dict[str, Any] = {"correlationId": correlation_id}
        if payload is not None:
            body["payload"] = dict(payload)
        return self._json("POST", f"/events/{_segment(name)}", json=body)

    def request_types(self) -> list[dict[str, Any]]:
        """``GET /request-types``: what this client may submit."""
        return list(self._json("GET", "/request-types")["requestTypes"])

    # Webhooks ------------------------------------------------------------------------------------

    def webhooks(self) -> list[dict[str, Any]]:
        """``GET /webhooks``: this client's endpoints (never their secrets)."""
        return list(self._json("GET", "/webhooks")["items"])

    def add_webhook(
        self, url: str, events: Sequence[str] | None = None, secret: str | None = None
    ) -> dict[str, Any]:
        """``POST /webhooks``: the new endpoint with its secret (shown only this once)."""
        body: dict[str, Any] = {"url": url}
        if events:
            body["events"] = list(events)
        if secret:
            body["secret"] = secret
        return self._json("POST", "/webhooks", json=body)

    def delete_webhook(self, endpoint_id: str) -> None:
        self._call("DELETE", f"/webhooks/{_segment(endpoint_id)}")

    def rotate_webhook_secret(self, endpoint_id: str) -> dict[str, Any]:
        return self._json("POST", f"/webhooks/{_segment(endpoint_id)}/rotate-secret")

    def webhook_deliveries(self, endpoint_id: str, *, limit: int = 50) -> list[dict[str, Any]]:
        """``GET /webhooks/{id}/deliveries``: the last attempts, newest first."""
        path = f"/webhooks/{_segment(endpoint_id)}/deliveries"
        return list(self._json("GET", path, params={"limit": limit})["items"])

    # Admin: dead letters --------------------------------------------------------------------------

    def dead_letters(
        self,
        kind: str | None = None,
        *,
        page: int = 0,
        page_size: int = 50,
        instance_id: str | None = None,
    ) -> dict[str, Any]:
        """One page ``{items, totalCount, page, pageSize}``; no kind: request and outbox ones."""
        if kind is not None and _kind(kind) == "bookmark":
            params = _params(page=page, pageSize=page_size, workflowInstanceId=instance_id)
            return self._json("GET", "/admin/bookmark-queue/dead-letters", params=params)
        params = _params(kind=kind and _kind(kind), page=page, pageSize=page_size)
        return self._json("GET", "/admin/dead-letters", params=params)

    def iter_dead_letters(
        self, kind: str | None = None, *, page_size: int = MAX_PAGE_SIZE
    ) -> Iterator[dict[str, Any]]:
        """Every dead letter of ``kind``, page by page (newest first)."""
        page = 0
        while True:
            body = self.dead_letters(kind, page=page, page_size=page_size)
            yield from body["items"]
            if (page + 1) * page_size >= int(body["totalCount"]) or not body["items"]:
                return
            page += 1

    def dead_letter(self, letter_id: str, kind: str = "request") -> dict[str, Any]:
        return self._json("GET", f"{_letters(kind)}/{_segment(letter_id)}")

    def replay_dead_letter(self, letter_id: str, kind: str = "request") -> dict[str, Any]:
        """Replay one dead letter: ``{replayed, queueItemId, reason}``; 409 when not replayable."""
        return self._json("POST", f"{_letters(kind)}/{_segment(letter_id)}/replay")

    def delete_dead_letter(self, letter_id: str) -> None:
        """Delete a bookmark-queue dead letter (the only kind the API deletes)."""
        self._call("DELETE", f"/admin/bookmark-queue/dead-letters/{_segment(letter_id)}")

    # Admin: workflow instances and the runtime ----------------------------------------------------

    def instances(
        self,
        *,
        status: str | None = None,
        definition_id: str | None = None,
        page: int = 0,
        page_size: int = 50,
    ) -> dict[str, Any]:
        params = _params(status=status, definitionId=definition_id, page=page, pageSize=page_size)
        return self._json("GET", "/admin/workflow-instances", params=params)

    def instance(self, instance_id: str) -> dict[str, Any]:
        return self._json("GET", f"/admin/workflow-instances/{_segment(instance_id)}")

    def instance_journal(self, instance_id: str) -> list[dict[str, Any]]:
        path = f"/admin/workflow-instances/{_segment(instance_id)}/journal"
        return list(self._json("GET", path)["items"])

    def cancel_instance(self, instance_id: str) -> dict[str, Any]:
        return self._json("POST", f"/admin/workflow-instances/{_segment(instance_id)}/cancel")

    def runtime_status(self) -> dict[str, Any]:
        return self._json("GET", "/admin/workflow-runtime/status")

    def pause(self) -> dict[str, Any]:
        return self._json("POST", "/admin/workflow-runtime/pause")

    def resume(self) -> dict[str, Any]:
        return self._json("POST", "/admin/workflow-runtime/resume")

    # Transport ------------------------------------------------------------------------------------

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        answer: dict[str, Any] = self._call(method, path, **kwargs).json()
        return answer

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = self.base_url + path
        try:
            response = self._http.request(method, url, timeout=self.timeout, **self._tls, **kwargs)
        except requests.RequestException as exc:
            error = BrokerError(f"Cannot reach the broker at {self.base_url}: {exc}", url=url)
            error.status = UNREACHABLE
            raise error from exc
        if response.status_code >= 400:
            raise error_from(response)
        return response


def http_status(error: BrokerError) -> int | None:
    """The HTTP status an ``BrokerApi`` error was answered with (0: unreachable; None: the error
    was raised here, before any call, such as a missing certificate file)."""
    status = vars(error).get("status")
    return status if isinstance(status, int) else None


def error_from(response: requests.Response) -> BrokerError:
    """The ``broker.errors`` exception an error answer stands for, carrying its status and body."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        text = response.text.strip()[:200] or response.reason or "no body"
        body = {"error": f"HTTP {response.status_code}: {text}"}
    message = str(body.get("error") or f"HTTP {response.status_code}")
    code = body.get("code")
    details = {k: v for k, v in body.items() if k not in ("error", "code")}
    cls = _CODES.get(str(code)) or _BY_STATUS.get(response.status_code, BrokerError)
    error = cls(message, **details)
    error.status = response.status_code
    if isinstance(code, str):
        error.code = code
    return error


def _plain_classes(base: type[BrokerError]) -> Iterator[type[BrokerError]]:
    # Only classes built as (message, **details) can be rebuilt from a body; the others (e.g.
    # MissingKeys) come back as their plain parent class, matched by status.
    for cls in base.__subclasses__():
        if cls.__init__ is BrokerError.__init__:
            yield cls
        yield from _plain_classes(cls)


_CODES: dict[str, type[BrokerError]] = {cls.code: cls for cls in _plain_classes(BrokerError)}


def _segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _params(**values: Any) -> dict[str, str]:
    return {name: str(value) for name, value in values.items() if value is not None}


def _kind(kind: str) -> str:
    value = kind.strip().lower()
    if value not in DEAD_LETTER_KINDS:
        raise BadRequest(
            f"dead-letter kind must be one of {', '.join(DEAD_LETTER_KINDS)}", field="kind"
        )
    return value


def _letters(kind: str) -> str:
    if _kind(kind) == "bookmark":
        return "/admin/bookmark-queue/dead-letters"
    return "/admin/dead-letters"
