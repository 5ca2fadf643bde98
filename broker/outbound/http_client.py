"""Outbound HTTP for workflow activities (``OutboundHttp``): the URL and every connection checked,
redirects followed by hand, timeouts and a size cap. Every status is an answer; what a status
means (retry, route, fault) is the caller's decision (``transient``)."""

from __future__ import annotations

import email.utils
import json
import logging
import re
import ssl
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin

import requests
import requests.adapters

from broker.engine.run.ports import HttpRequest, HttpResponse
from broker.errors import BrokerError, OutboundBlocked, PayloadTooLarge, RetryLater, WorkflowFault
from broker.outbound.guard import (
    AddressGuard,
    GuardedAdapter,
    Resolver,
    admitted,
    parse_allowlist,
    system_resolver,
)
from broker.outbound.urls import Target, parse_target
from broker.redaction import redact_text, redact_url
from broker.settings import Settings
from broker.telemetry import tracing

logger = logging.getLogger(__name__)

MAX_REDIRECTS = 5
CHUNK_BYTES = 64 * 1024
USER_AGENT = "elsa-celery-broker"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Headers that carry credentials for one origin and must not follow a redirect to another.
ORIGIN_BOUND_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
METHOD = re.compile(r"^[A-Z]+$")

# The client ---------------------------------------------------------------------------------------


