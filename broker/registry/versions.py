"""Published versions of workflow definitions, each identified by its content hash, and how they
are stored in the database."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from broker.engine.model.strategies import ACTIVATION_STRATEGIES, strategy_name
from broker.errors import StoreUnavailable, WorkflowDefinitionError
from broker.names import DEFAULT_QUEUE
from broker.registry.files import WorkflowFile
from broker.store import models
from broker.store.db import transaction

logger = logging.getLogger(__name__)

SessionFactory = sessionmaker[Session]

PUBLISH_ATTEMPTS = 5  # a race loser retries; more losses in a row mean something else is wrong
_ID_LENGTH = 64  # models.Id


@dataclasses.dataclass(frozen=True)
class PublishedWorkflow:
    """One published version of a workflow definition."""

    version_id: str
    definition_id: str
    version: int
    name: str | None
    request_type: str | None  # as spelled in the file
    queue: str
    executor: str  # "local", or "elsa" for remote execution
    source_path: str | None
    content_hash: str
    document: dict[str, Any] = dataclasses.field(hash=False, repr=False)
    published: bool = True  # False for a file saved with "isPublished": false (a draft)

    @property
    def request_type_key(self) -> str | None:
        return self.request_type.lower() if self.request_type else None

    @property
    def activation_strategy(self) -> str:
        """Elsa's ``options.activationStrategyType`` as ``always``, ``singleton``,
        ``correlation`` or ``correlated-singleton``."""
        options = self.document.get("options")
        value = options.get("activationStrategyType") if isinstance(options, dict) else None
        try:
            return strategy_name(value, ACTIVATION_STRATEGIES) or "always"
        except ValueError:
            return "always"  # refused at load: a stored version always has a valid one


def derived_version_id(definition_id: str, content_hash: str) -> str:
    """The deterministic id of a version whose file id is taken: the same in every process."""
    return hashlib.sha256(f"{definition_id}:{content_hash}".encode()).hexdigest()[:32]


def trigger_row_id(version_id: str, activity_id: str, index: int) -> str:
    return hashlib.sha256(f"{version_id}:{activity_id}:{index}".encode()).hexdigest()[:32]


def next_version(highest: int | None, file_version: int | None) -> int:
    """One above the highest stored version, or the file's own version when that is higher."""
    return max((highest or 0) + 1, file_version or 1)


def from_file(wf: WorkflowFile, *, version_id: str, version: int) -> PublishedWorkflow:
    return PublishedWorkflow(
        version_id=version_id,
        definition_id=wf.definition_id,
        version=version,
        name=wf.name,
        request_type=wf.request_type,
        queue=wf.queue,
        executor=wf.executor,
        source_path=wf.source_path,
        content_hash=wf.content_hash,
        document=wf.document,
        published=wf.published,
    )


def from_row(row: models.WorkflowDefinition) -> PublishedWorkflow:
    props = row.document.get("customProperties") or {}
    executor = props.get("executor") if isinstance(props, dict) else None
    return PublishedWorkflow(
        version_id=row.id,
        definition_id=row.definition_id,
        version=row.version,
        name=row.name,
        request_type=row.request_type,
        queue=row.queue or DEFAULT_QUEUE,
        executor=str(executor or "local").lower(),
        source_path=row.source_path,
        content_hash=row.content_hash,
        document=row.document,
        published=row.is_published,
    )


# Database ----------------------------------------------------------------------------------------


def publish(factory: SessionFactory, wf: WorkflowFile) -> PublishedWorkflow:
    """Publish a file's content as a version (or find the stored one); safe to race."""
    last: Exception | None = None
    for attempt in range(1, PUBLISH_ATTEMPTS + 1):
        try:
            with transaction(factory, write=True) as session:
                return publish_txn(session, wf)
        except IntegrityError as exc:
            # Another process published this definition between our read and our insert.
            logger.info(
                "publishing %s (definition %s) raced another process, attempt %d",
                wf.source_path,
                wf.definition_id,
                attempt,
            )
            last = exc
        except OperationalError as exc:
            raise StoreUnavailable(f"could not publish {wf.source_path}: {exc.orig}") from exc
    raise StoreUnavailable(
        f"could not publish {wf.source_path} after {PUBLISH_ATTEMPTS} attempts"
    ) from last


