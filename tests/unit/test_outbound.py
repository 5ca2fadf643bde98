"""Outbound HTTP: allowlist, SSRF guard, redirects, timeouts, size cap, retry signals.

The tests talk to a real HTTP server started on 127.0.0.1 in a thread. Addresses that must be
refused (private, link-local, IPv6 loopback) are refused before any packet is sent, so they need
no server.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
import requests
import urllib3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import broker.outbound.guard
import broker.outbound.http_client
from broker.engine.run.ports import HttpRequest
from broker.errors import (
    BrokerError,
    ConfigError,
    OutboundBlocked,
    PayloadTooLarge,
    RetryLater,
    WorkflowFault,
)
from broker.outbound.guard import (
    AddressGuard,
    GuardedAdapter,
    HostPattern,
    _connect_vetted,
    admitted,
    blocked_reason,
    parse_allowlist,
    system_resolver,
)
from broker.outbound.http_client import (
    OutboundHttp,
    decode_content,
    parse_retry_after,
    transient,
)
from broker.outbound.urls import Target, parse_target
from broker.settings import Settings


class Sink(ThreadingHTTPServer):
    daemon_threads = True
    release = threading.Event()  # replaced per server; lets a stalled handler finish at teardown
    seen: list[dict[str, Any]]


class Handler(BaseHTTPRequestHandler):
    server: Sink

    def log_message(self, format: str, *args: Any) -> None:
        """Keep the test output quiet."""

    def _reply(
        self,
        status: int,
        body: bytes,
        content_type: str = "text/plain",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.server.seen.append({"path": url.path, "headers": dict(self.headers)})
        if url.path == "/json":
            self._reply(200, b'{"ok": true, "n": 1}', "application/json; charset=utf-8")
        elif url.path == "/text":
            self._reply(200, "grüß".encode("latin-1"), "text/plain; charset=latin-1")
        elif url.path == "/echo":
            self._reply(200, json.dumps(dict(self.headers)).encode(), "application/json")
        elif url.path == "/status":
            headers = {"Retry-After": query["retry"]} if "retry" in query else {}
            self._reply(int(query["code"]), b"status", headers=headers)
        elif url.path == "/redirect":
            self._reply(int(query.get("code", "302")), b"", headers={"Location": query["to"]})
        elif url.path == "/hops":
            # n redirects in a row, then the JSON page
            left = int(query["n"])
            if left:
                self._reply(302, b"", headers={"Location": f"/hops?n={left - 1}"})
            else:
                self._reply(200, b'{"ok": true}', "application/json")
        elif url.path == "/created":
            # A Location that is no redirect: the answer to a create
            self._reply(201, b'{"id": 7}', "application/json", headers={"Location": "/json"})
        elif url.path == "/stall":
            self.server.release.wait(10)
            self._reply(200, b"late")
        elif url.path == "/big":
            self._reply(200, b"x" * int(query["size"]))
        elif url.path == "/big-chunked":
            # No Content-Length: the cap must hold while streaming, not only on the header.
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(int(query["chunks"])):
                self.wfile.write(b"4000\r\n" + b"y" * 0x4000 + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        elif url.path == "/endless":
            # 64 MiB without a length, to the end of the connection: only a read of bounded
            # chunks stops before the end. Records whether it sent it all.
            self.send_response(200)
            self.end_headers()
            sent, whole = 0, False
            with contextlib.suppress(OSError):
                while sent < 64 * 2**20 and not self.server.release.is_set():
                    self.wfile.write(b"z" * 0x10000)
                    sent += 0x10000
                whole = sent >= 64 * 2**20
            self.server.seen.append({"path": "/endless-done", "whole": whole})
            self.close_connection = True
        elif url.path == "/truncated":
            # Declares 1000 bytes, sends 10 and hangs up.
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.wfile.flush()
            self.close_connection = True
        elif url.path == "/not-gzip":
            self._reply(200, b"this is not gzip", headers={"Content-Encoding": "gzip"})
        else:
            self._reply(404, b"no such page")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self.server.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
        if self.path.startswith("/redirect"):
            self.do_GET()
            return
        self._reply(201, body, "application/json")


def serving() -> Iterator[Sink]:
    server = Sink(("127.0.0.1", 0), Handler)
    server.release = threading.Event()
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def sink() -> Iterator[Sink]:
    yield from serving()


@pytest.fixture
def victim() -> Iterator[Sink]:
    """A second loopback server: the target an SSRF attempt must never reach."""
    yield from serving()


def base(server: Sink) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def client(settings: Settings, allowlist: str = "", **kwargs: Any) -> OutboundHttp:
    return OutboundHttp(
        settings.replace(http_allowlist=tuple(allowlist.split(",")) if allowlist else ()), **kwargs
    )


def get(http: OutboundHttp, url: str, **kwargs: Any) -> Any:
    return http.send(HttpRequest("GET", url, **kwargs))


# Allowlisted loopback --------------------------------------------------------------------------


def test_allowlisted_loopback_host_is_reached_and_json_is_parsed(
    settings: Settings, sink: Sink
) -> None:
    # Given an allowlist that names the loopback sink
    with client(settings, "127.0.0.1") as http:
        # When a JSON page is fetched
        response = get(http, f"{base(sink)}/json")
    # Then the parsed JSON comes back with the raw body
    assert response.status_code == 200
    assert response.content == {"ok": True, "n": 1}
    assert response.body == b'{"ok": true, "n": 1}'


def test_text_is_decoded_with_the_declared_charset(settings: Settings, sink: Sink) -> None:
    with client(settings, "127.0.0.1") as http:
        response = get(http, f"{base(sink)}/text")
    assert response.content == "grüß"


def test_not_found_is_returned_as_a_response(settings: Settings, sink: Sink) -> None:
    with client(settings, "127.0.0.1") as http:
        response = get(http, f"{base(sink)}/missing")
    assert response.status_code == 404
    assert response.content == "no such page"


def test_idempotency_key_header_arrives(settings: Settings, sink: Sink) -> None:
    # Given a request carrying an idempotency key and a stale header of the same name
    request = HttpRequest(
        "GET",
        f"{base(sink)}/echo",
        headers={"idempotency-key": "stale", "X-Trace": "t-1"},
        idempotency_key="instance-1:activity-2",
    )
    # When it is sent
    with client(settings, "127.0.0.1") as http:
        response = http.send(request)
    # Then the server saw exactly the request's key, and the other headers as they were
    assert response.content["Idempotency-Key"] == "instance-1:activity-2"
    assert "idempotency-key" not in response.content
    assert response.content["X-Trace"] == "t-1"


def test_an_invalid_method_or_header_faults_the_activity_as_an_http_fault(
    settings: Settings, sink: Sink
) -> None:
    with client(settings, "127.0.0.1") as http:
        with pytest.raises(WorkflowFault) as method:
            http.send(HttpRequest("GE T", f"{base(sink)}/json"))
        with pytest.raises(WorkflowFault) as header:
            http.send(HttpRequest("GET", f"{base(sink)}/json", headers={"X-Bad": "a\nb"}))
    assert (method.value.message, method.value.category) == ("invalid HTTP method 'GE T'", "HTTP")
    assert header.value.message.startswith(f"invalid outbound request to {base(sink)}/json: ")
    assert header.value.category == "HTTP"
    assert sink.seen == []


def test_a_body_of_many_chunks_is_read_whole(settings: Settings, sink: Sink) -> None:
    with client(settings, "127.0.0.1") as http:
        assert get(http, f"{base(sink)}/big?size=200000").body == b"x" * 200000


def test_post_body_and_headers_are_sent(settings: Settings, sink: Sink) -> None:
    request = HttpRequest(
        "POST",
        f"{base(sink)}/submit",
        body=b'{"a": 1}',
        headers={"Content-Type": "application/json"},
    )
    with client(settings, "127.0.0.1") as http:
        response = http.send(request)
    assert response.status_code == 201
    assert response.content == {"a": 1}


# Allowlist patterns ------------------------------------------------------------------------------


def test_wildcard_host_pattern_admits_the_sink(settings: Settings, sink: Sink) -> None:
    with client(settings, "127.0.*") as http:
        assert get(http, f"{base(sink)}/json").status_code == 200


def test_matching_port_pattern_admits_and_other_port_refuses(
    settings: Settings, sink: Sink
) -> None:
    port = sink.server_address[1]
    with client(settings, f"127.0.0.1:{port}") as http:
        assert get(http, f"{base(sink)}/json").status_code == 200
    with client(settings, f"127.0.0.1:{port + 1}") as http, pytest.raises(OutboundBlocked) as err:
        get(http, f"{base(sink)}/json")
    assert "127.0.0.1" in str(err.value)
    assert [s["path"] for s in sink.seen] == ["/json"]  # only the admitted call arrived


def test_host_not_in_allowlist_is_refused_without_a_request(settings: Settings, sink: Sink) -> None:
    with client(settings, "api.example.com") as http, pytest.raises(OutboundBlocked) as err:
        get(http, f"{base(sink)}/json")
    assert err.value.details["reason"] == "not allowlisted"
    assert sink.seen == []


@pytest.mark.parametrize(
    ("pattern", "host", "port", "expected"),
    [
        ("*.example.com", "api.example.com", 443, True),
        ("*.example.com", "a.b.example.com", 80, True),
        ("*.example.com", "example.com", 443, False),
        ("*.example.com", "example.com.evil.net", 443, False),
        ("API.Example.COM", "api.example.com", 8443, True),
        ("api.example.com:443", "api.example.com", 80, False),
        ("api.example.com:80*", "api.example.com", 8080, True),
        ("api.example.com:*", "api.example.com", 1, True),
        ("[::1]:8080", "::1", 8080, True),
        ("[::1]", "::1", 1234, True),
        ("::1", "::1", 1234, True),
        ("10.0.0.*", "10.0.0.7", 80, True),
    ],
)
def test_host_patterns_match_host_and_port(
    pattern: str, host: str, port: int, expected: bool
) -> None:
    assert HostPattern.parse(pattern).matches(host, port) is expected


@pytest.mark.parametrize(
    "entry",
    ["api.example.com:https", ":8080", "[::1]:x", "[::1", "[::1]8080", "[::1]]:80", "[::1]:"],
)
def test_malformed_allowlist_entries_are_refused(settings: Settings, entry: str) -> None:
    with pytest.raises(ConfigError, match="BROKER_HTTP_ALLOWLIST"):
        OutboundHttp(settings.replace(http_allowlist=(entry,)))


def test_non_http_scheme_is_refused(settings: Settings) -> None:
    with client(settings, "*") as http, pytest.raises(OutboundBlocked) as err:
        get(http, "file:///etc/passwd")
    assert err.value.details["reason"] == "scheme"


# Public-only mode (empty allowlist) -------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/json",
        "http://10.1.2.3:{port}/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:{port}/",
        "http://[::ffff:127.0.0.1]:{port}/json",
        "http://localhost:{port}/json",
        "http://0.0.0.0:{port}/json",
        "http://[fe80::1]/",
        "http://224.0.0.1/",
    ],
)
def test_empty_allowlist_refuses_non_public_addresses(
    settings: Settings, sink: Sink, url: str
) -> None:
    # Given no allowlist (public addresses only)
    with client(settings) as http, pytest.raises(OutboundBlocked) as err:
        # When a loopback, private, link-local or otherwise local address is targeted
        get(http, url.format(port=sink.server_address[1]))
    # Then it is refused with the reason, and nothing reached the loopback sink
    assert err.value.details["reason"]
    assert sink.seen == []


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("10.0.0.1", "private"),
        ("192.168.1.1", "private"),
        ("172.16.0.1", "private"),
        ("100.64.0.1", "not globally routable"),
        ("169.254.169.254", "link-local"),
        ("::1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
        ("fc00::1", "private"),
        ("0.0.0.0", "unspecified"),  # noqa: S104 - an address under test, not a bind
        ("240.0.0.1", "reserved"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
        ("fe80::1%eth0", "link-local"),  # a scope id is read with the address
        ("2606:4700::1111%eth0", None),
        ("::ffff:10.0.0.1%1", "private"),
        ("fe80::1%eth0%1", "not an IP address"),
        ("fe80::1%", "not an IP address"),
        ("8.8.8.8%x", "not an IP address"),  # IPv4 has no scope id: refused, never "public"
        ("127.0.0.1%lo", "not an IP address"),
        ("not-an-address", "not an IP address"),
        ("2001:0:5db8:d822::f5ff:fffe", "private"),  # Teredo: a client behind 10.0.0.1
        ("224.0.0.1", "multicast"),
    ],
)
def test_blocked_reason_names_the_address_class(address: str, reason: str | None) -> None:
    assert blocked_reason(address) == reason


def test_a_name_with_one_private_address_among_public_ones_is_refused() -> None:
    # Given a resolver answering one public and one private address
    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.5", port)),
        ]

    # Then the whole name is refused
    with pytest.raises(OutboundBlocked, match=re.escape("10.0.0.5")):
        AddressGuard(resolve).vet("mixed.example", 80)


def test_a_url_registered_for_later_is_resolved_now_and_refused_when_it_cannot_be(
    settings: Settings,
) -> None:
    # Given no allowlist, and a resolver that knows one public name and no other
    lookups: list[str] = []

    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        lookups.append(host)
        if host != "public.test":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]

    http = client(settings, resolver=resolve)
    # When a webhook URL is registered, then a name that resolves to public addresses passes
    http.vet_url("https://public.test/hook")
    # And one that does not resolve is refused for that reason, naming its host
    with pytest.raises(OutboundBlocked) as err:
        http.vet_url("https://nowhere.test:8443/hook")
    assert err.value.details == {"host": "nowhere.test", "reason": "dns"}
    assert err.value.message.startswith("outbound host 'nowhere.test' cannot be resolved: ")
    assert lookups == ["public.test", "nowhere.test"]


def test_a_url_registered_under_an_allowlist_is_checked_against_it_without_a_lookup(
    settings: Settings,
) -> None:
    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        raise AssertionError(f"no lookup expected, got {host}")

    http = client(settings, "hooks.test", resolver=resolve)
    http.vet_url("https://hooks.test/in")
    with pytest.raises(OutboundBlocked):
        http.vet_url("https://elsewhere.test/in")


def test_connection_goes_to_the_checked_address_not_a_second_lookup(
    settings: Settings, sink: Sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a name only our resolver knows, answered with the sink's address, and a guard that
    # treats that address as public for this test
    port = sink.server_address[1]
    lookups: list[str] = []

    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        lookups.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(broker.outbound.guard, "blocked_reason", lambda address: None)
    # When the name is fetched
    with client(settings, resolver=resolve) as http:
        response = get(http, f"http://pinned.test:{port}/echo")
    # Then the one checked answer was used to connect, and the Host header kept the name
    assert response.status_code == 200
    assert lookups == ["pinned.test"]
    assert response.content["Host"] == f"pinned.test:{port}"


# Redirects ---------------------------------------------------------------------------------------


def test_redirect_within_the_allowlist_is_followed(settings: Settings, sink: Sink) -> None:
    with client(settings, "127.0.0.1") as http:
        response = get(http, f"{base(sink)}/redirect?to=/json")
    assert response.content == {"ok": True, "n": 1}
    assert [s["path"] for s in sink.seen] == ["/redirect", "/json"]


def test_five_redirects_are_followed_and_a_sixth_is_refused(settings: Settings, sink: Sink) -> None:
    with client(settings, "127.0.0.1") as http:
        assert get(http, f"{base(sink)}/hops?n=5").content == {"ok": True}
        with pytest.raises(BrokerError) as refused:
            get(http, f"{base(sink)}/hops?n=6")
    url = f"{base(sink)}/hops?n=6"
    assert refused.value.message == f"outbound request to {url} redirected more than 5 times"
    assert refused.value.details == {"url": url}


def test_a_location_on_an_answer_that_is_no_redirect_is_not_followed(
    settings: Settings, sink: Sink
) -> None:
    with client(settings, "127.0.0.1") as http:
        response = get(http, f"{base(sink)}/created")
    assert (response.status_code, response.content) == (201, {"id": 7})
    assert [seen["path"] for seen in sink.seen] == ["/created"]


def test_a_post_redirected_with_307_keeps_its_method_and_body(
    settings: Settings, sink: Sink
) -> None:
    request = HttpRequest("POST", f"{base(sink)}/redirect?code=307&to=/target", body=b'{"a": 1}')
    with client(settings, "127.0.0.1") as http:
        response = http.send(request)
    assert response.status_code == 201
    assert sink.seen[-1]["path"] == "/target"
    assert sink.seen[-1]["body"] == b'{"a": 1}'


def test_redirect_to_a_host_outside_the_allowlist_is_refused(
    settings: Settings, sink: Sink
) -> None:
    # Given an allowed sink that redirects to a host the allowlist does not name
    port = sink.server_address[1]
    with client(settings, "127.0.0.1") as http, pytest.raises(OutboundBlocked) as err:
        # When the redirecting page is fetched
        get(http, f"{base(sink)}/redirect?to=http://localhost:{port}/json")
    # Then the second hop is refused before it is sent
    assert err.value.details["host"] == "localhost"
    assert [s["path"] for s in sink.seen] == ["/redirect"]


def test_a_request_that_follows_no_redirects_answers_the_3xx_itself(
    settings: Settings, sink: Sink
) -> None:
    request = HttpRequest("POST", f"{base(sink)}/redirect?to=/echo", follow_redirects=False)
    with client(settings, "127.0.0.1") as http:
        response = http.send(request)
    assert 300 <= response.status_code < 400
    assert "/echo" not in [s["path"] for s in sink.seen]  # the target was never called


def test_post_redirected_with_302_becomes_a_get_without_body(
    settings: Settings, sink: Sink
) -> None:
    request = HttpRequest(
        "POST",
        f"{base(sink)}/redirect?to=/echo",
        body=b"secret=1",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    with client(settings, "127.0.0.1") as http:
        response = http.send(request)
    assert response.status_code == 200
    assert "Content-Type" not in response.content


# Ambiguous URLs (parser differentials) ---------------------------------------------------------


@pytest.mark.parametrize("allowlist", ["*.example.com", "api.example.com"])
def test_backslash_url_is_refused_in_allowlist_mode_and_never_reaches_loopback(
    settings: Settings, victim: Sink, allowlist: str
) -> None:
    # Given an allowlist naming only example.com hosts, and a loopback server listening
    port = victim.server_address[1]
    url = f"http://127.0.0.1:{port}\\@api.example.com/json"
    with client(settings, allowlist) as http, pytest.raises(OutboundBlocked) as err:
        # When a URL whose host is example.com to urlsplit but loopback to urllib3 is fetched
        get(http, url)
    # Then it is refused as ambiguous, naming the backslash, and loopback received nothing
    assert err.value.details["reason"] == "malformed"
    assert "backslash" in str(err.value)
    assert victim.seen == []


def test_backslash_redirect_from_an_allowlisted_server_is_refused(
    settings: Settings, sink: Sink, victim: Sink
) -> None:
    # Given an allowlisted server that redirects to a backslash URL aimed at another loopback port
    target = f"http://127.0.0.1:{victim.server_address[1]}\\@api.example.com/json"
    allowlist = f"127.0.0.1:{sink.server_address[1]},*.example.com"
    with client(settings, allowlist) as http, pytest.raises(OutboundBlocked) as err:
        # When the redirecting page is fetched
        get(http, f"{base(sink)}/redirect?to={quote(target, safe='')}")
    # Then the hop is refused before it is sent: only the allowlisted server was called
    assert err.value.details["reason"] == "malformed"
    assert [s["path"] for s in sink.seen] == ["/redirect"]
    assert victim.seen == []


def test_a_url_that_slips_past_the_parser_is_refused_at_connect_time_in_allowlist_mode(
    settings: Settings, victim: Sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a parser fooled into reading a loopback URL as an allowlisted host
    port = victim.server_address[1]

    def fooled(url: str) -> Target:
        return Target("http", "api.example.com", 80, f"http://127.0.0.1:{port}/json")

    monkeypatch.setattr(broker.outbound.http_client, "parse_target", fooled)
    with client(settings, "*.example.com") as http, pytest.raises(OutboundBlocked) as err:
        # When the URL is fetched
        get(http, "http://api.example.com/json")
    # Then the connection itself is checked against the allowlist and refused
    assert err.value.details == {"host": "127.0.0.1", "reason": "not allowlisted"}
    assert "connection" in str(err.value)
    assert victim.seen == []


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://api.example.com\\@127.0.0.1/", "backslash"),
        ("http://api.example.com/a\\b", "backslash"),
        ("http://api.example.com\t/", "U+0009"),
        ("http://api.example.com /", "U+0020"),
        ("http://api.example.com/\n", "U+000A"),
        ("http://api.example.com/\x00", "U+0000"),
        ("http://api.example.com\u200b/", "U+200B"),
        (" http://api.example.com/", "U+0020"),
        ("http://a@b@api.example.com/", "more than one '@'"),
        ("http://ex%41mple.com/", "percent escape"),
        ("http://b\u00fccher.example.com/", "non-ASCII"),
        ("http://api.example.com:80:81/", "host or port"),
    ],
)
def test_ambiguous_or_malformed_urls_are_refused_naming_the_problem(url: str, problem: str) -> None:
    with pytest.raises(OutboundBlocked) as err:
        parse_target(url)
    assert err.value.details["reason"] == "malformed"
    assert problem in str(err.value)


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://API.Example.com./x?q=Zo\u00eb#f", ("http", "api.example.com", 80)),
        ("https://user:pw@api.example.com/x", ("https", "api.example.com", 443)),
        ("http://[::1]:8080/", ("http", "::1", 8080)),
        ("http://127.0.0.1:8099/ledger", ("http", "127.0.0.1", 8099)),
    ],
)
def test_plain_urls_parse_to_the_host_they_connect_to(
    url: str, origin: tuple[str, str, int]
) -> None:
    assert parse_target(url).origin == origin


def test_a_refused_url_keeps_its_password_out_of_the_message() -> None:
    with pytest.raises(OutboundBlocked) as err:
        parse_target("http://user:hunter2@127.0.0.1:1\\@api.example.com/")
    assert "hunter2" not in str(err.value)


# Transient failures, timeouts and size ---------------------------------------------------------


def test_service_unavailable_is_an_answer_the_caller_routes(settings: Settings, sink: Sink) -> None:
    # Given a server answering 503, when it is called, then the 503 comes back as a response
    # (a workflow routes it; its resilience strategy, not the client, decides about retries)
    with client(settings, "127.0.0.1") as http:
        response = get(http, f"{base(sink)}/status?code=503")
    assert response.status_code == 503
    # and for the broker's own calls it means "later"
    retry = transient(response)
    assert retry is not None
    assert retry.status_code == 503


def test_too_many_requests_is_transient_with_its_retry_after(
    settings: Settings, sink: Sink
) -> None:
    with client(settings, "127.0.0.1") as http:
        response = get(http, f"{base(sink)}/status?code=429&retry=7")
    assert response.status_code == 429
    retry = transient(response)
    assert retry is not None
    assert retry.delay == 7.0


def test_a_client_error_is_not_transient(settings: Settings, sink: Sink) -> None:
    with client(settings, "127.0.0.1") as http:
        response = get(http, f"{base(sink)}/status?code=404")
    assert (response.status_code, transient(response)) == (404, None)


def test_refused_connection_raises_retry_later(settings: Settings) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: connections are refused
        with client(settings, "127.0.0.1") as http, pytest.raises(RetryLater) as caught:
            get(http, f"http://127.0.0.1:{port}/")
    # Elsa's "Failed to connect"
    assert caught.value.reason == "connect"


def test_timeout_raises_retry_later(settings: Settings, sink: Sink) -> None:
    # Given a page that does not answer within the request's own timeout
    with client(settings, "127.0.0.1") as http, pytest.raises(RetryLater) as caught:
        # When it is fetched with a short timeout, then the call gives up with RetryLater
        get(http, f"{base(sink)}/stall", timeout=0.2)
    # Elsa's "Timeout"
    assert caught.value.reason == "timeout"


def test_body_over_the_declared_cap_is_refused(settings: Settings, sink: Sink) -> None:
    http = OutboundHttp(
        settings.replace(http_allowlist=("127.0.0.1",), http_max_response_bytes=1000)
    )
    with http, pytest.raises(PayloadTooLarge) as refused:
        get(http, f"{base(sink)}/big?size=1001")
    # Refused on its Content-Length, before a byte of the body is read
    assert refused.value.message == (
        f"response from {base(sink)}/big?size=1001 declares 1001 bytes, more than the"
        " 1000-byte cap (BROKER_HTTP_MAX_RESPONSE_BYTES)"
    )
    assert refused.value.details == {"url": f"{base(sink)}/big?size=1001", "limit": 1000}


def test_body_at_the_cap_is_read_whole(settings: Settings, sink: Sink) -> None:
    http = OutboundHttp(
        settings.replace(http_allowlist=("127.0.0.1",), http_max_response_bytes=1000)
    )
    with http:
        assert get(http, f"{base(sink)}/big?size=1000").body == b"x" * 1000


def test_streamed_body_is_cut_at_the_cap(settings: Settings, sink: Sink) -> None:
    # Given a cap of 20 KiB and a chunked response of 64 KiB without Content-Length
    http = OutboundHttp(
        settings.replace(http_allowlist=("127.0.0.1",), http_max_response_bytes=20 * 1024)
    )
    # Then reading stops with a clear error
    with http, pytest.raises(PayloadTooLarge) as refused:
        get(http, f"{base(sink)}/big-chunked?chunks=4")
    url = f"{base(sink)}/big-chunked?chunks=4"
    assert refused.value.message == (
        f"response from {url} exceeds the 20480-byte cap (BROKER_HTTP_MAX_RESPONSE_BYTES);"
        " reading stopped"
    )
    assert refused.value.details == {"url": url, "limit": 20480}


def test_a_body_without_a_length_is_read_a_bounded_chunk_at_a_time_and_cut_at_the_cap(
    settings: Settings, sink: Sink
) -> None:
    # Given a cap of 20 KiB and a response of 64 MiB that declares no length
    http = OutboundHttp(
        settings.replace(http_allowlist=("127.0.0.1",), http_max_response_bytes=20 * 1024)
    )
    # Then the read stops at the cap
    with http, pytest.raises(PayloadTooLarge, match="reading stopped"):
        get(http, f"{base(sink)}/endless", timeout=10)
    # And the server could not send the rest: the connection was closed under it
    deadline = time.monotonic() + 10
    while not any(seen["path"] == "/endless-done" for seen in sink.seen):
        assert time.monotonic() < deadline, "the server is still sending"
        time.sleep(0.01)
    assert [seen["whole"] for seen in sink.seen if seen["path"] == "/endless-done"] == [False]


def test_a_response_cut_short_is_a_connection_failure_to_retry(
    settings: Settings, sink: Sink
) -> None:
    with client(settings, "127.0.0.1") as http, pytest.raises(RetryLater) as caught:
        get(http, f"{base(sink)}/truncated")
    assert caught.value.reason == "connect"
    assert caught.value.message.startswith(f"reading the response from {base(sink)}/truncated")


def test_a_body_that_cannot_be_decoded_is_refused_naming_the_url(
    settings: Settings, sink: Sink
) -> None:
    with client(settings, "127.0.0.1") as http, pytest.raises(BrokerError) as refused:
        get(http, f"{base(sink)}/not-gzip")
    assert refused.value.message.startswith(
        f"response from {base(sink)}/not-gzip cannot be decoded"
    )
    assert refused.value.details == {"url": f"{base(sink)}/not-gzip"}


# Helpers ------------------------------------------------------------------------------------------


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_json_media_types_are_parsed_and_bad_json_is_kept_as_text() -> None:
    assert decode_content(b'{"a": 1}', "application/problem+json") == {"a": 1}
    assert decode_content(b"", "application/json") is None
    assert decode_content(b"{oops", "application/json") == "{oops"


# TLS to a pinned address ------------------------------------------------------------------------


def self_signed(folder: Path, host: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``host`` (its own trust anchor) and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{host}.pem", folder / f"{host}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_sink(tmp_path: Path) -> Iterator[tuple[Sink, Path]]:
    """An HTTPS sink on 127.0.0.1 whose certificate names only ``pinned.test``."""
    cert, key = self_signed(tmp_path, "pinned.test")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = Sink(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.release = threading.Event()
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server, cert
    server.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


def pinned_client(
    settings: Settings, port: int, trust: Path, monkeypatch: pytest.MonkeyPatch
) -> OutboundHttp:
    """A public-only client resolving ``*.test`` names to the loopback sink, treated as public."""

    def resolve(host: str, _port: int) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(broker.outbound.guard, "blocked_reason", lambda address: None)
    http = client(settings, resolver=resolve)
    http.session.verify = str(trust)
    return http


def test_tls_to_a_pinned_address_verifies_the_hostname(
    settings: Settings, tls_sink: tuple[Sink, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an HTTPS server whose certificate names pinned.test, reached through the pinned
    # address 127.0.0.1 (which the certificate does not name)
    server, cert = tls_sink
    port = server.server_address[1]
    # When pinned.test is fetched, then TLS succeeds: SNI and verification used the hostname
    with pinned_client(settings, port, cert, monkeypatch) as http:
        response = get(http, f"https://pinned.test:{port}/json")
    assert response.content == {"ok": True, "n": 1}


def test_tls_certificate_for_another_name_is_refused_for_good(
    settings: Settings, tls_sink: tuple[Sink, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the same server reached under a name its certificate does not carry
    server, cert = tls_sink
    port = server.server_address[1]
    http = pinned_client(settings, port, cert, monkeypatch)
    # Then the call fails with a permanent error, not a retry
    with http, pytest.raises(BrokerError, match="certificate") as err:
        get(http, f"https://impostor.test:{port}/json")
    assert not isinstance(err.value, RetryLater)
    assert err.value.message.startswith(
        f"TLS certificate of https://impostor.test:{port}/json was refused: "
    )
    assert err.value.details == {"url": f"https://impostor.test:{port}/json"}


def test_a_tls_handshake_that_fails_for_another_reason_is_retried(
    settings: Settings, sink: Sink
) -> None:
    # Given a server that speaks plain HTTP, called over HTTPS: no certificate to refuse
    url = f"https://127.0.0.1:{sink.server_address[1]}/json"
    with client(settings, "127.0.0.1") as http, pytest.raises(RetryLater) as caught:
        get(http, url)
    # Then the failed handshake is a connection failure to retry
    assert caught.value.reason == "connect"
    assert caught.value.message.startswith(f"TLS handshake with {url} failed: ")


# The next hop of a redirect, and the certificate cause -------------------------------------------

SOURCE = parse_target("https://api.example.com/a")
SAME = parse_target("https://api.example.com/b")
OTHER = parse_target("https://elsewhere.example.com/b")
SENT = {
    "Content-Type": "application/json",
    "Content-Length": "2",
    "Authorization": "t",
    "X-Id": "1",
}


@pytest.mark.parametrize(
    ("status", "method", "next_method"),
    [
        (303, "POST", "GET"),
        (303, "PUT", "GET"),
        (301, "POST", "GET"),
        (302, "POST", "GET"),
        (303, "HEAD", "HEAD"),
        (301, "PUT", "PUT"),
        (302, "PUT", "PUT"),
        (307, "POST", "POST"),
        (308, "POST", "POST"),
        (304, "PUT", "PUT"),
    ],
)
def test_a_redirect_turns_into_get_exactly_as_browsers_do(
    status: int, method: str, next_method: str
) -> None:
    method_after, headers, body = broker.outbound.http_client._redirected(
        status, method, SENT, b"{}", SOURCE, SAME
    )
    assert method_after == next_method
    if next_method == method:
        # The same request again: body and headers unchanged
        assert (headers, body) == (SENT, b"{}")
    else:
        # A GET carries no body, so the body's headers go too; the others stay
        assert body is None
        assert headers == {"Authorization": "t", "X-Id": "1"}


def test_credentials_follow_a_redirect_only_to_the_same_origin() -> None:
    sent = {"Authorization": "t", "Proxy-Authorization": "p", "COOKIE": "c", "X-Id": "1"}
    _, same, _ = broker.outbound.http_client._redirected(307, "GET", sent, None, SOURCE, SAME)
    _, other, _ = broker.outbound.http_client._redirected(307, "GET", sent, None, SOURCE, OTHER)
    assert same == sent
    assert other == {"X-Id": "1"}


def cert_error() -> ssl.SSLCertVerificationError:
    return ssl.SSLCertVerificationError(1, "certificate verify failed")


class Wrapped(Exception):
    """An error that names its cause only in ``.reason``, as urllib3's do."""

    def __init__(self, reason: BaseException) -> None:
        super().__init__("wrapped")
        self.reason = reason