class OutboundHttp:
    """The broker's ``HttpClient``: checked, bounded HTTP calls for workflow activities."""

    def __init__(
        self,
        settings: Settings,
        *,
        resolver: Resolver | None = None,
        allowlist: Sequence[str] | None = None,
    ) -> None:
        # ``allowlist``: instead of BROKER_HTTP_ALLOWLIST, for a URL the operator configured
        # (``for_configured_url``); the guard still parses once and checks every connection.
        self.allowlist = parse_allowlist(
            settings.http_allowlist if allowlist is None else allowlist
        )
        self.timeout = settings.http_timeout
        self.max_response_bytes = settings.http_max_response_bytes
        self.session = requests.Session()
        self.session.trust_env = False  # no proxies or .netrc from the environment
        self.session.headers["User-Agent"] = USER_AGENT
        self._guard = AddressGuard(resolver or system_resolver, self.allowlist)
        adapter = GuardedAdapter(self._guard)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    @classmethod
    def for_configured_url(
        cls, settings: Settings, url: str, *, resolver: Resolver | None = None
    ) -> OutboundHttp:
        """A client that may reach exactly the origin of ``url``, a URL from the operator's own
        configuration (an Elsa server on a private network, say): nothing else, and only
        through the same single parse and connect-time checks as every other call."""
        target = parse_target(url)
        host = f"[{target.host}]" if ":" in target.host else target.host
        return cls(settings, resolver=resolver, allowlist=(f"{host}:{target.port}",))

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> OutboundHttp:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send(self, request: HttpRequest) -> HttpResponse:
        """Send ``request``; see ``HttpClient.send`` for the errors it raises."""
        method = request.method.strip().upper()
        if not METHOD.match(method):
            raise WorkflowFault(f"invalid HTTP method {request.method!r}", category="HTTP")
        headers = dict(request.headers)
        if request.idempotency_key:
            headers = {k: v for k, v in headers.items() if k.lower() != "idempotency-key"}
            headers["Idempotency-Key"] = request.idempotency_key
        budget = request.timeout if request.timeout is not None else self.timeout
        deadline = time.monotonic() + budget
        body = request.body
        target = self.check_url(request.url)
        # (attributes only when traced: no redaction work otherwise)
        traced = tracing.enabled()
        with tracing.span(
            f"HTTP {method}",
            kind="client",
            attributes={"http.request.method": method, "url.full": redact_url(target.url)}
            if traced
            else None,
        ):
            tracing.inject(headers)
            response = self._follow(request, method, target, headers, body, deadline)
            tracing.set_attribute("http.response.status_code", response.status_code)
            return response

    def _follow(
        self,
        request: HttpRequest,
        method: str,
        target: Target,
        headers: dict[str, str],
        body: bytes | None,
        deadline: float,
    ) -> HttpResponse:
        """Send and follow redirects (as ``request`` allows) until an answer."""
        for _hop in range(MAX_REDIRECTS + 1):
            response = self._open(method, target.url, headers, body, deadline)
            location = response.headers.get("Location")
            if (
                response.status_code not in REDIRECT_STATUSES
                or not location
                or not request.follow_redirects
            ):
                return self._finish(method, target.url, response, deadline, request)
            response.close()
            following = urljoin(target.url, location)
            logger.info(
                "outbound %s %s redirected (%d) to %s",
                method,
                redact_url(target.url),
                response.status_code,
                redact_url(following),
            )
            # Each hop is checked as the first one was: parsed once, then again at connect time.
            hop = self.check_url(following)
            method, headers, body = _redirected(
                response.status_code, method, headers, body, target, hop
            )
            target = hop
        raise BrokerError(
            f"outbound request to {redact_url(request.url)} redirected more than "
            f"{MAX_REDIRECTS} times",
            url=redact_url(request.url),
        )

    def check_url(self, url: str) -> Target:
        """The checked target of ``url``: refused (``OutboundBlocked``) when it is ambiguous,
        not http(s), or names a host the allowlist does not admit.

        The connection checks again what it actually connects to (see the module doc).
        """
        target = parse_target(url)
        if self.allowlist and not admitted(self.allowlist, target.host, target.port):
            raise OutboundBlocked(
                f"outbound host {target.host}:{target.port} is not in BROKER_HTTP_ALLOWLIST",
                host=target.host,
                reason="not allowlisted",
            )
        return target

    def vet_url(self, url: str) -> None:
        """``check_url``, and with an empty allowlist also resolve the host now and refuse it
        unless every address is public: what a URL registered for later calls must pass."""
        target = self.check_url(url)
        if self.allowlist:
            return
        host, port = target.host, target.port
        try:
            self._guard.vet(host, port)
        except OSError as exc:
            raise OutboundBlocked(
                f"outbound host {host!r} cannot be resolved: {exc}",
                host=host,
                reason="dns",
            ) from exc

    def _open(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, deadline: float
    ) -> requests.Response:
        remaining = _remaining(deadline, url)
        try:
            return self.session.request(
                method,
                url,
                headers=dict(headers),
                data=body,
                timeout=(remaining, remaining),
                stream=True,
                allow_redirects=False,
            )
        except requests.exceptions.SSLError as exc:
            if _caused_by_certificate(exc):
                raise BrokerError(
                    f"TLS certificate of {redact_url(url)} was refused: {_why(exc)}",
                    url=redact_url(url),
                ) from exc
            raise RetryLater(
                f"TLS handshake with {redact_url(url)} failed: {_why(exc)}", reason="connect"
            ) from exc
        except requests.exceptions.Timeout as exc:  # connect or read timeout (Elsa's Timeout)
            raise RetryLater(
                f"outbound {method} {redact_url(url)} timed out: {_why(exc)}", reason="timeout"
            ) from exc
        except requests.exceptions.ConnectionError as exc:
            raise RetryLater(
                f"outbound {method} {redact_url(url)} failed: {_why(exc)}", reason="connect"
            ) from exc
        except (
            requests.exceptions.InvalidURL,
            requests.exceptions.InvalidHeader,
            ValueError,
        ) as exc:
            raise WorkflowFault(
                f"invalid outbound request to {redact_url(url)}: {_why(exc)}", category="HTTP"
            ) from exc

    def _finish(
        self,
        method: str,
        url: str,
        response: requests.Response,
        deadline: float,
        request: HttpRequest,
    ) -> HttpResponse:
        status = response.status_code
        logger.info("outbound %s %s -> %d", method, redact_url(url), status)
        cap = request.max_response_bytes or self.max_response_bytes
        with response:
            body = self._read_body(url, response, deadline, cap)
        content_type = response.headers.get("Content-Type", "")
        return HttpResponse(
            status_code=status,
            headers=dict(response.headers),
            body=body,
            content=decode_content(body, content_type),
        )

    def _read_body(self, url: str, response: requests.Response, deadline: float, cap: int) -> bytes:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > cap:
            raise PayloadTooLarge(
                f"response from {redact_url(url)} declares {declared} bytes, more than the "
                f"{cap}-byte cap ({_cap_setting(cap, self.max_response_bytes)})",
                url=redact_url(url),
                limit=cap,
            )
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in response.iter_content(CHUNK_BYTES):
                size += len(chunk)
                if size > cap:
                    raise PayloadTooLarge(
                        f"response from {redact_url(url)} exceeds the {cap}-byte cap "
                        f"({_cap_setting(cap, self.max_response_bytes)}); reading stopped",
                        url=redact_url(url),
                        limit=cap,
                    )
                chunks.append(chunk)
                _remaining(deadline, url)
        except requests.exceptions.ContentDecodingError as exc:
            raise BrokerError(
                f"response from {redact_url(url)} cannot be decoded: {_why(exc)}",
                url=redact_url(url),
            ) from exc
        except requests.exceptions.RequestException as exc:
            raise RetryLater(
                f"reading the response from {redact_url(url)} failed: {_why(exc)}", reason="connect"
            ) from exc
        return b"".join(chunks)


