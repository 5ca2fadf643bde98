"""The SSRF guard of outbound HTTP: which hosts may be reached (``BROKER_HTTP_ALLOWLIST``), and a
transport adapter that connects to only those."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from typing import Any

import requests
import requests.adapters
import urllib3.connection
import urllib3.connectionpool
import urllib3.exceptions
import urllib3.poolmanager

from broker.errors import ConfigError, OutboundBlocked

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
        host, closed, rest = text[1:].partition("]")
        if not closed or rest[:1] not in ("", ":"):
            raise ConfigError(
                f"BROKER_HTTP_ALLOWLIST entry {text!r} has a malformed IPv6 literal: write"
                " [address] or [address]:port"
            )
        return host, rest[1:] if rest else None
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
    """Why an IP address is not a public one, or None when it is public.

    An IPv6 scope id (``fe80::1%eth0``) is read with the address and the address judged; a scope
    id on an IPv4 address (``8.8.8.8%x``), or a malformed one, makes it no IP address at all."""
    try:
        ip = ipaddress.ip_address(address)
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
