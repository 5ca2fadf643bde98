"""Remote dispatch to an Elsa server that is down, slow, failing or refusing, on SQLite and
PostgreSQL, against real loopback servers.

A transient failure (refused, timeout, 5xx, 408, 429) is retried under the workflow's retry policy
and dead-lettered when the attempts run out; any other answer faults at once. Rows are run in
process (``drain``), so a retry's delay passes at once.
"""

from __future__ import annotations

import datetime as dt
import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from broker.errors import RetryLater, WorkflowFault
from broker.runtime.admin import dead_letters as dead_letter_admin
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.steps import callbacks, runner
from broker.runtime.steps.remote import FAILED_EVENT, post
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import DeadLetter, OutboxRow, Request, RequestEvent, utcnow
from broker.wiring.runtime import Runtime
from tests.support.runtime import (
    drain,
    event_types,
    in_process_runtime,
    request_status,
    runtime_env,
    submit_request,
)
from tests.support.services import free_port
from tests.support.sink import Sink
from tests.support.workflows import set_output, workflow, write_workflow

DISPATCH_PATH = "/dispatch?api_key=K3yValue"
MASKED = "/dispatch?api_key=***"
MakeRuntime = Callable[..., Runtime]


@pytest.fixture
def make_rt(database_url: str, tmp_path: Path) -> Iterator[MakeRuntime]:
    """A runtime whose remote workflow dispatches to ``port`` with retry policy ``retry``."""

    def make(port: int, retry: dict[str, Any], **extra: str) -> Runtime:
        folder = tmp_path / "wf"
        write_workflow(
            folder,
            workflow(
                "remote",
                [set_output("out", "result", "never run here")],
                request_type="Remote",
                executor="elsa",
                retry=retry,
            ),
        )
        env = runtime_env(
            tmp_path / "var",
            database_url=database_url,
            workflows=folder,
            BROKER_ELSA_DISPATCH_URL=f"http://user:pw@127.0.0.1:{port}{DISPATCH_PATH}",
            **extra,
        )
        return in_process_runtime(Settings.from_env(env), tmp_path / "locks")

    dispose_engines()
    yield make
    dispose_engines()


def submit(rt: Runtime) -> tuple[str, str]:
    """A submitted Remote request and its pending run_request row."""
    request_id = submit_request(rt.factory, rt.registry, "Remote")
    with transaction(rt.factory, write=False) as session:
        row_id = session.scalars(select(OutboxRow.id).where(OutboxRow.request_id == request_id))
        return request_id, row_id.one()


def failures(rt: Runtime, request_id: str) -> list[str]:
    with transaction(rt.factory, write=False) as session:
        return list(
            session.scalars(
                select(RequestEvent.message)
                .where(
                    RequestEvent.request_id == request_id, RequestEvent.event_type == FAILED_EVENT
                )
                .order_by(RequestEvent.id)
            )
        )


def letters_of(rt: Runtime, request_id: str) -> list[DeadLetter]:
    with transaction(rt.factory, write=False) as session:
        letters = session.scalars(
            select(DeadLetter)
            .where(DeadLetter.request_id == request_id)
            .order_by(DeadLetter.created_at)
        ).all()
        session.expunge_all()
        return list(letters)


def error_detail(rt: Runtime, request_id: str) -> str:
    with transaction(rt.factory, write=False) as session:
        record = session.get(Request, request_id)
        assert record is not None
        return record.error_detail or ""


