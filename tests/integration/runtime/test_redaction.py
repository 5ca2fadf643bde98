"""No credential from a URL or a header reaches anything the broker writes.

The remote-dispatch URL and the HTTP activities' URLs below carry a password, an ``api_key`` and
an ``access_token``, and one activity sends an ``Authorization`` header. Requests are driven
through success, 503s (remote dispatch) and dropped connections (activities) until the
retries run out, and a refused connection; then every place a URL
is written is read back: audit events, ``errorDetail``, the client's views, the journal, dead
letters, outbox errors, instance faults, and every log record (raw for the broker's own loggers,
formatted for all of them, third-party libraries included).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from broker.redaction import redact_headers, redact_text, redact_url
from broker.runtime.requests import queries as request_queries
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import (
    ActivityExecution,
    DeadLetter,
    OutboxRow,
    Request,
    RequestEvent,
    WorkflowInstance,
)
from broker.telemetry.logs import JsonFormatter, TextFormatter
from broker.wiring.runtime import Runtime
from tests.support.runtime import (
    drain,
    in_process_runtime,
    request_status,
    runtime_env,
    submit_request,
)
from tests.support.services import free_port
from tests.support.sink import Sink
from tests.support.workflows import activity, literal, obj, set_output, workflow, write_workflow

PASSWORD, API_KEY, TOKEN, BEARER = "S3cretPass", "K3yValue", "T0kenValue", "Be4rerValue"
BASIC = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
SECRETS = (PASSWORD, API_KEY, TOKEN, BEARER, BASIC)
ONE_RETRY = {"maxAttempts": 2, "initialDelay": 0, "maxDelay": 0}
DISPATCH_PATH = f"/dispatch?api_key={API_KEY}&tenant=t1"
CALL_PATH = f"/call?api_key={API_KEY}&x=1"


def leaky_call(definition_id: str, request_type: str, url: str) -> dict[str, Any]:
    return workflow(
        definition_id,
        [
            activity(
                "call",
                "Elsa.SendHttpRequest",
                url=literal(url),
                method=literal("POST"),
                content=obj({"n": 1}),
                requestHeaders=obj({"Authorization": f"Bearer {BEARER}"}),
            ),
            set_output("out", "result", {"ok": True}),
        ],
        request_type=request_type,
        retry=ONE_RETRY,
    )


@pytest.fixture
def rt(database_url: str, tmp_path: Path, sink: Sink) -> Iterator[Runtime]:
    dispose_engines()
    folder = tmp_path / "wf"
    credentials = f"user:{PASSWORD}@127.0.0.1"
    write_workflow(
        folder, leaky_call("leaky", "Leaky", f"http://{credentials}:{sink.port}{CALL_PATH}")
    )
    write_workflow(
        folder,
        leaky_call(
            "refused", "Refused", f"http://{credentials}:{free_port()}/x?access_token={TOKEN}"
        ),
    )
    write_workflow(
        folder,
        workflow(
            "remote",
            [set_output("out", "result", "never run here")],
            request_type="Remote",
            executor="elsa",
            retry=ONE_RETRY,
        ),
    )
    env = runtime_env(
        tmp_path / "var",
        database_url=database_url,
        workflows=folder,
        BROKER_ELSA_DISPATCH_URL=f"http://{credentials}:{sink.port}{DISPATCH_PATH}",
    )
    yield in_process_runtime(Settings.from_env(env), tmp_path / "locks")
    dispose_engines()


def written_texts(rt: Runtime) -> list[str]:
    """Every column a URL or an error can be written to, and the client's own views."""
    texts: list[str] = []
    with transaction(rt.factory, write=False) as session:
        for event in session.scalars(select(RequestEvent)):
            texts += [event.message or "", json.dumps(event.properties)]
        for record in session.scalars(select(Request)):
            texts += [record.error_detail or "", json.dumps(record.result)]
            view = request_queries.request_view(session, record)
            events = request_queries.list_events(session, record.id, record.client_id)
            texts += [json.dumps(view, default=str), json.dumps(events, default=str)]
        for entry in session.scalars(select(ActivityExecution)):
            texts.append(json.dumps(entry.payload))
        for letter in session.scalars(select(DeadLetter)):
            texts.append(letter.error or "")
        for row in session.scalars(select(OutboxRow)):
            texts.append(row.last_error or "")
        for instance in session.scalars(select(WorkflowInstance)):
            texts.append(json.dumps(instance.fault))
    return texts


