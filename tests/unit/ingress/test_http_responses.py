"""Rendering what a workflow wrote as the answer to its call: content, or a stored file with its
headers and, for a resumable download, the byte range asked for."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from broker.ingress.http_responses import render
from broker.outbound.files import make_file_store
from broker.settings import Settings


def rendered(settings: Settings, response: dict[str, Any], **headers: str) -> Any:
    app = Flask(__name__)
    with app.test_request_context("/workflows/x", headers=headers):
        from flask import request

        return render(make_file_store(settings), response, request)


@pytest.fixture
def file_response(ingress_settings: Settings) -> dict[str, Any]:
    stored = make_file_store(ingress_settings).put(
        "response-1", b"0123456789", filename="n.txt", content_type="text/plain", etag='"v1"'
    )
    return {
        "statusCode": 200,
        "contentType": "text/plain",
        "file": stored.to_json(),
        "headers": {
            "Content-Disposition": "attachment; filename=n.txt; filename*=UTF-8''n.txt",
            "Accept-Ranges": "bytes",
            "ETag": '"v1"',
        },
    }


def test_a_stored_file_is_answered_whole_with_its_headers(
    ingress_settings: Settings, file_response: dict[str, Any]
) -> None:
    out = rendered(ingress_settings, file_response)
    assert (out.status_code, out.get_data()) == (200, b"0123456789")
    assert out.headers["Content-Type"].startswith("text/plain")
    assert out.headers["Content-Disposition"].startswith("attachment; filename=n.txt")
    assert out.headers["ETag"] == '"v1"'


@pytest.mark.parametrize(
    ("wanted", "status", "body", "content_range"),
    [
        ("bytes=2-4", 206, b"234", "bytes 2-4/10"),
        ("bytes=7-", 206, b"789", "bytes 7-9/10"),
        ("bytes=-2", 206, b"89", "bytes 8-9/10"),
        ("bytes=20-", 416, b"", "bytes */10"),
    ],
)
def test_a_resumable_download_answers_the_range_asked_for(
    ingress_settings: Settings,
    file_response: dict[str, Any],
    wanted: str,
    status: int,
    body: bytes,
    content_range: str,
) -> None:
    out = rendered(ingress_settings, file_response, Range=wanted)
    assert (out.status_code, out.get_data(), out.headers["Content-Range"]) == (
        status,
        body,
        content_range,
    )


def test_a_range_is_ignored_when_the_file_changed_or_downloads_are_not_resumable(
    ingress_settings: Settings, file_response: dict[str, Any]
) -> None:
    changed = rendered(ingress_settings, file_response, Range="bytes=2-4", **{"If-Range": '"v0"'})
    assert (changed.status_code, changed.get_data()) == (200, b"0123456789")
    del file_response["headers"]["Accept-Ranges"]
    plain = rendered(ingress_settings, file_response, Range="bytes=2-4")
    assert (plain.status_code, plain.get_data()) == (200, b"0123456789")


def test_content_is_answered_as_json_or_text() -> None:
    settings = Settings.from_env({})
    as_json = rendered(settings, {"statusCode": 201, "content": {"a": 1}})
    assert (as_json.status_code, as_json.get_json()) == (201, {"a": 1})
    as_text = rendered(settings, {"statusCode": 200, "content": "hi", "headers": {"X-A": "1"}})
    assert (as_text.get_data(as_text=True), as_text.headers["X-A"]) == ("hi", "1")
