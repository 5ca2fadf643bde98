"""Requests over the store: submit, look up, list, cancel, and record a remote result.

Every function here takes the caller's session and never commits: the ingress (or a worker) opens
one transaction per HTTP call or task, so a submission's request row, its audit event and its
outbox row land together or not at all. Status changes are guarded in the UPDATE statement itself
(``WHERE status NOT IN terminal``), so a late callback, a duplicate or a cancel racing a worker can
never move a terminal request.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import ColumnElement, Connection, Engine, and_, delete, insert, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from broker.errors import BadRequest, Conflict, Forbidden, NotFound, RuntimePaused
from broker.runtime import webhooks
from broker.runtime.activation import check_activation
from broker.runtime.celery_config import DEFAULT_QUEUE, RUN_REQUEST
from broker.store.models import (
    Bookmark,
    InstanceStatus,
    InstanceSubStatus,
    OutboxRow,
    OutboxState,
    Request,
    RequestEvent,
    RequestStatus,
    RuntimeFlag,
    Timer,
    WorkflowInstance,
    table_of,
    utcnow,
)

logger = logging.getLogger(__name__)

#: the RuntimeFlag row that pauses new submissions
PAUSED_FLAG = "paused"
#: seconds a process trusts the paused flag it last read (``is_paused_cached``): a pause set by
#: another process reaches the ingress and the task adapters within this delay
PAUSED_CACHE_TTL = 1.0

TERMINAL = tuple(s.value for s in RequestStatus if s.terminal)


# A submission's request and outbox rows, built once (see ``table_of``); its audit event stays
# an ORM object, which the audit log follows.
_INSERT_REQUEST = insert(table_of(Request))
_INSERT_OUTBOX = insert(table_of(OutboxRow))


class PinnedWorkflow(Protocol):
    """The workflow version a request is pinned to (the registry's PublishedWorkflow)."""

    @property
    def definition_id(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def version_id(self) -> str: ...
    @property
    def queue(self) -> str | None: ...


@dataclasses.dataclass(frozen=True)
class OutboxMessage:
    """What a fast path needs to send an outbox row it has just committed, without reading it
    back: the row's id (the task id), task, queue and arguments."""

    outbox_id: str
    task_name: str
    queue: str
    args: Mapping[str, Any]
    request_id: str | None = None


class Publisher(Protocol):
    """Publishes committed outbox rows at once (the fast path; the relay covers failures)."""

    @property
    def dispatch_lease(self) -> float | None:
        """Seconds a new submission's row may be inserted as already dispatched, because
        ``publish_new`` sends it right after the commit (the relay republishes it when this lease
        runs out without a result); None: insert it pending and leave it to ``publish``/the relay.
        """
        ...

    def publish(self, outbox_ids: Sequence[str]) -> None: ...

    def publish_new(self, messages: Sequence[OutboxMessage]) -> None:
        """Send rows committed just now by this caller (no read back, no write)."""
        ...


class NullPublisher:
    """Publishes nothing: rows stay pending until the outbox relay claims them."""

    dispatch_lease: float | None = None

    def publish(self, outbox_ids: Sequence[str]) -> None:
        logger.debug("no publisher; %d outbox rows left to the relay", len(outbox_ids))

    def publish_new(self, messages: Sequence[OutboxMessage]) -> None:
        logger.debug("no publisher; %d outbox rows left to the relay", len(messages))


@dataclasses.dataclass(frozen=True)
class Submission:
    """A validated ``POST /requests`` body and its idempotency key."""

    request_type: str
    keys: Mapping[str, str]
    payload: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    #: a one-off webhook endpoint for this request's terminal events
    callback_url: str | None = None

    def body_hash(self) -> str:
        """SHA-256 of the canonical JSON of the body (what an idempotent retry must repeat)."""
        body: dict[str, Any] = {
            "requestType": self.request_type,
            "keys": dict(self.keys),
            "payload": self.payload,
        }
        if self.callback_url is not None:
            body["callbackUrl"] = self.callback_url
        canonical = json.dumps(
            body,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Submitted:
    """The outcome of a submission: a new record, or the earlier one an idempotency key names."""

    request_id: str
    created: bool
    view: dict[str, Any]
    outbox_ids: tuple[str, ...] = ()
    #: the same rows, for a fast path that sends them without reading them back
    messages: tuple[OutboxMessage, ...] = ()


# Submission ---------------------------------------------------------------------------------------


def submit(
    session: Session,
    *,
    client_id: str,
    submission: Submission,
    workflow: PinnedWorkflow,
    dispatch_lease: float | None = None,
    callback_secret: str | None = None,
    source: str = "ingress",
) -> Submitted:
    """Record a new request (Queued), its RequestSubmitted event and its outbox row (and the
    one-off webhook endpoint of its ``callbackUrl``, signed with ``callback_secret``).

    With an idempotency key already used by this client, answers the earlier record when the body
    is the same and raises ``Conflict`` when it differs. Raises ``RuntimePaused`` while paused.

    ``dispatch_lease`` (seconds): the caller publishes the row right after the commit
    (``Publisher.publish_new``), so it is inserted already dispatched with that lease instead of
    pending; this saves the fast path a read and a write transaction. If the publish is lost
    (transport down, process killed after the commit), the relay republishes the row when the
    lease runs out, as for any dispatched row whose consumer did not finish it.

    ``source`` names the entry point in the audit event (``console`` for a console user's start).
    """
    client_key = client_id.lower()
    body_hash = submission.body_hash()
    if submission.idempotency_key is not None:
        earlier = find_by_idempotency_key(session, client_id, submission.idempotency_key)
        if earlier is not None:
            if earlier.body_hash != body_hash:
                raise Conflict(
                    "Idempotency-Key was already used with a different body",
                    idempotencyKey=submission.idempotency_key,
                    correlationId=earlier.id,
                )
            logger.info(
                "idempotent replay of request %s",
                earlier.id,
                extra={"request_id": earlier.id, "client_id": client_id},
            )
            return Submitted(earlier.id, created=False, view=request_view(session, earlier))
    if is_paused_cached(session):
        raise RuntimePaused("The workflow runtime is paused; try again later")
    request_id = str(uuid.uuid4())
    check_activation(
        session,
        definition_id=workflow.definition_id,
        # The registry's PublishedWorkflow reads it from options.activationStrategyType.
        strategy=getattr(workflow, "activation_strategy", "always"),
        correlation_id=request_id,
    )
    now = utcnow()
    outbox_id = str(uuid.uuid4())
    queue = workflow.queue or DEFAULT_QUEUE
    args = {"request_id": request_id}
    values: dict[str, Any] = {
        "id": request_id,
        "client_id": client_id,
        "client_key": client_key,
        "request_type": submission.request_type,
        "request_type_key": submission.request_type.lower(),
        "keys": dict(submission.keys),
        "payload": submission.payload,
        "status": RequestStatus.QUEUED.value,
        "idempotency_key": submission.idempotency_key,
        "body_hash": body_hash,
        "definition_id": workflow.definition_id,
        "definition_version": workflow.version,
        "definition_version_id": workflow.version_id,
        "submitted_at": now,
        "updated_at": now,
    }
    session.execute(_INSERT_REQUEST, values)
    session.add(
        RequestEvent(
            request_id=request_id,
            timestamp=now,
            event_type="RequestSubmitted",
            source=source,
            message=f"Submitted by {client_id}",
            properties={
                "requestType": submission.request_type,
                "definitionId": workflow.definition_id,
                "version": workflow.version,
                "idempotencyKey": submission.idempotency_key,
            },
        )
    )
    row: dict[str, Any] = {
        "id": outbox_id,
        "task_name": RUN_REQUEST,
        "queue": queue,
        "args": args,
        "state": OutboxState.PENDING.value,
        "attempts": 0,
        "request_id": request_id,
        "available_at": now,
        "created_at": now,
        "dispatched_at": None,
        "lease_expires_at": None,
    }
    if dispatch_lease is not None:
        # What mark_dispatched would record after the publish, written with the row itself.
        row["state"] = OutboxState.DISPATCHED.value
        row["attempts"] = 1
        row["dispatched_at"] = now
        row["lease_expires_at"] = now + dt.timedelta(seconds=dispatch_lease)
    session.execute(_INSERT_OUTBOX, row)
    if submission.callback_url is not None:
        if callback_secret is None:
            raise BadRequest("this client may not name a callbackUrl", field="callbackUrl")
        webhooks.add_callback(
            session,
            client_id=client_id,
            request_id=request_id,
            url=submission.callback_url,
            secret=callback_secret,
        )
    session.flush()
    logger.info(
        "accepted request %s of type %s",
        request_id,
        submission.request_type,
        extra={
            "request_id": request_id,
            "client_id": client_id,
            "request_type": submission.request_type,
        },
    )
    message = OutboxMessage(outbox_id, RUN_REQUEST, queue, args, request_id)
    return Submitted(
        request_id,
        created=True,
        view=request_view(session, Request(**values)),
        outbox_ids=(outbox_id,),
        messages=(message,),
    )


# Queries ------------------------------------------------------------------------------------------


def find_by_idempotency_key(session: Session, client_id: str, key: str) -> Request | None:
    return session.scalars(
        select(Request).where(
            Request.client_key == client_id.lower(), Request.idempotency_key == key
        )
    ).one_or_none()


def get_owned(session: Session, request_id: str, client_id: str | None) -> Request:
    """The request, checked to belong to ``client_id`` (None: any owner, for operators)."""
    record = session.get(Request, request_id)
    if record is None:
        raise NotFound(f"Request '{request_id}' not found")
    if client_id is not None and record.client_key != client_id.lower():
        raise Forbidden(f"Request '{request_id}' belongs to another client")
    return record


def request_view(session: Session, record: Request) -> dict[str, Any]:
    """The JSON a client sees for one request (``GET /requests/{id}``)."""
    instance = None
    if record.instance_id:
        instance = session.get(WorkflowInstance, record.instance_id)
    return {
        "correlationId": record.id,
        "clientId": record.client_id,
        "requestType": record.request_type,
        "keys": record.keys,
        "status": record.status,
        "result": record.result,
        "errorDetail": record.error_detail,
        "submittedAt": iso(record.submitted_at),
        "updatedAt": iso(record.updated_at),
        "workflow": {
            "definitionId": record.definition_id,
            "version": record.definition_version,
            "instanceId": record.instance_id,
            "subStatus": instance.sub_status if instance is not None else None,
            # What Correlate and SetName made of the instance (the request's id never changes).
            "instanceName": instance.name if instance is not None else None,
            "instanceCorrelationId": instance.correlation_id if instance is not None else None,
        },
    }


@dataclasses.dataclass(frozen=True)
class ListQuery:
    """Filters of ``GET /requests``; ``cursor`` is the opaque value of an earlier ``next``."""

    status: str | None = None
    request_type: str | None = None
    since: dt.datetime | None = None
    limit: int = 50
    cursor: str | None = None


def list_requests(
    session: Session, client_id: str | None, query: ListQuery
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the client's requests (None: every client's, for operators), newest first,
    and the cursor of the next page."""
    stmt = select(Request)
    if client_id is not None:
        stmt = stmt.where(Request.client_key == client_id.lower())
    if query.status is not None:
        stmt = stmt.where(Request.status == query.status)
    if query.request_type is not None:
        stmt = stmt.where(Request.request_type_key == query.request_type.lower())
    if query.since is not None:
        stmt = stmt.where(Request.submitted_at >= query.since)
    if query.cursor is not None:
        at, last_id = decode_cursor(query.cursor)
        stmt = stmt.where(
            or_(Request.submitted_at < at, and_(Request.submitted_at == at, Request.id < last_id))
        )
    stmt = stmt.order_by(Request.submitted_at.desc(), Request.id.desc()).limit(query.limit + 1)
    rows = list(session.scalars(stmt))
    page, more = rows[: query.limit], len(rows) > query.limit
    cursor = encode_cursor(page[-1].submitted_at, page[-1].id) if more and page else None
    return [request_view(session, r) for r in page], cursor


def list_events(session: Session, request_id: str, client_id: str | None) -> list[dict[str, Any]]:
    """The audit history of one request, oldest first."""
    get_owned(session, request_id, client_id)
    events = session.scalars(
        select(RequestEvent).where(RequestEvent.request_id == request_id).order_by(RequestEvent.id)
    )
    return [
        {
            "timestamp": iso(e.timestamp),
            "eventType": e.event_type,
            "source": e.source,
            "message": e.message,
            "properties": e.properties or {},
        }
        for e in events
    ]


def encode_cursor(at: dt.datetime, request_id: str) -> str:
    raw = json.dumps([at.isoformat(), request_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[dt.datetime, str]:
    """The (submitted_at, id) position a cursor names; ``BadRequest`` when it is not ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at_text, request_id = json.loads(raw)
        at = dt.datetime.fromisoformat(at_text)
        if at.tzinfo is None or not isinstance(request_id, str):
            raise ValueError("not a cursor")
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadRequest("Invalid cursor", field="cursor") from exc
    return at, request_id


# Status changes -----------------------------------------------------------------------------------


def cancel(session: Session, request_id: str, *, client_id: str | None, source: str) -> Request:
    """Mark a request Cancelled with its workflow instances; ``Conflict`` when already terminal."""
    record = get_owned(session, request_id, client_id)
    now = utcnow()
    changed = session.execute(
        update(Request)
        .where(Request.id == request_id, Request.status.not_in(TERMINAL))
        .values(status=RequestStatus.CANCELLED.value, updated_at=now, completed_at=now)
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    if not changed:
        session.refresh(record)
        raise Conflict(f"Request '{request_id}' is already {record.status}", status=record.status)
    session.add(
        RequestEvent(
            request_id=request_id,
            timestamp=now,
            event_type="RequestCancelled",
            source=source,
            message=f"Cancelled through the {source}",
        )
    )
    roots = session.scalars(
        select(WorkflowInstance.id).where(WorkflowInstance.request_id == request_id)
    ).all()
    cancel_instances(session, roots)
    # A start that was not taken yet (the row names the request, not an instance) is closed too.
    _close_open_work(session, OutboxRow.request_id == request_id, now)
    webhooks.record_status_change(session, request_id, RequestStatus.CANCELLED.value, now=now)
    session.refresh(record)
    logger.info("cancelled request %s", request_id, extra={"request_id": request_id})
    return record


def cancel_instances(session: Session, instance_ids: Iterable[str]) -> list[str]:
    """Mark running instances and all their descendants Cancelled; answers the ids changed.

    Their bookmarks and unfired timers go too, so no stimulus can resume a cancelled instance, and
    their open outbox rows are closed, so a worker that receives one finds it finished and neither
    starts a child nor resumes or retries the instance. A step already running when the cancel
    commits cannot save: its save is fenced on ``status = Running``.
    """
    now = utcnow()
    seen: set[str] = set()
    frontier = [i for i in instance_ids if i]
    while frontier:
        seen.update(frontier)
        children = session.scalars(
            select(WorkflowInstance.id).where(WorkflowInstance.parent_id.in_(frontier))
        ).all()
        frontier = [c for c in children if c not in seen]
    if not seen:
        return []
    ids = sorted(seen)
    changed = session.scalars(
        update(WorkflowInstance)
        .where(
            WorkflowInstance.id.in_(ids), WorkflowInstance.status != InstanceStatus.FINISHED.value
        )
        .values(
            status=InstanceStatus.FINISHED.value,
            sub_status=InstanceSubStatus.CANCELLED.value,
            updated_at=now,
            finished_at=now,
        )
        .returning(WorkflowInstance.id)
        .execution_options(synchronize_session=False)
    ).all()
    if changed:
        session.execute(
            delete(Timer).where(Timer.instance_id.in_(changed), Timer.fired_at.is_(None))
        )
        session.execute(delete(Bookmark).where(Bookmark.instance_id.in_(changed)))
        _close_open_work(session, OutboxRow.instance_id.in_(changed), now)
    return list(changed)


def _close_open_work(session: Session, which: ColumnElement[bool], now: dt.datetime) -> None:
    session.execute(
        update(OutboxRow)
        .where(
            which, OutboxRow.state.in_([OutboxState.PENDING.value, OutboxState.DISPATCHED.value])
        )
        .values(
            state=OutboxState.DONE.value,
            finished_at=now,
            lease_expires_at=None,
            last_error="cancelled",
        )
        .execution_options(synchronize_session=False)
    )


def is_paused(session: Session) -> bool:
    flag = session.get(RuntimeFlag, PAUSED_FLAG)
    return bool(flag is not None and flag.value)


#: database (engine URL) -> (monotonic time read, paused); see ``is_paused_cached``
_paused_cache: dict[str, tuple[float, bool]] = {}
_paused_cache_lock = threading.Lock()


def is_paused_cached(session: Session, *, ttl: float = PAUSED_CACHE_TTL) -> bool:
    """``is_paused``, read at most once per ``ttl`` seconds per process and database.

    The hot paths (every submission, every task adapter) ask this; a pause or resume made by another
    process is seen within ``ttl``, one made by this process (``set_paused``) at once.
    """
    key = _cache_key(session.get_bind())
    now = time.monotonic()
    known = _fresh(key, now, ttl)
    if known is not None:
        return known
    paused = is_paused(session)
    with _paused_cache_lock:
        _paused_cache[key] = (now, paused)
    return paused


def paused_if_known(
    factory: sessionmaker[Session], *, ttl: float = PAUSED_CACHE_TTL
) -> bool | None:
    """The cached paused flag of ``factory``'s database while it is fresh, else None (then ask
    ``is_paused_cached`` in a transaction): a fresh answer needs no connection at all."""
    bind = factory.kw.get("bind")
    if bind is None:
        return None
    return _fresh(_cache_key(bind), time.monotonic(), ttl)


def _fresh(key: str, now: float, ttl: float) -> bool | None:
    with _paused_cache_lock:
        cached = _paused_cache.get(key)
    if cached is not None and now - cached[0] < ttl:
        return cached[1]
    return None


def forget_paused() -> None:
    """Drop the cached paused flags (after a change, and for tests)."""
    with _paused_cache_lock:
        _paused_cache.clear()


def _cache_key(bind: Engine | Connection) -> str:
    return bind.engine.url.render_as_string(hide_password=True)


def set_paused(session: Session, paused: bool) -> RuntimeFlag:
    """Pause or resume new work (a RuntimeFlag row every process reads)."""
    flag = session.get(RuntimeFlag, PAUSED_FLAG)
    if flag is None:
        flag = RuntimeFlag(name=PAUSED_FLAG, value=paused)
        session.add(flag)
    else:
        flag.value = paused
        flag.updated_at = utcnow()
    session.flush()
    forget_paused()
    return flag


def iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
