"""Group commit: concurrent submissions of one process share one transaction and one WAL flush
(docs/design.md, section 3)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence

from sqlalchemy import exc
from sqlalchemy.orm import Session, sessionmaker

from broker.errors import StoreUnavailable
from broker.runtime.ports import OutboxMessage
from broker.runtime.requests import submission
from broker.runtime.requests.submission import Prepared, Submitted
from broker.store import db

logger = logging.getLogger(__name__)

Prepare = Callable[[Session], Prepared | Submitted]


@dataclasses.dataclass(eq=False)
class _Job:
    """One waiting submission: how to prepare it, and its outcome once its batch is done."""

    prepare: Prepare
    #: (client key, Idempotency-Key): two jobs with the same one never share a batch
    key: tuple[str, str] | None
    wake: threading.Event = dataclasses.field(default_factory=threading.Event)
    finished: bool = False
    outcome: Submitted | None = None
    error: Exception | None = None

    def result(self) -> Submitted:
        if self.error is not None:
            raise self.error
        assert self.outcome is not None
        return self.outcome


class Committer:
    """Commits the submissions of one process in batches (docs/design.md, section 1).

    ``publish`` sends the new rows' messages after the commit (the fast path); a failure there is
    logged only, as the relay publishes what the fast path could not.
    """

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        max_batch: int = 64,
        window: float = 0.0,
        publish: Callable[[Sequence[OutboxMessage]], None] | None = None,
    ) -> None:
        self.factory = factory
        self.max_batch = max(1, max_batch)
        self.window = max(0.0, window)
        self.publish = publish
        self._reset()
        _committers.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._queue: collections.deque[_Job] = collections.deque()
        self._leading = False

    @property
    def waiting(self) -> int:
        """How many submissions wait for the next batch (the one being committed not counted)."""
        with self._lock:
            return len(self._queue)

    def submit(self, prepare: Prepare, *, idempotency: tuple[str, str] | None = None) -> Submitted:
        """Run ``prepare`` in a shared transaction, write what it answers, commit; answers its
        own outcome or raises its own error. ``idempotency``: (client id, key) of the
        submission."""
        key = None if idempotency is None else (idempotency[0].lower(), idempotency[1])
        job = _Job(prepare, key)
        with self._lock:
            self._queue.append(job)
            lead = not self._leading
            if lead:
                self._leading = True
            else:
                self._arrived.notify()
        if not lead:
            job.wake.wait()
            if job.finished:
                return job.result()
            # Promoted: the previous leader is done and this job heads the queue.
        self._lead()
        return job.result()

    def _lead(self) -> None:
        created: list[Submitted] = []
        try:
            created = self._run(self._take())
        finally:
            with self._lock:
                if self._queue:
                    self._queue[0].wake.set()
                else:
                    self._leading = False
        # After the hand-over: the next batch's transaction overlaps with this batch's sends.
        self._send(created)

    def _take(self) -> list[_Job]:
        with self._lock:
            if self.window > 0:
                deadline = time.monotonic() + self.window
                while len(self._queue) < self.max_batch:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._arrived.wait(remaining)
            count = min(len(self._queue), self.max_batch)
            return [self._queue.popleft() for _ in range(count)]

    def _run(self, jobs: list[_Job]) -> list[Submitted]:
        """Commit ``jobs`` and wake each with its outcome; answers what was created."""
        batch, later = _one_per_key(jobs)
        if later:
            with self._lock:
                self._queue.extendleft(reversed(later))
        try:
            try:
                created = self._together(batch)
            except StoreUnavailable as error:
                for job in batch:
                    job.outcome, job.error = None, error
                created = []
            except Exception:
                logger.warning(
                    "group commit of %d submissions failed; committing each alone",
                    len(batch),
                    exc_info=True,
                )
                created = [done for job in batch if (done := self._alone(job)) is not None]
            return created
        except BaseException as error:
            for job in batch:
                if job.outcome is None and job.error is None:
                    job.error = StoreUnavailable("the submission could not be committed")
                    job.error.__cause__ = error
            raise
        finally:
            for job in batch:
                job.finished = True
                job.wake.set()

    def _together(self, batch: list[_Job]) -> list[Submitted]:
        """Prepare, write and commit the batch in one transaction; answers what it created."""
        prepared: list[tuple[_Job, Prepared]] = []
        with db.transaction(self.factory) as session:
            for job in batch:
                job.outcome, job.error = None, None
                try:
                    outcome = job.prepare(session)
                except exc.SQLAlchemyError:
                    raise  # the transaction may be spoiled: the batch goes one by one
                except Exception as error:
                    job.error = error  # this submission's own answer (409, 503 paused, ...)
                    continue
                if isinstance(outcome, Prepared):
                    prepared.append((job, outcome))
                else:
                    job.outcome = outcome
            submission.write(session, [rows for _, rows in prepared])
        logger.debug("committed %d submissions together", len(batch))
        for job, rows in prepared:
            job.outcome = rows.submitted
        return [rows.submitted for _, rows in prepared]

    def _alone(self, job: _Job) -> Submitted | None:
        """Commit one submission in its own transaction; answers it when it created a record."""
        for attempt in (1, 2):
            job.outcome, job.error = None, None
            try:
                with db.transaction(self.factory) as session:
                    outcome = job.prepare(session)
                    if isinstance(outcome, Prepared):
                        submission.write(session, [outcome])
                        outcome = outcome.submitted
            except exc.IntegrityError as error:
                if job.key is None or attempt == 2:
                    job.error = error
                    return None
                # Another submission with this key committed between our lookup and our
                # insert: the unique constraint stopped ours; the second pass finds theirs.
                logger.info(
                    "idempotency key raced for client %s; answering the winner",
                    job.key[0],
                    extra={"client_id": job.key[0]},
                )
                continue
            except Exception as error:
                job.error = error
                return None
            job.outcome = outcome
            return outcome if outcome.created else None
        return None

    def _send(self, created: list[Submitted]) -> None:
        messages = [message for done in created for message in done.messages]
        if not messages or self.publish is None:
            return
        try:
            self.publish(messages)
        except Exception:
            # Committed is accepted: the relay publishes what the fast path could not.
            logger.exception(
                "fast-path publish of %d requests failed; the relay will retry",
                len(created),
                extra={"request_ids": [done.request_id for done in created]},
            )


def _one_per_key(jobs: list[_Job]) -> tuple[list[_Job], list[_Job]]:
    """Split off every job whose Idempotency-Key an earlier job of the batch already uses."""
    batch: list[_Job] = []
    later: list[_Job] = []
    seen: set[tuple[str, str]] = set()
    for job in jobs:
        if job.key is not None and job.key in seen:
            later.append(job)
            continue
        if job.key is not None:
            seen.add(job.key)
        batch.append(job)
    return batch, later


_committers: weakref.WeakSet[Committer] = weakref.WeakSet()


def _reset_after_fork() -> None:
    # A forked child inherits the parent's lock and queue as they were, maybe held by a leader
    # thread that does not exist in the child: start afresh (nothing of the parent's is ours).
    for committer in list(_committers):
        committer._reset()


os.register_at_fork(after_in_child=_reset_after_fork)
