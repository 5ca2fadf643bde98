"""Test harness for the runtime: workflow files, a local HTTP sink, real worker processes.

Used by the integration tests here and by the chaos tests. Everything binds 127.0.0.1 on free
ports, every process started is stopped by its own id, and waits poll with a bound.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime import ids
from broker.runtime.submission import Submission, submit
from broker.settings import Settings
from broker.store.db import make_engine, make_session_factory, transaction, upgrade
from broker.store.models import OutboxRow, OutboxState, Request, RequestEvent
from tests.conftest import PROJECT_ROOT, free_port

# Workflow documents ------------------------------------------------------------------------------


def literal(value: Any) -> dict[str, Any]:
    return {"typeName": "Object", "expression": {"type": "Literal", "value": value}}


def obj(value: Any) -> dict[str, Any]:
    return {"typeName": "Object", "expression": {"type": "Object", "value": json.dumps(value)}}


def activity(activity_id: str, kind: str, **inputs: Any) -> dict[str, Any]:
    return {"id": activity_id, "type": kind, "version": 1, **inputs}


def workflow(
    definition_id: str,
    activities: list[dict[str, Any]],
    *,
    request_type: str | None = None,
    **custom: Any,
) -> dict[str, Any]:
    properties = dict(custom)
    if request_type:
        properties["requestType"] = request_type
    return {
        "id": f"{definition_id}-v1",
        "definitionId": definition_id,
        "name": definition_id,
        "version": 1,
        "isPublished": True,
        "isLatest": True,
        "customProperties": properties,
        "root": {"id": "root", "type": "Elsa.Sequence", "version": 1, "activities": activities},
    }


def post_to(activity_id: str, url: str, content: Any = None) -> dict[str, Any]:
    return activity(
        activity_id,
        "Elsa.SendHttpRequest",
        url=literal(url),
        method=literal("POST"),
        content=obj(content or {"from": activity_id}),
    )


def set_output(activity_id: str, name: str, value: Any) -> dict[str, Any]:
    return activity(activity_id, "Elsa.SetOutput", outputName=literal(name), outputValue=obj(value))


def write_workflow(folder: Path, document: Mapping[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{document['definitionId']}.json"
    path.write_text(json.dumps(document, indent=2))
    return path


# The HTTP sink -----------------------------------------------------------------------------------


class Sink:
    """A local HTTP server that records calls and applies each Idempotency-Key's effect once.

    ``fail[path] = n`` answers 503 to the first ``n`` calls of each key on that path; ``n < 0``
    answers 503 forever. ``answer[path] = status`` answers that status to every call instead.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str | None]] = []
        self.effects: dict[str, Counter[str]] = defaultdict(Counter)  # path -> key -> applied
        self.attempts: Counter[tuple[str, str | None]] = Counter()
        self.fail: dict[str, int] = {}
        self.answer: dict[str, int] = {}
        self.bodies: dict[str, list[Any]] = defaultdict(list)
        self.delay: dict[str, float] = {}  # seconds each call on the path takes
        self.first_delay: dict[str, float] = {}  # seconds the first call of each key takes
        self.started: set[tuple[str, str | None]] = set()
        self.arrived: list[str] = []  # paths, as calls arrive (before any delay)
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                key = self.headers.get("Idempotency-Key")
                with contextlib.suppress(ValueError):
                    sink.bodies[self.path].append(json.loads(raw or b"null"))
                sink.arrived.append(self.path)
                pause = sink.delay.get(self.path)
                with sink.lock:
                    if (self.path, key) not in sink.started:
                        sink.started.add((self.path, key))
                        pause = sink.first_delay.get(self.path, pause)
                if pause:
                    time.sleep(pause)  # a slow downstream, so work is in flight when killed
                status = sink.record(self.path, key)
                body = json.dumps({"ok": status == 200}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def record(self, path: str, key: str | None) -> int:
        with self.lock:
            self.calls.append((path, key))
            self.attempts[(path, key)] += 1
            if path in self.answer:
                return self.answer[path]
            limit = self.fail.get(path, 0)
            if limit < 0 or self.attempts[(path, key)] <= limit:
                return 503
            if key is not None and self.effects[path][key]:
                return 200  # a repeated key: answered, not applied again
            self.effects[path][key or ""] += 1
            return 200

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def keys(self, path: str) -> set[str]:
        with self.lock:
            return set(self.effects[path])

    def __enter__(self) -> Sink:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# Settings, database, submissions -----------------------------------------------------------------


def sink_workflow(definition_id: str, request_type: str, url: str, **custom: Any) -> dict[str, Any]:
    """A request type whose workflow POSTs once to ``url`` and then sets an output."""
    return workflow(
        definition_id,
        [post_to("call", url), set_output("out", "result", {"ok": True})],
        request_type=request_type,
        **custom,
    )


def runtime_env(
    var_dir: Path,
    *,
    database_url: str,
    queue_url: str = "filesystem://",
    lock_url: str | None = None,
    workflows: Path,
    **extra: str,
) -> dict[str, str]:
    """The BROKER_* environment of a test: fast relay, short leases, quick retries."""
    env = {
        "BROKER_VAR_DIR": str(var_dir),
        "BROKER_DATABASE_URL": database_url,
        "BROKER_QUEUE_URL": queue_url,
        "BROKER_LOCK_URL": lock_url or f"file://{var_dir / 'locks'}",
        "BROKER_WORKFLOW_PATHS": str(workflows),
        "BROKER_WATCH_WORKFLOWS": "false",
        "BROKER_HTTP_ALLOWLIST": "127.0.0.1:*",
        "BROKER_SMTP_URL": f"file://{var_dir / 'mail'}",
        "BROKER_CALLBACK_SECRET": "test-secret",
        "BROKER_LOG_FORMAT": "text",
        "BROKER_LOCK_TTL": "5",
        "BROKER_OUTBOX_LEASE": "4",
        "BROKER_OUTBOX_RELAY_INTERVAL": "0.5",
        "BROKER_BOOKMARK_QUEUE_INTERVAL": "0.5",
        "BROKER_TIMER_INTERVAL": "0.5",
        "BROKER_RECOVERY_INTERVAL": "2",
        "BROKER_INACTIVITY_THRESHOLD": "10",
        "BROKER_HEARTBEAT_INTERVAL": "1",
        "BROKER_RETRY_INITIAL_DELAY": "0.2",
        "BROKER_RETRY_MAX_DELAY": "1",
        "BROKER_HTTP_TIMEOUT": "5",
    }
    env.update(extra)
    return env


def prepare(settings: Settings) -> tuple[sessionmaker[Session], Any]:
    """Migrate the database and publish the workflows; answers (session factory, registry)."""
    from broker.registry import WorkflowRegistry

    upgrade(settings.database_url)
    factory = make_session_factory(make_engine(settings.database_url))
    registry = WorkflowRegistry(settings, factory)
    registry.load()
    assert not registry.problems, registry.problems
    return factory, registry


def submit_request(
    factory: sessionmaker[Session],
    registry: Any,
    request_type: str,
    *,
    payload: dict[str, Any] | None = None,
    client_id: str = "TestClient",
    publisher: Any = None,
) -> str:
    published = registry.for_request_type(request_type)
    assert published is not None, request_type
    with transaction(factory) as session:
        submitted = submit(
            session,
            client_id=client_id,
            submission=Submission(request_type=request_type, keys={}, payload=payload),
            workflow=published,
        )
    if publisher is not None:
        publisher.publish(submitted.outbox_ids)
    return submitted.request_id


def request_status(factory: sessionmaker[Session], request_id: str) -> str:
    with transaction(factory, write=False) as session:
        return str(session.scalar(select(Request.status).where(Request.id == request_id)))


def event_types(factory: sessionmaker[Session], request_id: str) -> list[str]:
    with transaction(factory, write=False) as session:
        return list(
            session.scalars(
                select(RequestEvent.event_type)
                .where(RequestEvent.request_id == request_id)
                .order_by(RequestEvent.id)
            )
        )


def instance_key(request_id: str, activity_instance_id: str) -> str:
    return f"{ids.instance_id_for_request(request_id)}:{activity_instance_id}"


def wait_until(
    check: Callable[[], Any], *, timeout: float, interval: float = 0.1, what: str = ""
) -> Any:
    """Poll ``check`` until it answers something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(interval)


class NoSender:
    """A transport that sends nothing: the rows are run in process by ``drain``."""

    def send(self, row: OutboxRow) -> None:
        """Nothing to do: ``drain`` runs every unfinished row."""


def in_process_runtime(settings: Settings, locks: Path) -> Any:
    """A ``Runtime`` over ``settings`` (migrated and loaded) with no transport: tests call the
    runner, or ``drain``, directly."""
    from broker.runtime.locks import FileLockProvider
    from broker.runtime.process import Runtime

    factory, registry = prepare(settings)
    return Runtime(
        settings,
        factory=factory,
        registry=registry,
        sender=NoSender(),
        locks=FileLockProvider(locks),
    )


def drain(rt: Any, *, limit: int = 50) -> list[str]:
    """Run the unfinished outbox rows of runtime ``rt`` in process, one at a time, as the relay
    and a worker would, without waiting for their due times (a retry's delay passes at once);
    answers the task names run, in order. Nothing else may be running: a row the runner
    published on its fast path (dispatched, not finished) is run here too."""
    from broker.runtime import outbox, runner
    from broker.runtime.celery_config import RESUME_INSTANCE, RUN_CHILD, RUN_REQUEST

    ran: list[str] = []
    for _ in range(limit):
        with transaction(rt.factory) as session:
            row = session.scalars(
                select(OutboxRow)
                .where(
                    OutboxRow.state.in_([OutboxState.PENDING.value, OutboxState.DISPATCHED.value])
                )
                .order_by(OutboxRow.available_at, OutboxRow.id)
                .limit(1)
            ).first()
            if row is None:
                return ran
            outbox.mark_dispatched(session, row.id, lease=60, only_pending=False)
            name, args, row_id = row.task_name, dict(row.args or {}), row.id
        if name == RUN_REQUEST:
            runner.run_request(rt, args["request_id"], row_id)
        elif name == RESUME_INSTANCE:
            runner.resume_instance(
                rt,
                args["instance_id"],
                row_id,
                bookmark_id=args.get("bookmark_id"),
                queue_item_id=args.get("queue_item_id"),
                retry=args.get("retry"),
            )
        elif name == RUN_CHILD:
            runner.run_child(rt, args["instance_id"], row_id)
        else:
            raise AssertionError(f"drain cannot run {name}")
        ran.append(name)
    raise AssertionError(f"the outbox still had pending rows after {limit} runs")


# Worker processes --------------------------------------------------------------------------------


def process_env(broker_env: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}  # noqa: TID251
    env.update(broker_env)
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    return env


class Worker:
    """``celery -A tasks worker`` (with embedded beat) as a subprocess in its own session, so it
    and its pool children are stopped together by the worker's process-group id."""

    def __init__(
        self,
        env: Mapping[str, str],
        log: Path,
        *,
        beat: bool = True,
        concurrency: int = 2,
        name: str = "w1",
    ) -> None:
        self.env = process_env(env)
        self.log = log
        self.beat = beat
        self.concurrency = concurrency
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tasks",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            str(self.concurrency),
            "--hostname",
            f"{self.name}@127.0.0.1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        if self.beat:
            argv.append("--beat")
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            argv,
            cwd=PROJECT_ROOT,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)

    def terminate(self) -> None:
        """SIGTERM to the main process only: Celery's warm shutdown, which drains its pool."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the worker and its pool children at once (a crash, not a shutdown)."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        # Pool children left behind by a killed parent share its process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@contextlib.contextmanager
def running_worker(env: Mapping[str, str], log: Path, **options: Any) -> Iterator[Worker]:
    worker = Worker(env, log, **options).start()
    try:
        yield worker
    finally:
        worker.stop()


_row_counter = iter(range(10**9))


def outbox_rows_enqueue(factory: sessionmaker[Session], count: int) -> list[str]:
    """Commit ``count`` pending outbox rows (ids only; nothing consumes them)."""
    from broker.runtime import outbox

    written = []
    with transaction(factory) as session:
        for _ in range(count):
            row_id = f"chaos-{next(_row_counter):08d}"
            outbox.enqueue(
                session, outbox_id=row_id, task_name="broker.noop", queue="broker.default", args={}
            )
            written.append(row_id)
    return written
