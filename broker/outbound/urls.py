"""Outbound URLs read once, the way the HTTP stack that sends them reads them; a URL that two
parsers read differently is refused."""

from __future__ import annotations

import dataclasses
import unicodedata
from urllib.parse import urlsplit

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from broker.errors import OutboundBlocked
from broker.redaction import redact_url

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclasses.dataclass(frozen=True)
class Target:
    """A checked outbound URL: ``url`` is what is sent, ``host``/``port`` where it connects."""

    scheme: str
    host: str  # lower case, no brackets around IPv6, no trailing dot
    port: int  # the explicit port, or the scheme's default
    url: str

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port


def parse_target(url: str) -> Target:
    """The scheme, host and port ``url`` connects to; raises ``OutboundBlocked`` (reason
    ``malformed``, ``scheme`` or ``host``) for a URL that is ambiguous, malformed or not http(s)."""
    _refuse_ambiguous_characters(url)
    try:
        sent = parse_url(url)
    except LocationParseError as exc:
        raise _malformed("the host or port is not valid") from exc
    try:
        split = urlsplit(url)
        split_port = split.port
    except ValueError as exc:
        raise _malformed("the host or port is not valid") from exc
    scheme = (sent.scheme or "").lower()
    if scheme not in DEFAULT_PORTS:
        raise OutboundBlocked(
            f"outbound scheme {scheme!r} is not allowed (http or https only)",
            host=None,
            reason="scheme",
        )
    host = _normal_host(sent.host or "")
    if not host:
        raise OutboundBlocked(
            f"outbound URL {redact_url(url)!r} names no host", host=None, reason="host"
        )
    port = sent.port or DEFAULT_PORTS[scheme]
    split_view = (
        split.scheme.lower(),
        _normal_host(split.hostname or ""),
        split_port or DEFAULT_PORTS.get(split.scheme.lower()),
    )
    if split_view != (scheme, host, port):
        raise _malformed(
            f"parsers disagree on where it connects ({host}:{port} or "
            f"{split_view[1]}:{split_view[2]})"
        )
    return Target(scheme=scheme, host=host, port=port, url=sent.url)


def _refuse_ambiguous_characters(url: str) -> None:
    for index, char in enumerate(url):
        if char == "\\":
            raise _malformed(f"a backslash at position {index}")
        if char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            raise _malformed(
                f"a whitespace or control character (U+{ord(char):04X}) at position {index}"
            )
    _scheme, sep, rest = url.partition("://")
    if not sep:
        return  # no authority: the scheme or host check names the problem
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if not authority.isascii():
        raise _malformed("non-ASCII characters in the host (write it in its ASCII form)")
    if authority.count("@") > 1:
        raise _malformed("more than one '@' in the authority")
    if "%" in authority.rpartition("@")[2]:
        raise _malformed("a percent escape in the host")


def _normal_host(host: str) -> str:
    return host.strip("[]").lower().rstrip(".")


def _malformed(why: str) -> OutboundBlocked:
    # The URL itself stays out of the message: its userinfo may hold a password, and a parser
    # that strips it is exactly what cannot be trusted on this input.
    return OutboundBlocked(
        f"outbound URL refused as ambiguous or malformed: {why}",
        host=None,
        reason="malformed",
    )