# Helpers ------------------------------------------------------------------------------------------

#: statuses the broker's own calls (webhooks, remote dispatch) try again later: the server is
#: busy or failing for now
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def transient(response: HttpResponse) -> RetryLater | None:
    """The ``RetryLater`` a transient status means for one of the broker's own calls (with the
    server's ``Retry-After``), or None. Workflow activities route statuses instead (Elsa's
    contract; their resilience strategy decides about retries)."""
    status = response.status_code
    if status not in TRANSIENT_STATUSES and status < 500:
        return None
    retry_after = next((v for k, v in response.headers.items() if k.lower() == "retry-after"), None)
    return RetryLater(
        f"answered HTTP {status}", delay=parse_retry_after(retry_after), status_code=status
    )


def _cap_setting(cap: int, configured: int) -> str:
    return "BROKER_HTTP_MAX_RESPONSE_BYTES" if cap == configured else "BROKER_FILE_MAX_BYTES"


def _why(exc: BaseException) -> str:
    """An exception's text without credentials: the HTTP stack repeats the URL's path and query."""
    return redact_text(str(exc))


def _remaining(deadline: float, url: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise RetryLater(f"outbound request to {redact_url(url)} ran out of time", reason="timeout")
    return left


def _redirected(
    status: int,
    method: str,
    headers: Mapping[str, str],
    body: bytes | None,
    source: Target,
    target: Target,
) -> tuple[str, dict[str, str], bytes | None]:
    """Method, headers and body for the next hop, as browsers and requests do it."""
    new_headers = dict(headers)
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method, body = "GET", None
        new_headers = {
            k: v
            for k, v in new_headers.items()
            if k.lower() not in ("content-type", "content-length")
        }
    if source.origin != target.origin:
        new_headers = {
            k: v for k, v in new_headers.items() if k.lower() not in ORIGIN_BOUND_HEADERS
        }
    return method, new_headers, body


def _caused_by_certificate(exc: BaseException) -> bool:
    """Whether a certificate verification failure is somewhere in the chain of ``exc``."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return True
        reason = getattr(current, "reason", None)  # urllib3 wraps causes in .reason
        if isinstance(reason, BaseException):
            stack.append(reason)
        stack.extend(a for a in current.args if isinstance(a, BaseException))
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def decode_content(body: bytes, content_type: str) -> Any:
    """Parsed JSON for a JSON media type, else text decoded with the declared charset."""
    media, _, params = content_type.partition(";")
    media = media.strip().lower()
    match = re.search(r"charset=\"?([\w.:-]+)", params, re.IGNORECASE)
    charset = match.group(1) if match else "utf-8"
    try:
        text = body.decode(charset, errors="replace")
    except LookupError:
        text = body.decode("utf-8", errors="replace")
    if media in ("application/json", "text/json") or media.endswith("+json"):
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError:
            logger.warning("response declared %s but is not valid JSON; kept as text", media)
    return text
