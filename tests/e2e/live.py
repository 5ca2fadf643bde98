"""A full running stack for end-to-end tests: every role as its own process, on free ports.

``start_stack`` starts what the README starts in production as a ``tests.support.stack`` stack
(each role in its own process group, stopped by its id, its log in ``<root>/logs``): the public
listener (gunicorn, mutual TLS with certificates generated for the stack), the internal listener
(gunicorn, plain HTTP), one ``celery -A tasks worker`` and one or more ``celery -A tasks beat``.
It answers a ``LiveStack`` with an HTTPS client per certificate, a session factory on the
stack's database, a local HTTP sink (the ledger and every test effect) and helpers to restart
the worker and the beats.

Clients: ``DevClient`` is registered in the database with every admin scope (as ``broker run``
does), ``ClientB`` is allowlisted in ``clients.json`` without scopes and ``Reader`` with the read
scopes only. The workflow folder holds a copy of ``workflows/*.json`` (the invoice's ledger
pointed at the sink) and the workflows of ``long_running_workflows``. Backends: SQLite with the
filesystem transport and file locks by default, or any database, queue and lock URLs given (the
tests pass the conftest fixtures' PostgreSQL and Redis).
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import os
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from broker.clients import certificates as certs
from broker.clients.scopes import ADMIN_SCOPES
from broker.store import db
from broker.wiring import cli as cli_wiring
from tests.support.services import PROJECT_ROOT
from tests.support.sink import Sink
from tests.support.stack import roles
from tests.support.stack.config import Ports, embedded
from tests.support.stack.process import Process
from tests.support.stack.roster import OnStack, Stack
from tests.support.waits import wait_until
from tests.support.workflows import (
    activity,
    approval,
    delayed,
    literal,
    parent,
    post_to,
    set_output,
    sink_workflow,
    workflow,
    write_workflow,
)

DEV = "DevClient"
OTHER = "ClientB"
READER = "Reader"
READ_SCOPES = tuple(s for s in ADMIN_SCOPES if s.startswith("read:"))
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
TEARDOWN_GRACE = 3.0
CALLBACK_SECRET = "live-callback-secret"
#: the request types of the test workflows, open to DevClient and ClientB
TEST_TYPES = (
    "Approval",
    "LateWait",
    "Delayed",
    "TwoStep",
    "Parent",
    "SinkCall",
    "Broken",
    "Load",
)
#: the request types of the trigger workflows, open to DevClient only
DEV_ONLY_TYPES = ("OrderPlaced", "HelloHttp", "SimpleHttpApi", "ApproveOrder", "WebhookOrders")
#: short intervals keep the tests fast; each is a documented setting
FAST = {
    "BROKER_OUTBOX_RELAY_INTERVAL": "0.3",
    "BROKER_BOOKMARK_QUEUE_INTERVAL": "0.3",
    "BROKER_TIMER_INTERVAL": "0.3",
    "BROKER_RECOVERY_INTERVAL": "5",
    "BROKER_INACTIVITY_THRESHOLD": "30",
    "BROKER_HEARTBEAT_INTERVAL": "1",
    "BROKER_LOCK_TTL": "10",
    "BROKER_OUTBOX_LEASE": "15",
    "BROKER_RETRY_INITIAL_DELAY": "0.2",
    "BROKER_RETRY_MAX_DELAY": "1",
    "BROKER_HTTP_TIMEOUT": "5",
}


@dataclasses.dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: Any
    text: str


@dataclasses.dataclass
class LiveStack(OnStack):
    root: Path
    env: dict[str, str]
    roles: Stack
    factory: sessionmaker[Session]
    sink: Sink
    beats: int = 1

    # HTTP -----------------------------------------------------------------------------------------

    def context(self, client: str) -> ssl.SSLContext:
        folder = self.root / "certs"
        context = ssl.create_default_context(cafile=str(folder / "ca.pem"))
        context.load_cert_chain(folder / f"{client}.pem", folder / f"{client}.key")
        return context

    def call(
        self,
        client: str,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """One call to the public listener presenting ``client``'s certificate."""
        conn = http.client.HTTPSConnection(
            "localhost", self.public_port, timeout=30, context=self.context(client)
        )
        try:
            payload = None if body is None else json.dumps(body).encode()
            conn.request(
                method,
                path,
                body=payload,
                headers={"Content-Type": "application/json", **(headers or {})},
            )
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        text = raw.decode(errors="replace")
        content_type = response.getheader("Content-Type", "")
        parsed = json.loads(raw) if raw and "json" in content_type else text
        return Response(response.status, dict(response.getheaders()), parsed, text)

    def submit(
        self,
        request_type: str,
        keys: dict[str, str] | None = None,
        payload: dict[str, Any] | None = None,
        *,
        client: str = DEV,
        idempotency_key: str | None = None,
    ) -> str:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        body: dict[str, Any] = {"requestType": request_type, "keys": keys or {}}
        if payload is not None:
            body["payload"] = payload
        response = self.call(client, "POST", "/requests", body, headers=headers)
        assert response.status in (200, 202), response
        return str(response.body["correlationId"])

    def request(self, request_id: str, client: str = DEV) -> dict[str, Any]:
        response = self.call(client, "GET", f"/requests/{request_id}")
        assert response.status == 200, response
        return dict(response.body)

    def event(
        self, name: str, correlation_id: str, payload: Any = None, *, client: str = DEV
    ) -> Response:
        body: dict[str, Any] = {"correlationId": correlation_id}
        if payload is not None:
            body["payload"] = payload
        return self.call(client, "POST", f"/events/{name}", body)

    def wait_request(
        self,
        request_id: str,
        check: Callable[[dict[str, Any]], bool],
        *,
        timeout: float = 30.0,
        what: str = "",
    ) -> dict[str, Any]:
        """Poll ``GET /requests/{id}`` until ``check`` holds; fail with the logs after
        ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.request(request_id)
            if check(view):
                return view
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"request {request_id} never became {what or check}: {view}\n{self.tails()}"
                )
            time.sleep(0.1)

    def wait_status(self, request_id: str, status: str, *, timeout: float = 30.0) -> dict[str, Any]:
        return self.wait_request(
            request_id, lambda v: v["status"] == status, timeout=timeout, what=status
        )

    def wait_suspended(self, request_id: str, *, timeout: float = 30.0) -> dict[str, Any]:
        return self.wait_request(
            request_id,
            lambda v: v["status"] == "Processing" and v["workflow"]["subStatus"] == "Suspended",
            timeout=timeout,
            what="Processing/Suspended",
        )

    def wait_for(
        self, check: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.1
    ) -> Any:
        """Poll ``check`` until it answers something truthy; fail with the logs after
        ``timeout``."""
        return wait_until(check, timeout=timeout, interval=interval, what=what, detail=self.tails)

    # Processes ------------------------------------------------------------------------------------

    @property
    def worker(self) -> Process:
        return self.roles["worker"]

    def beat(self, index: int = 1) -> Process:
        return self.roles[f"beat{index}"]

    def restart_worker(self) -> None:
        self.worker.stop()
        self.start_worker()

    def start_worker(self) -> None:
        argv = roles.worker(f"live-{os.getpid()}", concurrency=2)
        self._start_and_wait("worker", argv, " ready.")

    def restart_beats(self) -> None:
        for index in range(1, self.beats + 1):
            self.beat(index).stop()
        for index in range(1, self.beats + 1):
            self.start_beat(index)

    def start_beat(self, index: int) -> None:
        # Each beat keeps its own schedule file: two beats sharing one would corrupt it, and the
        # point of running two is that nothing but the jobs' own locks keeps them apart. DEBUG:
        # a tick's "Sending due task" line is DEBUG (idle logs stay quiet), and the two-beats
        # test counts the ticks each beat sent from them.
        schedule = self.root / "var" / f"celerybeat-schedule-{index}"
        argv = roles.beat(schedule, loglevel="DEBUG")
        self._start_and_wait(f"beat{index}", argv, "beat: Starting")

    def _start_and_wait(self, name: str, argv: list[str], marker: str) -> None:
        log = self.roles.logs / f"{name}.log"
        offset = len(log.read_text(errors="replace")) if log.exists() else 0
        self.roles.start(name, argv).wait_for_log(marker, since=offset)

    def tails(self) -> str:
        return self.roles.tails()

    def stop(self) -> None:
        """The end of a test: nothing left to drain, so a short grace and then the groups go."""
        self.roles.close(TEARDOWN_GRACE, group=True)


# Building a stack ---------------------------------------------------------------------------------


def long_running_workflows(sink: Sink) -> list[dict[str, Any]]:
    """The workflows of the long-running tests (request types in ``TEST_TYPES``)."""
    fault_fast = {"maxAttempts": 2, "initialDelay": 0.1, "maxDelay": 0.2}
    return [
        approval(),
        workflow(
            "late-wait",
            [
                activity("delay", "Elsa.Delay", timeSpan=literal("00:00:01")),
                activity("wait", "Elsa.Event", eventName=literal("go")),
                set_output("out", "result", "went"),
            ],
            request_type="LateWait",
        ),
        delayed("00:00:02"),
        workflow(
            "two-step",
            [
                activity("first", "Elsa.Event", eventName=literal("first")),
                activity("second", "Elsa.Event", eventName=literal("second")),
                set_output("out", "result", "both"),
            ],
            request_type="TwoStep",
        ),
        parent("waiting-child"),
        workflow(
            "waiting-child",
            [
                activity("wait", "Elsa.Event", eventName=literal("child-go")),
                post_to("call", sink.url("/child")),
            ],
        ),
        sink_workflow("sink-call", "SinkCall", sink.url("/effect")),
        sink_workflow("broken", "Broken", sink.url("/broken"), retry=fault_fast),
        workflow(
            "load",
            [
                post_to("call", sink.url("/load")),
                activity("delay", "Elsa.Delay", timeSpan=literal("00:00:01")),
                activity("wait", "Elsa.Event", eventName=literal("load-go")),
                set_output("out", "result", "loaded"),
            ],
            request_type="Load",
        ),
    ]


def write_workflows(folder: Path, sink: Sink) -> None:
    """The shipped workflows (the invoice's ledger pointed at the sink) and the test ones."""
    folder.mkdir(parents=True, exist_ok=True)
    for source in sorted((PROJECT_ROOT / "workflows").glob("*.json")):
        document = json.loads(source.read_text())
        for variable in document.get("variables") or []:
            if variable.get("name") == "LedgerUrl":
                variable["value"] = sink.url("/ledger")
        (folder / source.name).write_text(json.dumps(document, indent=2))
    for document in long_running_workflows(sink):
        write_workflow(folder, document)


def write_clients(folder: Path, certs_folder: Path) -> dict[str, str]:
    """``clients.json`` (ClientB, Reader) and ``requestTypes.json``; DevClient goes in the
    database like ``broker run`` registers it."""
    clients = [
        {
            "clientId": OTHER,
            "thumbprint": certs.thumbprint(certs_folder / f"{OTHER}.pem"),
            "description": "a second client, without admin scopes",
            "scopes": [],
        },
        {
            "clientId": READER,
            "thumbprint": certs.thumbprint(certs_folder / f"{READER}.pem"),
            "description": "an operator who may only look",
            "scopes": list(READ_SCOPES),
        },
    ]
    rules: list[dict[str, Any]] = [
        {
            "clientId": DEV,
            "requestType": "InvoiceProcess",
            "requiredKeys": ["InvoiceNumber", "VendorCode"],
            "allowAdditionalKeys": False,
        }
    ]
    for client in (DEV, OTHER):
        rules += [
            {
                "clientId": client,
                "requestType": name,
                "requiredKeys": [],
                "allowAdditionalKeys": True,
            }
            for name in TEST_TYPES
        ]
    # The trigger workflows (tests/fixtures/workflows/triggers): DevClient only.
    rules += [
        {"clientId": DEV, "requestType": name, "requiredKeys": [], "allowAdditionalKeys": True}
        for name in DEV_ONLY_TYPES
    ]
    (folder / "clients.json").write_text(json.dumps({"clients": clients}, indent=2))
    (folder / "requestTypes.json").write_text(json.dumps({"requestTypes": rules}, indent=2))
    return {
        "BROKER_CLIENTS_FILE": str(folder / "clients.json"),
        "BROKER_REQUEST_TYPES_FILE": str(folder / "requestTypes.json"),
    }


def start_stack(
    root: Path,
    *,
    database_url: str | None = None,
    queue_url: str = "filesystem://",
    lock_url: str | None = None,
    beats: int = 1,
    **extra: str,
) -> LiveStack:
    """Start a stack under ``root`` (SQLite, filesystem transport and file locks unless URLs are
    given); ``extra`` BROKER_* keys override the defaults (e.g. shorter TTLs). The caller stops
    it with ``LiveStack.stop`` (``running_stack`` does)."""
    var_dir, certs_folder, config = root / "var", root / "certs", root / "config"
    for folder in (var_dir, config):
        folder.mkdir(parents=True, exist_ok=True)
    certs.init_ca(certs_folder)
    certs.issue_server(certs_folder, "localhost")
    for name in (DEV, OTHER, READER):
        certs.issue_client(certs_folder, name)
    sink = Sink().__enter__()
    try:
        write_workflows(root / "workflows", sink)
        ports = Ports()
        backend = embedded(var_dir)
        broker_env = {
            **backend,
            "BROKER_DATABASE_URL": database_url or backend["BROKER_DATABASE_URL"],
            "BROKER_QUEUE_URL": queue_url,
            "BROKER_LOCK_URL": lock_url or backend["BROKER_LOCK_URL"],
            "BROKER_WORKFLOW_PATHS": str(root / "workflows"),
            "BROKER_WATCH_WORKFLOWS": "false",
            **ports.binds(),
            "BROKER_TLS_CERT": str(certs_folder / "server.pem"),
            "BROKER_TLS_KEY": str(certs_folder / "server.key"),
            "BROKER_TLS_CLIENT_CA": str(certs_folder / "ca.pem"),
            "BROKER_CALLBACK_SECRET": CALLBACK_SECRET,
            "BROKER_HTTP_ALLOWLIST": f"127.0.0.1:{sink.port}",
            "BROKER_FILE_STORAGE_URL": f"file://{var_dir / 'files'}",
            **write_clients(config, certs_folder),
            **FAST,
            **extra,
        }
        db.upgrade(broker_env["BROKER_DATABASE_URL"])
        db.dispose_engines()
        from broker.settings import Settings

        settings = Settings.from_env(broker_env)
        certs.register_dev_client(
            cli_wiring.client_registry(settings),
            certs_folder / f"{DEV}.pem",
            DEV,
            scopes=ADMIN_SCOPES,
        )
        processes = Stack(root, broker_env, ports=ports)
        factory = db.make_session_factory(db.make_engine(settings.database_url))
        stack = LiveStack(root, processes.env, processes, factory, sink, beats=beats)
    except BaseException:
        sink.__exit__(None, None, None)
        raise
    try:
        for name in ("public", "internal"):
            stack.roles.start(name, roles.listener(name, workers=1, threads=8))
        # The worker publishes the workflows first (the listeners then find them in the store).
        stack.start_worker()
        for index in range(1, beats + 1):
            stack.start_beat(index)
        stack.roles.wait_listening()
    except BaseException:
        stack.stop()
        sink.__exit__(None, None, None)
        raise
    return stack


@contextlib.contextmanager
def running_stack(root: Path, **options: Any) -> Iterator[LiveStack]:
    """``start_stack`` as a context: every process stopped by its id and the sink closed."""
    stack = start_stack(root, **options)
    try:
        yield stack
    finally:
        stack.stop()
        stack.sink.__exit__(None, None, None)
        db.dispose_engines()