def caused_by(cause: BaseException) -> BaseException:
    try:
        raise OSError("outer") from cause
    except OSError as exc:
        return exc


def in_context(context: BaseException) -> BaseException:
    try:
        try:
            raise context
        except BaseException:
            raise OSError("while handling") from None
    except OSError as exc:
        exc.__suppress_context__ = False
        return exc


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(cert_error(), id="itself"),
        pytest.param(Wrapped(cert_error()), id="reason"),
        pytest.param(OSError("x", cert_error()), id="args"),
        pytest.param(caused_by(cert_error()), id="cause"),
        pytest.param(in_context(cert_error()), id="context"),
        pytest.param(Wrapped(caused_by(cert_error())), id="deep"),
    ],
)
def test_a_certificate_failure_is_found_anywhere_in_the_chain(error: BaseException) -> None:
    assert broker.outbound.http_client._caused_by_certificate(error)


def test_an_error_without_a_certificate_failure_is_not_one() -> None:
    assert not broker.outbound.http_client._caused_by_certificate(
        Wrapped(caused_by(ConnectionError("x")))
    )
    assert not broker.outbound.http_client._caused_by_certificate(
        ssl.SSLError(1, "handshake failure")
    )


def test_a_chain_that_loops_is_walked_once_past_the_repeat() -> None:
    # Given an error that names itself before the certificate failure it also carries
    error = OSError("loop")
    error.args = (cert_error(), error)
    # Then the walk skips the repeat and still finds the failure
    assert broker.outbound.http_client._caused_by_certificate(error)
    looping = OSError("loop")
    looping.args = (looping,)
    assert not broker.outbound.http_client._caused_by_certificate(looping)


