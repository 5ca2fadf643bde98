"""Who is calling: the peer certificate, its verification, the allowlist, and scopes
(docs/design.md, section 1)."""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import Encoding
from flask import g, request

from broker.clients.certificates import fingerprint_sha256_of, load_certificate, thumbprint_of
from broker.errors import ConfigError, Forbidden, Unauthenticated
from broker.settings import Settings
from broker.web.context import ApiClientLike, services

logger = logging.getLogger(__name__)

#: environ key holding the peer certificate's DER bytes
PEER_CERT = "broker.peer_cert"
#: environ key: True when the certificate came from our own verified TLS handshake
PEER_CERT_VERIFIED = "broker.peer_cert_verified"

F = TypeVar("F", bound=Callable[..., Any])
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class PeerCertificateMiddleware:
    """Puts the peer certificate (DER) of the connection into the WSGI environ."""

    proxies: tuple[Network, ...]

    def __init__(self, app: WsgiApp, settings: Settings) -> None:
        self.app = app
        self.proxy_header = ""
        self.proxies = ()
        # Proxy mode needs both settings; one without the other stays off.
        if settings.trusted_proxies and settings.proxy_cert_header:
            try:
                self.proxies = tuple(
                    ipaddress.ip_network(p, strict=False) for p in settings.trusted_proxies
                )
            except ValueError as exc:
                raise ConfigError(f"BROKER_TRUSTED_PROXIES is invalid: {exc}") from exc
            self.proxy_header = "HTTP_" + settings.proxy_cert_header.upper().replace("-", "_")

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        sock = environ.get("gunicorn.socket")
        if sock is not None:
            # A real connection: whatever the environ held before is not the peer's.
            environ.pop(PEER_CERT, None)
            environ[PEER_CERT_VERIFIED] = False
            getpeercert = getattr(sock, "getpeercert", None)
            der = getpeercert(binary_form=True) if getpeercert is not None else None
            if der:
                environ[PEER_CERT] = der
                environ[PEER_CERT_VERIFIED] = True
        if self.proxy_header:
            header = environ.pop(self.proxy_header, None)
            if header and self._from_trusted_proxy(environ):
                environ[PEER_CERT] = _der_from_header(header)
                environ[PEER_CERT_VERIFIED] = False
        return self.app(environ, start_response)

    def _from_trusted_proxy(self, environ: dict[str, Any]) -> bool:
        try:
            peer = ipaddress.ip_address(environ.get("REMOTE_ADDR", ""))
        except ValueError:
            return False
        return any(peer in network for network in self.proxies)


def _der_from_header(header: str) -> bytes:
    try:
        cert = x509.load_pem_x509_certificate(urllib.parse.unquote(header).encode())
    except ValueError:
        return b""  # unreadable: treated as no certificate, answered 401
    return cert.public_bytes(Encoding.DER)


class TrustStore:
    """The CA certificates client certificates must chain to, reloaded when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._cas: list[x509.Certificate] = []

    def cas(self) -> list[x509.Certificate]:
        with self._lock:
            try:
                mtime = self.path.stat().st_mtime
            except OSError:
                logger.error(
                    "client CA file %s is missing; every certificate is refused", self.path
                )
                return []
            if mtime != self._mtime:
                self._cas = x509.load_pem_x509_certificates(self.path.read_bytes())
                self._mtime = mtime
            return self._cas

    def issued_by_trusted(self, cert: x509.Certificate) -> bool:
        """True when a CA of the store signed ``cert`` directly (the anchors may be
        intermediates; a chain the proxy did not forward cannot be rebuilt)."""
        for ca in self.cas():
            if ca.subject != cert.issuer:
                continue
            try:
                cert.verify_directly_issued_by(ca)
            except (ValueError, TypeError, InvalidSignature):
                continue
            return True
        return False


def check_certificate(
    der: bytes | None, *, verified: bool, store: TrustStore, now: dt.datetime | None = None
) -> x509.Certificate:
    """The certificate if it may identify a client; ``Unauthenticated`` otherwise."""
    if not der:
        raise Unauthenticated("Client certificate required")
    try:
        cert = load_certificate(der)
    except ValueError as exc:
        raise Unauthenticated("Client certificate is unreadable") from exc
    if not verified and not store.issued_by_trusted(cert):
        raise Unauthenticated("Client certificate is not issued by a trusted CA")
    now = now or dt.datetime.now(dt.UTC)
    if now < cert.not_valid_before_utc:
        raise Unauthenticated("Client certificate is not yet valid")
    if now > cert.not_valid_after_utc:
        raise Unauthenticated("Client certificate has expired")
    return cert


def authenticate() -> ApiClientLike:
    """The client of the current request (cached on ``g``); raises ``Unauthenticated``."""
    found: ApiClientLike | None = g.get("client")
    if found is not None:
        return found
    svc = services()
    store: TrustStore = svc.extra["trust_store"]
    cert = check_certificate(
        request.environ.get(PEER_CERT),
        verified=bool(request.environ.get(PEER_CERT_VERIFIED)),
        store=store,
    )
    sha1, sha256 = thumbprint_of(cert), fingerprint_sha256_of(cert)
    client = svc.client_directory().authenticate(sha1_thumbprint=sha1, sha256_fingerprint=sha256)
    if client is None:
        logger.warning("unknown client certificate %s (%s)", sha1, cert.subject.rfc4514_string())
        raise Unauthenticated("Unknown client certificate")
    g.client = client
    return client


def require_scope(scope: str) -> Callable[[F], F]:
    """A view decorator: 403 naming ``scope`` unless the client holds it."""

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            client = authenticate()
            if scope not in client.scopes:
                raise Forbidden(f"Missing scope '{scope}'", scope=scope)
            return view(*args, **kwargs)

        wrapper.required_scope = scope  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