def publish_txn(session: Session, wf: WorkflowFile) -> PublishedWorkflow:
    """Publish inside the caller's transaction; never commits.

    Raises ``IntegrityError`` when another process published the same definition meanwhile.
    """
    table = models.WorkflowDefinition
    existing = session.scalars(
        select(table).where(
            table.definition_id == wf.definition_id, table.content_hash == wf.content_hash
        )
    ).one_or_none()
    if existing is not None:
        if not existing.is_latest:
            # The file went back to content published before: that version is the latest again.
            _clear_latest(session, wf.definition_id)
            existing.is_latest = True
            logger.info(
                "definition %s: version %d (%s) is the latest again",
                wf.definition_id,
                existing.version,
                existing.id,
            )
        return dataclasses.replace(from_row(existing), source_path=wf.source_path)
    highest = session.scalar(
        select(func.max(table.version)).where(table.definition_id == wf.definition_id)
    )
    version = next_version(highest, wf.file_version)
    version_id = wf.file_version_id
    if (
        version_id is None
        or len(version_id) > _ID_LENGTH
        or session.get(table, version_id) is not None
    ):
        version_id = derived_version_id(wf.definition_id, wf.content_hash)
    _clear_latest(session, wf.definition_id)
    session.add(
        table(
            id=version_id,
            definition_id=wf.definition_id,
            version=version,
            name=wf.name,
            request_type=wf.request_type,
            request_type_key=wf.request_type.lower() if wf.request_type else None,
            queue=wf.queue,
            source_path=wf.source_path,
            content_hash=wf.content_hash,
            document=wf.document,
            is_latest=True,
            is_published=wf.published,
        )
    )
    session.flush()  # the version row first: a race shows up here, before the triggers
    for index, trigger in enumerate(wf.triggers):
        session.add(
            models.Trigger(
                id=trigger_row_id(version_id, trigger.activity_id, index),
                definition_id=wf.definition_id,
                definition_version_id=version_id,
                activity_id=trigger.activity_id,
                name=trigger.name,
                hash=trigger.hash,
                payload=trigger.payload,
            )
        )
    session.flush()
    logger.info(
        "published %s as definition %s version %d (%s) with %d trigger(s)",
        wf.source_path,
        wf.definition_id,
        version,
        version_id,
        len(wf.triggers),
    )
    return from_file(wf, version_id=version_id, version=version)


def _clear_latest(session: Session, definition_id: str) -> None:
    table = models.WorkflowDefinition
    session.execute(
        update(table)
        .where(table.definition_id == definition_id, table.is_latest.is_(True))
        .values(is_latest=False)
    )


def load_version(factory: SessionFactory, version_id: str) -> PublishedWorkflow | None:
    """A stored version by id, or None; ``WorkflowDefinitionError`` when its stored document
    cannot be read back (one stored before the nesting limit, deeper than JSON's reader goes)."""
    try:
        with factory() as session:
            row = session.get(models.WorkflowDefinition, version_id)
            return from_row(row) if row is not None else None
    except OperationalError as exc:
        raise StoreUnavailable(f"could not read workflow version {version_id}") from exc
    except RecursionError:
        # The column's JSON reader (the driver's json.loads) gave up on the stored document.
        raise WorkflowDefinitionError(
            f"the stored document of version {version_id} nests too deep to be read back"
        ) from None
    except ValueError as exc:
        raise WorkflowDefinitionError(
            f"the stored document of version {version_id} is not valid JSON: {exc}"
        ) from None


def load_newest_published(factory: SessionFactory, definition_id: str) -> PublishedWorkflow | None:
    """The highest stored version of a definition that is published, or None."""
    table = models.WorkflowDefinition
    try:
        with factory() as session:
            row = session.scalars(
                select(table)
                .where(table.definition_id == definition_id, table.is_published.is_(True))
                .order_by(table.version.desc())
                .limit(1)
            ).first()
            return from_row(row) if row is not None else None
    except OperationalError as exc:
        raise StoreUnavailable(f"could not read workflow definition {definition_id}") from exc


def stored_queues(factory: SessionFactory) -> set[str]:
    """The queue of every stored version (instances of a version whose file went bad or was
    removed still have steps to run on it)."""
    table = models.WorkflowDefinition
    try:
        with factory() as session:
            found = session.scalars(select(table.queue).where(table.queue.is_not(None)).distinct())
            return {str(queue) for queue in found}
    except OperationalError as exc:
        raise StoreUnavailable("could not read the workflow versions' queues") from exc