def test_no_credential_from_a_url_or_header_is_written_anywhere(
    rt: Runtime, sink: Sink, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # Given a remote dispatch that succeeds, and one that gets 503 until its retries run out
    dispatched = submit_request(rt.factory, rt.registry, "Remote")
    drain(rt)
    sink.answer[DISPATCH_PATH] = 503
    failed_dispatch = submit_request(rt.factory, rt.registry, "Remote")
    drain(rt)
    # And HTTP activities whose connection drops until their retries run out, or cannot
    # connect at all
    sink.drop[CALL_PATH] = -1
    leaky = submit_request(rt.factory, rt.registry, "Leaky")
    drain(rt)
    refused = submit_request(rt.factory, rt.registry, "Refused")
    drain(rt)
    assert request_status(rt.factory, dispatched) == "Processing"
    for request_id in (failed_dispatch, leaky, refused):
        assert request_status(rt.factory, request_id) == "Faulted"
    # (the calls really carried the credentials)
    assert (DISPATCH_PATH, None) in sink.calls
    # When everything written is read back
    texts = written_texts(rt)
    raw = [r.getMessage() for r in caplog.records if r.name.startswith(("broker", "tasks"))]
    lines = [formatter.format(r) for r in caplog.records for formatter in (JsonFormatter(),)]
    lines += [TextFormatter().format(r) for r in caplog.records]
    # Then no credential appears anywhere
    for where, items in (("database", texts), ("broker log", raw), ("log line", lines)):
        for text in items:
            leaked = [secret for secret in SECRETS if secret in text]
            assert not leaked, f"{where}: {leaked} in {text!r}"
    # And the URLs are still there, masked, so the records stay useful
    everything = "\n".join(texts)
    assert f"http://***@127.0.0.1:{sink.port}/dispatch?api_key=***&tenant=t1" in everything
    assert "/call?api_key=***&x=1" in everything
    assert any("/x?access_token=***" in text for text in texts)
    # (the check is not vacuous: a library below the broker logged the raw query)
    assert any(API_KEY in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://user:pw@h.example/p?api_key=1&page=2#access_token=3",
            "https://***@h.example/p?api_key=***&page=2#access_token=***",
        ),
        (
            "http://h/?X-Amz-Signature=abc&sig=d&code=7",
            "http://h/?X-Amz-Signature=***&sig=***&code=7",
        ),
        (
            "http://h/?password=p&Token=t&client_secret=s",
            "http://h/?password=***&Token=***&client_secret=***",
        ),
        ("http://h/plain?keys=a&q=b", "http://h/plain?keys=a&q=b"),
    ],
)
def test_redact_url_masks_userinfo_and_secret_looking_values(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_headers_masks_credential_headers_only() -> None:
    headers = {
        "Authorization": "Bearer x",
        "Cookie": "s=1",
        "X-Api-Key": "k",
        "X-Auth-Token": "t",
        "Proxy-Authorization": "p",
        "Accept": "application/json",
        "Idempotency-Key": "i1:a1",
    }
    assert redact_headers(headers) == {
        "Authorization": "***",
        "Cookie": "***",
        "X-Api-Key": "***",
        "X-Auth-Token": "***",
        "Proxy-Authorization": "***",
        "Accept": "application/json",
        "Idempotency-Key": "i1:a1",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Max retries exceeded with url: /d?api_key=K&t=1 (Caused by ...)",
            "Max retries exceeded with url: /d?api_key=*** &t=1 (Caused by ...)".replace(" &", "&"),
        ),
        (
            "{'Authorization': 'Bearer abc', 'Accept': 'x'}",
            "{'Authorization': '***', 'Accept': 'x'}",
        ),
        ('{"password": "p", "user": "u"}', '{"password": "***", "user": "u"}'),
        ("Authorization: Basic dXNlcjpw\nHost: h", "Authorization: ***\nHost: h"),
        ("redis://:pw@127.0.0.1:6379/0 refused", "redis://***@127.0.0.1:6379/0 refused"),
        ("Missing required keys", "Missing required keys"),
    ],
)
def test_redact_text_masks_credentials_wherever_they_appear(text: str, expected: str) -> None:
    assert redact_text(text) == expected
