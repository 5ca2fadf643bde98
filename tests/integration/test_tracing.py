"""Traces (the ``otel`` extra): one trace follows a request from the ingress through its commit,
the publish, the worker's step, the outbound HTTP call and the remote dispatch, the callback, and
the webhook delivery; ``traceparent`` travels in Celery headers, outbox rows, outgoing requests and
the callback URL. Spans are read from the SDK's in-memory exporter; the worker is a real Celery
worker (in a thread of this process, so its spans reach the same exporter) on the filesystem
transport, and the receiving end is a loopback server that records the headers it got.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from broker.names import DEFAULT_QUEUE, RUN_REQUEST, WEBHOOK_QUEUE
from broker.settings import Settings, set_settings
from broker.store.db import dispose_engines
from broker.telemetry import tracing
from tests.support.ingress import (
    environment,
    make_pki,
    signed_callback,
    write_config,
)
from tests.support.services import PROJECT_ROOT
from tests.support.sink import Sink
from tests.support.workflows import sink_workflow, workflow, write_workflow

WEBHOOK_SECRET = "whsec_" + "dHJhY2VkLXdlYmhvb2stc2VjcmV0"
TIMEOUT = 60.0


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.uninstall()
        provider.shutdown()


class Stack:
    def __init__(self, settings: Settings, public: Any, internal: Any, sink: Sink) -> None:
        self.settings, self.public, self.internal, self.sink = settings, public, internal, sink


@pytest.fixture
def stack(tmp_path: Path, spans: InMemorySpanExporter) -> Iterator[Stack]:
    from celery.contrib.testing.worker import start_worker

    from broker.ingress.auth import PEER_CERT
    from broker.store import db
    from broker.wiring.runtime import Runtime, make_publisher, set_runtime
    from broker.wiring.web import create_internal_app, create_public_app

    pki = make_pki(tmp_path / "pki")
    config = write_config(tmp_path / "config", pki)
    with Sink() as sink:
        # ClientA's OpenType calls the sink; ClientB's OtherType runs on a "remote Elsa" (the sink)
        folder = Path(config["BROKER_WORKFLOW_PATHS"])
        write_workflow(folder, sink_workflow("open-type", "OpenType", sink.url("/step")))
        write_workflow(
            folder, workflow("other-type", [], request_type="OtherType", executor="elsa")
        )
        clients_file = Path(config["BROKER_CLIENTS_FILE"])
        clients = json.loads(clients_file.read_text())
        for client in clients["clients"]:
            if client["clientId"] == "ClientB":
                client.update(allowCallbackUrl=True, callbackSecret=WEBHOOK_SECRET)
        clients_file.write_text(json.dumps(clients))
        env = environment(
            tmp_path / "var",
            pki,
            config,
            BROKER_HTTP_ALLOWLIST="127.0.0.1:*",
            BROKER_ELSA_DISPATCH_URL=sink.url("/elsa"),
            BROKER_CALLBACK_BASE_URL="http://127.0.0.1:5080",
            BROKER_OUTBOX_RELAY_INTERVAL="0.5",
        )
        settings = Settings.from_env(env)
        db.upgrade(settings.database_url)
        set_settings(settings)
        import tasks
        from tasks.celery_app import create_app

        app = create_app(settings)
        assert tasks.workflow is not None  # the task adapters are registered on every app
        set_runtime(Runtime(settings, celery_app=app))
        factory = db.make_session_factory(db.make_engine(settings.database_url))
        public = create_public_app(settings, publisher=make_publisher(settings, factory))
        internal = create_internal_app(settings, publisher=make_publisher(settings, factory))
        client_a, client_b = public.test_client(), public.test_client()
        client_a.environ_base[PEER_CERT] = pki.der("ClientA")  # type: ignore[assignment]
        client_b.environ_base[PEER_CERT] = pki.der("ClientB")  # type: ignore[assignment]
        public.test_clients = {"ClientA": client_a, "ClientB": client_b}  # type: ignore[attr-defined]
        try:
            with start_worker(
                app,
                pool="solo",
                perform_ping_check=False,
                queues=[DEFAULT_QUEUE, WEBHOOK_QUEUE, "broker.othertype", "broker.opentype"],
                shutdown_timeout=30,
            ):
                yield Stack(settings, public, internal.test_client(), sink)
        finally:
            set_runtime(None)
            set_settings(None)
            dispose_engines()


def wait_for(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    [found] = [s for s in spans if s.context.span_id == span.parent.span_id]
    assert found.context.trace_id == span.context.trace_id
    return found


def traceparent_ids(value: str) -> tuple[int, int]:
    """(trace id, parent span id) of a W3C ``traceparent`` header."""
    version, trace_id, span_id, _flags = value.split("-")
    assert version == "00"
    return int(trace_id, 16), int(span_id, 16)


def test_one_trace_follows_a_request_from_the_ingress_to_the_outbound_call(
    stack: Stack, spans: InMemorySpanExporter
) -> None:
    # Given a caller that sends its own trace context
    caller_trace = "0af7651916cd43dd8448eb211c80319c"
    header = f"00-{caller_trace}-b7ad6b7169203331-01"
    client = stack.public.test_clients["ClientA"]  # type: ignore[attr-defined]
    # When it submits a request whose workflow calls an HTTP endpoint
    answer = client.post(
        "/requests",
        json={"requestType": "OpenType", "keys": {}},
        headers={"traceparent": header},
    )
    assert answer.status_code == 202, answer.get_data(as_text=True)
    wait_for(lambda: stack.sink.request_headers.get("/step"), "the workflow's HTTP call")
    finished = wait_for(lambda: named(spans.get_finished_spans(), f"run {RUN_REQUEST}"), "run")
    got = list(spans.get_finished_spans())
    # Then one trace, the caller's, runs ingress -> commit -> publish -> worker step -> HTTP call
    [server] = [s for s in named(got, "POST /requests")]
    assert f"{server.context.trace_id:032x}" == caller_trace
    assert server.parent is not None
    assert server.parent.span_id == int("b7ad6b7169203331", 16)
    [commit] = named(got, "commit submission")
    assert parent_of(commit, got) is server
    [publish] = named(got, f"publish {RUN_REQUEST}")
    assert parent_of(publish, got) is commit
    [run] = finished
    assert parent_of(run, got) is publish
    assert run.attributes is not None
    assert run.attributes["broker.request_id"] == answer.get_json()["correlationId"]
    [call] = named(got, "HTTP POST")
    assert parent_of(call, got) is run
    assert call.attributes is not None
    assert call.attributes["http.response.status_code"] == 200
    # And the outgoing request carried the HTTP span's context
    [sent] = stack.sink.request_headers["/step"]
    assert traceparent_ids(sent["traceparent"]) == (call.context.trace_id, call.context.span_id)
    # And the kinds are what a tracing backend expects
    assert [s.kind.name for s in (server, publish, run, call)] == [
        "SERVER", "PRODUCER", "CONSUMER", "CLIENT"
    ]  # fmt: skip


def test_the_remote_dispatch_callback_and_webhook_delivery_stay_in_the_trace(
    stack: Stack, spans: InMemorySpanExporter
) -> None:
    client = stack.public.test_clients["ClientB"]  # type: ignore[attr-defined]
    # Given a request for a remote Elsa server, with a callback URL for its outcome
    answer = client.post(
        "/requests",
        json={
            "requestType": "OtherType",
            "keys": {"Ref": "R-1"},
            "callbackUrl": stack.sink.url("/hook"),
        },
    )
    assert answer.status_code == 202, answer.get_data(as_text=True)
    request_id = answer.get_json()["correlationId"]
    # When the worker dispatches it
    wait_for(lambda: stack.sink.bodies.get("/elsa"), "the remote dispatch")
    [dispatched] = stack.sink.bodies["/elsa"]
    [dispatch_headers] = stack.sink.request_headers["/elsa"]
    # And the remote server calls back (through the URL it was given, without trace headers)
    callback_url = urlsplit(dispatched["callbackUrl"])
    assert "traceparent" in parse_qs(callback_url.query)
    body, headers = signed_callback(
        stack.settings.callback_secret, request_id, 1, {"status": "Completed", "result": {"ok": 1}}
    )
    done = stack.internal.post(
        f"{callback_url.path}?{callback_url.query}", data=body, headers=headers
    )
    assert done.status_code == 204, done.get_data(as_text=True)
    # And the relay (a beat job, outside any trace) publishes the webhook's outbox row
    from broker.runtime.outbox import rows as outbox
    from broker.wiring.runtime import get_runtime

    rt = get_runtime()
    outbox.relay(rt.settings, rt.factory, rt.sender, rt.locks)
    # Then the webhook is delivered
    wait_for(lambda: stack.sink.request_headers.get("/hook"), "the webhook delivery")
    wait_for(
        lambda: named(spans.get_finished_spans(), "run broker.deliver_webhook"),
        "the webhook task's span",
    )
    got = list(spans.get_finished_spans())
    [server] = named(got, "POST /requests")
    trace_id = server.context.trace_id
    assert server.parent is None  # no caller context: the ingress starts the trace
    # And every step is one trace: ingress -> ... -> worker step -> dispatch -> HTTP
    [run] = [s for s in named(got, f"run {RUN_REQUEST}") if s.context.trace_id == trace_id]
    assert parent_of(parent_of(run, got), got).name == "commit submission"
    [dispatch] = named(got, "dispatch to Elsa")
    assert parent_of(dispatch, got) is run
    [elsa_call] = [s for s in named(got, "HTTP POST") if parent_of(s, got) is dispatch]
    assert traceparent_ids(dispatch_headers["traceparent"]) == (
        trace_id,
        elsa_call.context.span_id,
    )
    # -> callback (continued from the callback URL) -> publish -> webhook task -> delivery -> HTTP
    [callback] = named(got, "POST /internal/requests/<request_id>/result")
    assert callback.kind.name == "SERVER"
    assert parent_of(callback, got) is run
    [delivery] = named(got, "deliver webhook")
    assert delivery.context.trace_id == trace_id
    webhook_run = parent_of(delivery, got)
    assert webhook_run.kind.name == "CONSUMER"
    publish = parent_of(webhook_run, got)
    assert publish.kind.name == "PRODUCER"
    assert parent_of(publish, got) is callback
    [hook_call] = [s for s in named(got, "HTTP POST") if parent_of(s, got) is delivery]
    [hook_headers] = stack.sink.request_headers["/hook"]
    assert traceparent_ids(hook_headers["traceparent"]) == (trace_id, hook_call.context.span_id)


def test_the_relay_publishes_under_the_context_the_row_was_committed_in(
    spans: InMemorySpanExporter,
) -> None:
    from broker.runtime.outbox.publisher import CelerySender
    from broker.store.models import OutboxRow

    # Given a row written inside a span (the relay reads it back later, in another process)
    with tracing.span("commit submission") as committed:
        args = tracing.stamp({"request_id": "r-1"})
    row = OutboxRow(id="o-1", task_name=RUN_REQUEST, queue=DEFAULT_QUEUE, args=args)
    sent: list[dict[str, Any]] = []

    class App:
        def send_task(self, name: str, **options: Any) -> None:
            sent.append({"name": name, **options})

    # When the relay sends it, outside any span
    CelerySender(App()).send(row)
    # Then the task's arguments are the row's own, and its headers continue the commit's trace
    [message] = sent
    assert message["kwargs"] == {"request_id": "r-1", "outbox_id": "o-1"}
    [publish] = named(list(spans.get_finished_spans()), f"publish {RUN_REQUEST}")
    assert publish.parent is not None
    assert publish.parent.span_id == committed.context.span_id
    assert traceparent_ids(message["headers"]["traceparent"]) == (
        committed.context.trace_id,
        publish.context.span_id,
    )


def test_without_tracing_nothing_is_added_anywhere() -> None:
    from broker.runtime.outbox.publisher import CelerySender
    from broker.store.models import OutboxRow

    # Given tracing off (no provider installed, no OTEL_* in this process)
    assert not tracing.enabled()
    args = {"request_id": "r-1"}
    # Then rows, URLs and headers are left as they are
    assert tracing.stamp(args) is args
    assert tracing.carry("http://x/cb") == "http://x/cb"
    assert tracing.inject({}) == {}
    sent: list[dict[str, Any]] = []

    class App:
        def send_task(self, name: str, **options: Any) -> None:
            sent.append(options)

    CelerySender(App()).send(OutboxRow(id="o", task_name="t", queue="q", args=args))
    assert sent[0]["headers"] is None


def test_the_otel_variables_turn_tracing_on_in_a_process(tmp_path: Path) -> None:
    # Given the standard variables naming the console exporter and a service name
    script = (
        "from broker.telemetry import tracing\n"
        "assert tracing.configure('elsa-celery-broker')\n"
        "with tracing.span('hello'):\n"
        "    pass\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "BROKER_"))}  # noqa: TID251
    env.update(
        OTEL_TRACES_EXPORTER="console",
        OTEL_SERVICE_NAME="broker-test",
        OTEL_BSP_SCHEDULE_DELAY="10",
        BROKER_VAR_DIR=str(tmp_path),
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then the span is exported, with the service name from OTEL_SERVICE_NAME
    assert out.returncode == 0, out.stderr
    assert '"name": "hello"' in out.stdout
    assert '"service.name": "broker-test"' in out.stdout
    # And with no exporter named, nothing is turned on
    assert not tracing.wanted({})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none"})
    assert not tracing.wanted({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
