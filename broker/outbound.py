"""Outbound HTTP for workflow activities: an allowlist, an SSRF guard, timeouts and a size cap.

``OutboundHttp`` implements ``broker.engine.services.HttpClient`` with one ``requests.Session``
per instance (pooled keep-alive connections). Two modes, chosen by ``BROKER_HTTP_ALLOWLIST``:

* A non-empty allowlist admits exactly the hosts its ``host[:port]`` patterns match (``*`` matches
  any run of characters, dots included; a pattern without a port matches every port). A match is
  trusted by name, so loopback and private hosts can be allowed on purpose.
* An empty allowlist admits public addresses only: each new socket resolves the host once, refuses
  the request if any resolved address is loopback, private, link-local, multicast, reserved or
  unspecified (IPv4-mapped IPv6 is unwrapped first), and then connects to one of exactly those
  checked addresses. Because no second lookup happens, a DNS answer that changes between check
  and connect (DNS rebinding) cannot slip through. The URL's hostname still goes into the
  ``Host`` header, TLS SNI and certificate verification.

The URL is read once, by ``broker.urls.parse_target``, with the parser of the HTTP stack that sends
it; a URL that another parser would read differently (a backslash, whitespace, a second ``@``...)
is refused. The check is made twice in both modes: on the URL before anything is sent, and inside
the connection on the host and port that urllib3 actually connects to, so a URL that a parser
reads one way for the check and another way for the connection cannot reach anything unchecked.

Residual risks, by design: an allowlisted name is trusted whatever its DNS answers, and the
timeout does not bound the DNS lookup itself (the system resolver's own timeout does).

Redirects are followed by hand (at most ``MAX_REDIRECTS`` hops) and every hop is checked again.
Proxy variables and ``.netrc`` from the environment are ignored: a proxy would make the connection
guard check the proxy instead of the target.
"""

from __future__ import annotations

import dataclasses
import email.utils
import ipaddress
import json
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urljoin

import requests
import requests.adapters
import urllib3.connection
import urllib3.connectionpool
import urllib3.exceptions
import urllib3.poolmanager

from broker.engine.services import HttpRequest, HttpResponse
from broker.errors import (
    BrokerError,
    ConfigError,
    OutboundBlocked,
    PayloadTooLarge,
    RetryLater,
    WorkflowFault,
)
from broker.redaction import redact_text, redact_url
from broker.settings import Settings
from broker.urls import Target, parse_target

logger = logging.getLogger(__name__)

MAX_REDIRECTS = 5
CHUNK_BYTES = 64 * 1024
USER_AGENT = "elsa-celery-broker"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Headers that carry credentials for one origin and must not follow a redirect to another.
ORIGIN_BOUND_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
METHOD = re.compile(r"^[A-Z]+$")

AddrInfo = tuple[Any, ...]  # one entry of socket.getaddrinfo: family, type, proto, name, sockaddr
Resolver = Callable[[str, int], Sequence[AddrInfo]]


# Allowlist ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HostPattern:
    """One ``host[:port]`` allowlist entry; ``port`` None matches every port."""

    text: str
    host: re.Pattern[str]
    port: re.Pattern[str] | None

    @classmethod
    def parse(cls, text: str) -> HostPattern:
        host, port = _split_pattern(text)
        if not host:
            raise ConfigError(f"BROKER_HTTP_ALLOWLIST entry {text!r} has no host")
        if port is not None and not re.fullmatch(r"[0-9*]+", port):
            raise ConfigError(f"BROKER_HTTP_ALLOWLIST entry {text!r} has an invalid port")
        return cls(text, _glob(host.rstrip(".")), None if port is None else _glob(port))

    def matches(self, host: str, port: int) -> bool:
        if not self.host.fullmatch(host):
            return False
        return self.port is None or bool(self.port.fullmatch(str(port)))


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else re.escape(c) for c in pattern), re.IGNORECASE)


def _split_pattern(text: str) -> tuple[str, str | None]:
    """Split ``host[:port]``; IPv6 literals with a port must be bracketed (``[::1]:8080``)."""
    text = text.strip().lower()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, port or None
    return text, None  # a bare name, or an unbracketed IPv6 literal without a port