def test_a_dispatch_answered_503_is_retried_then_waits_for_the_callback(
    make_rt: MakeRuntime, sink: Sink
) -> None:
    # Given an Elsa server that answers 503 once, then accepts
    rt = make_rt(sink.port, {"maxAttempts": 3, "initialDelay": 30, "maxDelay": 30})
    sink.fail[DISPATCH_PATH] = 1
    request_id, row_id = submit(rt)
    # When the request's task runs
    outcome = runner.run_request(rt, request_id, row_id)
    # Then the failure is retried under the workflow's policy: the row waits (at most maxDelay)
    assert outcome is Outcome.BUSY
    assert request_status(rt.factory, request_id) == "Queued"
    with transaction(rt.factory, write=False) as session:
        row = session.get(OutboxRow, row_id)
        assert row is not None
        assert row.state == "pending"
        assert row.available_at <= utcnow() + dt.timedelta(seconds=30)
        assert "answered HTTP 503" in (row.last_error or "")
    [failure] = failures(rt, request_id)
    assert failure.startswith("attempt 1 of 3: Elsa at http://***@127.0.0.1:")
    assert MASKED in failure
    # When the retry runs
    drain(rt)
    # Then the second POST was accepted and the request waits, Processing, for the callback
    assert [path for path, _key in sink.calls] == [DISPATCH_PATH, DISPATCH_PATH]
    assert request_status(rt.factory, request_id) == "Processing"
    assert event_types(rt.factory, request_id)[-2:] == ["RequestProcessing", "RequestDispatched"]
    assert letters_of(rt, request_id) == []
    # And the callback completes it
    with transaction(rt.factory) as session:
        callbacks.complete_from_callback(session, request_id, "Completed", {"remote": True}, None)
    assert request_status(rt.factory, request_id) == "Completed"


def test_a_refused_dispatch_is_retried_until_its_attempts_run_out_then_dead_lettered(
    make_rt: MakeRuntime,
) -> None:
    # Given a dispatch URL on a port where nothing listens, and three attempts
    port = free_port()
    rt = make_rt(port, {"maxAttempts": 3, "initialDelay": 0, "maxDelay": 0})
    request_id, _row = submit(rt)
    # When the request runs and its retries run
    ran = drain(rt)
    # Then it was tried three times, then faulted with a replayable dead letter
    assert len(ran) == 3
    assert request_status(rt.factory, request_id) == "Faulted"
    messages = failures(rt, request_id)
    assert [m.split(":")[0] for m in messages] == ["attempt 1 of 3", "attempt 2 of 3", "attempt 3"]
    detail = error_detail(rt, request_id)
    assert "cannot be reached" in detail
    assert "gave up after 3 attempts" in detail
    assert f"http://***@127.0.0.1:{port}{MASKED}" in detail
    [letter] = letters_of(rt, request_id)
    assert (letter.kind, letter.reason, letter.attempts, letter.replayable) == (
        "request",
        "Exhausted",
        3,
        True,
    )
    # When an operator replays it while Elsa is still down
    with transaction(rt.factory) as session:
        dead_letter_admin.replay(session, letter.id)
    drain(rt)
    # Then it gets three fresh attempts and a dead letter of its own, replayable again
    assert request_status(rt.factory, request_id) == "Faulted"
    assert len(failures(rt, request_id)) == 6
    letters = letters_of(rt, request_id)
    assert len(letters) == 2
    assert [letter.replayable for letter in letters] == [False, True]


def test_a_dispatch_answered_404_faults_at_once_naming_the_masked_url(
    make_rt: MakeRuntime, sink: Sink
) -> None:
    # Given an Elsa server that answers 404 (a wrong dispatch URL)
    rt = make_rt(sink.port, {"maxAttempts": 5, "initialDelay": 0, "maxDelay": 0})
    sink.answer[DISPATCH_PATH] = 404
    request_id, row_id = submit(rt)
    # When the request runs
    drain(rt)
    # Then it faults after one call, naming the answer and the URL without its credentials
    assert len(sink.calls) == 1
    assert request_status(rt.factory, request_id) == "Faulted"
    detail = error_detail(rt, request_id)
    where = f"http://***@127.0.0.1:{sink.port}{MASKED}"
    assert detail == f"remote dispatch failed: Elsa at {where} answered HTTP 404"
    [letter] = letters_of(rt, request_id)
    assert (letter.reason, letter.attempts, letter.replayable) == ("Failed", 1, True)
    # And a second delivery of the same task changes nothing and calls no one
    runner.run_request(rt, request_id, row_id)
    assert len(sink.calls) == 1
    assert request_status(rt.factory, request_id) == "Faulted"
    assert len(letters_of(rt, request_id)) == 1