def test_a_malformed_url_is_refused_without_naming_a_host() -> None:
    with pytest.raises(OutboundBlocked) as info:
        parse_target("http://exa\\mple.com/")
    assert info.value.details == {"host": None, "reason": "malformed"}


# Connecting to the vetted address ----------------------------------------------------------------


def pinned_guard(*ports: int) -> AddressGuard:
    """A guard that admits ``pinned.test`` and resolves it to loopback, once per port given."""

    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", p)) for p in ports]

    return AddressGuard(resolve, parse_allowlist(["pinned.test"]))


def test_the_vetted_socket_keeps_the_connections_timeout(sink: Sink) -> None:
    port = sink.server_address[1]
    timed = urllib3.connection.HTTPConnection("pinned.test", port, timeout=3.5)
    untimed = urllib3.connection.HTTPConnection("pinned.test", port)  # urllib3's default
    for conn, expected in ((timed, 3.5), (untimed, None)):
        sock = _connect_vetted(conn, pinned_guard(port))
        try:
            assert sock.gettimeout() == expected
        finally:
            sock.close()


def test_a_refused_address_is_passed_over_for_the_next_and_the_last_error_is_named(
    sink: Sink,
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: refused
        dead = closed.getsockname()[1]
        conn = urllib3.connection.HTTPConnection("pinned.test", 80, timeout=5)
        # Given a name whose first address refuses, then the next one is connected
        sock = _connect_vetted(conn, pinned_guard(dead, sink.server_address[1]))
        assert sock.getpeername() == ("127.0.0.1", sink.server_address[1])
        sock.close()
        # And when every address refuses, the error names why
        with pytest.raises(urllib3.exceptions.NewConnectionError) as failed:
            _connect_vetted(conn, pinned_guard(dead))
    assert "Failed to establish a new connection: [Errno 111] Connection refused" in str(
        failed.value
    )
    assert isinstance(failed.value.__cause__, ConnectionRefusedError)


def test_a_name_without_addresses_fails_saying_so() -> None:
    conn = urllib3.connection.HTTPConnection("pinned.test", 80, timeout=5)
    with pytest.raises(urllib3.exceptions.NewConnectionError) as failed:
        _connect_vetted(conn, pinned_guard())
    assert str(failed.value).endswith("Failed to establish a new connection: no address")


def test_a_connect_that_times_out_is_urllib3s_connect_timeout() -> None:
    # Given a listener whose accept queue is full, so that a further connect is never answered
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        queued = []
        try:
            for _ in range(8):
                waiting = socket.socket()
                waiting.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    waiting.connect(("127.0.0.1", port))
                queued.append(waiting)
            conn = urllib3.connection.HTTPConnection("pinned.test", port, timeout=0.3)
            with pytest.raises(urllib3.exceptions.ConnectTimeoutError) as late:
                _connect_vetted(conn, pinned_guard(port))
        finally:
            for waiting in queued:
                waiting.close()
    assert late.value.args == (conn, "Connection to pinned.test timed out (connect timeout=0.3)")
    assert isinstance(late.value.__cause__, TimeoutError)


def test_the_guard_reads_a_host_as_the_allowlist_does() -> None:
    # Given a resolver that records the names it is asked for
    asked: list[str] = []

    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]

    # Then a host in capitals with a final dot matches its allowlist entry, and a bracketed
    # IPv6 address is resolved without its brackets
    AddressGuard(resolve, parse_allowlist(["api.example.com"])).vet("API.Example.COM.", 443)
    AddressGuard(resolve).vet("[2606:4700::1111]", 443)
    # and only brackets and final dots are trimmed, never a letter at either end of the name
    AddressGuard(resolve, parse_allowlist(["x.example.x"])).vet("X.Example.X", 443)
    assert asked == ["api.example.com", "2606:4700::1111", "x.example.x"]