def parse_allowlist(entries: Sequence[str]) -> tuple[HostPattern, ...]:
    """Parse ``settings.http_allowlist``; raises ``ConfigError`` naming a malformed entry."""
    return tuple(HostPattern.parse(entry) for entry in entries if entry.strip())


def admitted(allowlist: Sequence[HostPattern], host: str, port: int) -> bool:
    return any(pattern.matches(host, port) for pattern in allowlist)


# Address checks -----------------------------------------------------------------------------------


def blocked_reason(address: str) -> str | None:
    """Why an IP address is not a public one, or None when it is public."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 scope id
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        # An IPv4 address wrapped in IPv6 reaches the IPv4 host: judge the inner address.
        inner = ip.ipv4_mapped or ip.sixtofour
        if inner is not None:
            return blocked_reason(str(inner))
        if ip.teredo is not None:
            return blocked_reason(str(ip.teredo[1]))
    checks = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
        ("not globally routable", not ip.is_global),
    )
    return next((name for name, hit in checks if hit), None)


def system_resolver(host: str, port: int) -> Sequence[AddrInfo]:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


@dataclasses.dataclass(frozen=True)
class AddressGuard:
    """Checks each connection before it is made: with an ``allowlist``, the host and port must
    match one of its patterns; without one, every address the host resolves to must be public."""

    resolve: Resolver = system_resolver
    allowlist: tuple[HostPattern, ...] = ()

    def vet(self, host: str, port: int) -> Sequence[AddrInfo]:
        """The resolved addresses, all checked; raises ``OutboundBlocked`` otherwise."""
        host = host.strip("[]").lower().rstrip(".")
        if self.allowlist:
            if not admitted(self.allowlist, host, port):
                raise OutboundBlocked(
                    f"outbound connection to {host}:{port} is not in BROKER_HTTP_ALLOWLIST",
                    host=host,
                    reason="not allowlisted",
                )
            return self.resolve(host, port)
        infos = self.resolve(host, port)
        for info in infos:
            address = str(info[4][0])
            reason = blocked_reason(address)
            if reason is not None:
                raise OutboundBlocked(
                    f"outbound host {host!r} resolves to {address}, a {reason} address; "
                    "add it to BROKER_HTTP_ALLOWLIST to allow it",
                    host=host,
                    reason=reason,
                )
        return infos


def _connect_vetted(conn: urllib3.connection.HTTPConnection, guard: AddressGuard) -> socket.socket:
    """Connect ``conn`` to an address ``guard`` checked; errors are mapped as urllib3 does."""
    try:
        infos = guard.vet(conn.host, conn.port)
    except socket.gaierror as exc:
        raise urllib3.exceptions.NameResolutionError(conn.host, conn, exc) from exc
    timeout = conn.timeout if isinstance(conn.timeout, int | float) else None
    error: OSError | None = None
    for family, socktype, proto, _name, sockaddr in infos:
        sock = socket.socket(family, socktype, proto)
        try:
            for level, option, value in conn.socket_options or ():
                sock.setsockopt(level, option, value)
            sock.settimeout(timeout)
            if conn.source_address:
                sock.bind(conn.source_address)
            sock.connect(sockaddr)
        except TimeoutError as exc:
            sock.close()
            raise urllib3.exceptions.ConnectTimeoutError(
                conn, f"Connection to {conn.host} timed out (connect timeout={timeout})"
            ) from exc
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise urllib3.exceptions.NewConnectionError(
        conn, f"Failed to establish a new connection: {error or 'no address'}"
    ) from error


class _GuardedHTTPConnection(urllib3.connection.HTTPConnection):
    def __init__(self, *args: Any, guard: AddressGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def _new_conn(self) -> socket.socket:
        return _connect_vetted(self, self.guard)


class _GuardedHTTPSConnection(urllib3.connection.HTTPSConnection):
    def __init__(self, *args: Any, guard: AddressGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def _new_conn(self) -> socket.socket:
        # TLS is wrapped around this socket later with server_hostname=self.host: SNI and
        # certificate checks stay on the URL's hostname although the address is pinned.
        return _connect_vetted(self, self.guard)


class _GuardedHTTPPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


class _GuardedPoolManager(urllib3.poolmanager.PoolManager):
    def __init__(self, guard: AddressGuard, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.guard = guard
        self.pool_classes_by_scheme = {"http": _GuardedHTTPPool, "https": _GuardedHTTPSPool}

    def _new_pool(
        self, scheme: str, host: str, port: int, request_context: dict[str, Any] | None = None
    ) -> urllib3.connectionpool.HTTPConnectionPool:
        # The guard rides in the pool's connection keywords; it must stay out of the pool key.
        context = dict(self.connection_pool_kw if request_context is None else request_context)
        context["guard"] = self.guard
        return super()._new_pool(scheme, host, port, context)


class GuardedAdapter(requests.adapters.HTTPAdapter):
    """A transport adapter whose connections go only to addresses ``guard`` checked."""

    def __init__(self, guard: AddressGuard) -> None:
        self.guard = guard
        super().__init__()

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        self._pool_connections = connections
        self._pool_maxsize = maxsize
        self._pool_block = block
        self.poolmanager = _GuardedPoolManager(
            self.guard, num_pools=connections, maxsize=maxsize, block=block, **pool_kwargs
        )


# The client ---------------------------------------------------------------------------------------


class OutboundHttp:
    """The broker's ``HttpClient``: checked, bounded HTTP calls for workflow activities."""

    def __init__(self, settings: Settings, *, resolver: Resolver | None = None) -> None:
        self.allowlist = parse_allowlist(settings.http_allowlist)
        self.timeout = settings.http_timeout
        self.max_response_bytes = settings.http_max_response_bytes
        self.session = requests.Session()
        self.session.trust_env = False  # no proxies or .netrc from the environment
        self.session.headers["User-Agent"] = USER_AGENT
        adapter = GuardedAdapter(AddressGuard(resolver or system_resolver, self.allowlist))
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

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
        for _hop in range(MAX_REDIRECTS + 1):
            response = self._open(method, target.url, headers, body, deadline)
            location = response.headers.get("Location")
            if response.status_code not in REDIRECT_STATUSES or not location:
                return self._finish(method, target.url, response, deadline)
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
            raise RetryLater(f"TLS handshake with {redact_url(url)} failed: {_why(exc)}") from exc
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            raise RetryLater(f"outbound {method} {redact_url(url)} failed: {_why(exc)}") from exc
        except (
            requests.exceptions.InvalidURL,
            requests.exceptions.InvalidHeader,
            ValueError,
        ) as exc:
            raise WorkflowFault(
                f"invalid outbound request to {redact_url(url)}: {_why(exc)}", category="HTTP"
            ) from exc

    def _finish(
        self, method: str, url: str, response: requests.Response, deadline: float
    ) -> HttpResponse:
        status = response.status_code
        logger.info("outbound %s %s -> %d", method, redact_url(url), status)
        with response:
            if status == 429 or status >= 500:
                delay = parse_retry_after(response.headers.get("Retry-After"))
                raise RetryLater(
                    f"outbound {method} {redact_url(url)} answered {status}", delay=delay
                )
            body = self._read_body(url, response, deadline)
        content_type = response.headers.get("Content-Type", "")
        return HttpResponse(
            status_code=status,
            headers=dict(response.headers),
            body=body,
            content=decode_content(body, content_type),
        )

    def _read_body(self, url: str, response: requests.Response, deadline: float) -> bytes:
        cap = self.max_response_bytes
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > cap:
            raise PayloadTooLarge(
                f"response from {redact_url(url)} declares {declared} bytes, more than the "
                f"{cap}-byte cap (BROKER_HTTP_MAX_RESPONSE_BYTES)",
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
                        "(BROKER_HTTP_MAX_RESPONSE_BYTES); reading stopped",
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
                f"reading the response from {redact_url(url)} failed: {_why(exc)}"
            ) from exc
        return b"".join(chunks)


# Helpers ------------------------------------------------------------------------------------------


def _why(exc: BaseException) -> str:
    """An exception's text without credentials: the HTTP stack repeats the URL's path and query."""
    return redact_text(str(exc))


def _remaining(deadline: float, url: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise RetryLater(f"outbound request to {redact_url(url)} ran out of time")
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
