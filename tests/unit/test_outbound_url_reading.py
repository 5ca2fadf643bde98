"""How an outbound URL is read before anything connects (``broker.outbound.urls``).

Only the authority (between ``://`` and the first ``/``, ``?`` or ``#``) is held to the strict
rules: the path, query and fragment may carry ``@``, ``%`` escapes, a second URL or non-ASCII text,
as real callback URLs do. Each refusal says what was wrong, in words an operator can act on, and
never repeats the URL's userinfo.
"""

from __future__ import annotations

import pytest
from urllib3.util import Url

import broker.outbound.urls
from broker.errors import OutboundBlocked
from broker.outbound.urls import parse_target

MALFORMED = "outbound URL refused as ambiguous or malformed: "


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://api.example.com/a\\b", "a backslash at position 24"),
        (
            "http://api.example.com\t/",
            "a whitespace or control character (U+0009) at position 22",
        ),
        (
            "http://api.example.com/\x7f",
            "a whitespace or control character (U+007F) at position 23",
        ),
        (
            "http://b\u00fccher.example.com/",
            "non-ASCII characters in the host (write it in its ASCII form)",
        ),
        ("http://a@b@api.example.com/", "more than one '@' in the authority"),
        ("http://ex%41mple.com/", "a percent escape in the host"),
        # refused by the HTTP stack's parser, then by the standard library's
        ("http://api.example.com:80:81/", "the host or port is not valid"),
        ("http://[@", "the host or port is not valid"),
    ],
)
def test_a_refused_url_says_exactly_what_is_wrong(url: str, why: str) -> None:
    with pytest.raises(OutboundBlocked) as refused:
        parse_target(url)
    assert refused.value.message == MALFORMED + why
    assert refused.value.details == {"host": None, "reason": "malformed"}


ONLY_HTTP = "is not allowed (http or https only)"


@pytest.mark.parametrize(
    ("url", "message", "reason"),
    [
        ("ftp://api.example.com/", f"outbound scheme 'ftp' {ONLY_HTTP}", "scheme"),
        ("api.example.com/x", f"outbound scheme '' {ONLY_HTTP}", "scheme"),
        ("http:///x", "outbound URL 'http:///x' names no host", "host"),
    ],
)
def test_a_url_without_an_allowed_scheme_or_a_host_is_refused_for_that(
    url: str, message: str, reason: str
) -> None:
    with pytest.raises(OutboundBlocked) as refused:
        parse_target(url)
    assert refused.value.message == message
    assert refused.value.details == {"host": None, "reason": reason}


@pytest.mark.parametrize(
    "url",
    [
        "http://api.example.com#x@y@z",
        "http://api.example.com#a%41#b@c@d",
        "http://api.example.com?a=%41?b",
        "http://api.example.com?q=zo\u00eb",
        "http://api.example.com/p%41/x@y@z",
        "http://api.example.com/?next=https://b%C3%BCcher.example/",
        "http://us%41er:p%40ss@api.example.com/",
    ],
)
def test_what_follows_the_authority_is_not_held_to_its_rules(url: str) -> None:
    assert parse_target(url).origin == ("http", "api.example.com", 80)


def test_scheme_and_host_are_read_in_lower_case_and_the_url_is_sent_whole() -> None:
    target = parse_target("HTTPS://Xray.Example.com/a?b=c#d")
    assert target.origin == ("https", "xray.example.com", 443)
    assert target.url == "https://xray.example.com/a?b=c#d"


def test_a_url_the_two_parsers_read_differently_is_refused_naming_both_places(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an HTTP stack whose parser reads another host than the standard library does (the
    # kind of disagreement the character checks exist to rule out)
    def misreading(url: str) -> Url:
        return Url(scheme="http", host="127.0.0.1", port=8080, path="/")

    monkeypatch.setattr(broker.outbound.urls, "parse_url", misreading)
    # Then the URL is refused, saying where each parser would connect
    with pytest.raises(OutboundBlocked) as refused:
        parse_target("http://api.example.com/")
    assert refused.value.message == MALFORMED + (
        "parsers disagree on where it connects (127.0.0.1:8080 or api.example.com:80)"
    )
    assert refused.value.details == {"host": None, "reason": "malformed"}