def test_a_host_resolving_to_a_private_address_is_refused_naming_it_and_the_way_out() -> None:
    def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.5", port))]

    with pytest.raises(OutboundBlocked) as refused:
        AddressGuard(resolve).vet("internal.test", 80)
    assert refused.value.message == (
        "outbound host 'internal.test' resolves to 10.0.0.5, a private address; "
        "add it to BROKER_HTTP_ALLOWLIST to allow it"
    )
    assert refused.value.details == {"host": "internal.test", "reason": "private"}


def test_the_system_resolver_answers_stream_sockets_only() -> None:
    infos = system_resolver("localhost", 80)
    assert infos
    assert {info[1] for info in infos} == {socket.SOCK_STREAM}


def test_an_allowlist_entry_reads_as_a_host_does_in_any_case_with_a_final_dot() -> None:
    allowlist = parse_allowlist(["API.Example.com", "hooks.example.TX."])
    assert admitted(allowlist, "api.example.com", 443)
    assert admitted(allowlist, "hooks.example.tx", 443)
    assert not admitted(allowlist, "hooks.example.t", 443)


def test_the_guarded_pools_keep_requests_pool_size_and_never_block() -> None:
    # Given the adapter every outbound session mounts
    pools = GuardedAdapter(AddressGuard(system_resolver)).poolmanager
    # Then each host's pool keeps requests' number of idle connections (urllib3's own default
    # is one, which would close every concurrent call's connection after use), and a caller
    # past that number opens another connection instead of waiting for one
    assert pools.connection_pool_kw["maxsize"] == requests.adapters.DEFAULT_POOLSIZE == 10
    assert pools.connection_pool_kw["block"] is False
