"""The runtime in a test: its environment, a migrated and published database, submissions,
reads of a request's state, and an in-process runtime whose outbox a test drains itself."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.runtime import ids
from broker.runtime.requests.submission import Submission, submit
from broker.settings import Settings
from broker.store.db import make_engine, make_session_factory, transaction, upgrade
from broker.store.models import OutboxRow, OutboxState, Request, RequestEvent
from tests.support.doubles import NoSender


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
        "BROKER_FILE_STORAGE_URL": f"file://{var_dir / 'files'}",
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


def bookmark_queue_settings(database_url: str, folder: Path) -> Settings:
    """Settings for the bookmark-queue tests: a one-minute queue TTL, three delivery attempts, a
    one-second interval and an hour of dead letters."""
    return Settings.from_env(
        runtime_env(
            folder,
            database_url=database_url,
            workflows=folder / "wf",
            BROKER_BOOKMARK_QUEUE_TTL="60",
            BROKER_BOOKMARK_QUEUE_MAX_DELIVERY_ATTEMPTS="3",
            BROKER_BOOKMARK_QUEUE_INTERVAL="1",
            BROKER_DEAD_LETTER_TTL="3600",
        )
    )


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


def wait_for_status(
    factory: sessionmaker[Session],
    request_id: str,
    status: str,
    *,
    tail: Callable[[], str],
    timeout: float = 60.0,
) -> None:
    """Wait until the request is ``status``; on a timeout print ``tail()`` (the worker's log)
    before failing, so the failure shows what the worker did."""
    from tests.support.waits import wait_until

    try:
        wait_until(
            lambda: request_status(factory, request_id) == status,
            timeout=timeout,
            what=f"request {request_id} to be {status}",
        )
    except AssertionError:
        print(tail())
        raise


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


def in_process_runtime(settings: Settings, locks: Path) -> Any:
    """A ``Runtime`` over ``settings`` (migrated and loaded) with no transport: tests call the
    runner, or ``drain``, directly."""
    from broker.adapters.locks import FileLockProvider
    from broker.wiring.runtime import Runtime

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
    from broker.names import RESUME_INSTANCE, RUN_CHILD, RUN_REQUEST
    from broker.runtime.outbox import rows as outbox
    from broker.runtime.steps import runner

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


_row_counter = iter(range(10**9))


def outbox_rows_enqueue(factory: sessionmaker[Session], count: int) -> list[str]:
    """Commit ``count`` pending outbox rows (ids only; nothing consumes them)."""
    from broker.runtime.outbox import rows as outbox

    written = []
    with transaction(factory) as session:
        for _ in range(count):
            row_id = f"chaos-{next(_row_counter):08d}"
            outbox.enqueue(
                session, outbox_id=row_id, task_name="broker.noop", queue="broker.default", args={}
            )
            written.append(row_id)
    return written