def test_a_dispatch_that_times_out_is_retried_then_dead_lettered(make_rt: MakeRuntime) -> None:
    # Given a server that accepts connections and never answers, and a short HTTP timeout
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        rt = make_rt(
            silent.getsockname()[1],
            {"maxAttempts": 2, "initialDelay": 0, "maxDelay": 0},
            BROKER_HTTP_TIMEOUT="0.3",
        )
        request_id, _row = submit(rt)
        # When the request runs
        drain(rt)
    # Then each attempt timed out and the second one faulted it
    assert request_status(rt.factory, request_id) == "Faulted"
    assert len(failures(rt, request_id)) == 2
    assert "did not answer within 0.3s" in error_detail(rt, request_id)
    assert [letter.reason for letter in letters_of(rt, request_id)] == ["Exhausted"]


# The classification of answers ------------------------------------------------------------------


class Answering(http.server.ThreadingHTTPServer):
    status = 200
    headers: dict[str, str] = {}
    calls = 0


class AnswerHandler(http.server.BaseHTTPRequestHandler):
    server: Answering

    def do_POST(self) -> None:
        self.server.calls += 1
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(self.server.status)
        for name, value in self.server.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def answering() -> Iterator[Answering]:
    server = Answering(("127.0.0.1", 0), AnswerHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.mark.parametrize(
    ("status", "headers", "raised", "delay"),
    [
        (200, {}, None, None),
        (202, {}, None, None),
        (500, {}, RetryLater, None),
        (503, {"Retry-After": "7"}, RetryLater, 7.0),
        (408, {}, RetryLater, None),
        (429, {"Retry-After": "3"}, RetryLater, 3.0),
        (400, {}, WorkflowFault, None),
        (401, {}, WorkflowFault, None),
        (404, {}, WorkflowFault, None),
        (302, {"Location": "http://127.0.0.1:1/elsewhere"}, WorkflowFault, None),
    ],
)
def test_answers_are_transient_or_permanent(
    settings: Settings,
    answering: Answering,
    status: int,
    headers: dict[str, str],
    raised: type[Exception] | None,
    delay: float | None,
) -> None:
    answering.status, answering.headers = status, headers
    url = f"http://127.0.0.1:{answering.server_address[1]}/d?token=secret"
    dispatch = settings.replace(elsa_dispatch_url=url)
    if raised is None:
        post(dispatch, {"x": 1})
        return
    with pytest.raises(raised) as caught:
        post(dispatch, {"x": 1})
    assert f"answered HTTP {status}" in str(caught.value)
    assert "token=***" in str(caught.value)
    assert "secret" not in str(caught.value)
    if isinstance(caught.value, RetryLater):
        assert caught.value.delay == delay


def test_a_missing_dispatch_url_faults_naming_the_setting(settings: Settings) -> None:
    with pytest.raises(WorkflowFault, match="BROKER_ELSA_DISPATCH_URL is not set"):
        post(settings.replace(elsa_dispatch_url=""), {})


def test_the_dispatch_goes_through_the_guard_and_reaches_only_its_configured_origin(
    settings: Settings, answering: Answering
) -> None:
    # Given a dispatch URL whose parsers disagree on the host (the backslash form of issue 11)
    port = answering.server_address[1]
    answering.calls = 0
    ambiguous = f"http://127.0.0.1:{port}\\@elsa.example/d"
    # When the worker dispatches, Then the guard refuses it before any connection is made
    with pytest.raises(WorkflowFault, match=r"dispatch to Elsa at .* failed"):
        post(settings.replace(elsa_dispatch_url=ambiguous), {"x": 1})
    assert answering.calls == 0
    # And the configured origin is reachable even with an empty allowlist (a private Elsa server)
    answering.status, answering.headers = 202, {}
    post(settings.replace(elsa_dispatch_url=f"http://127.0.0.1:{port}/d", http_allowlist=()), {})
    assert answering.calls == 1
