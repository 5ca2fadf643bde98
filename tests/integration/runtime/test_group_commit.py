"""The group committer on SQLite and PostgreSQL: concurrent submissions share one transaction,
each gets its own outcome, one submission's failure stays its own, and nothing is answered before
its commit.

Batches are made deterministic with a first submission that holds the leader role until every
other one is waiting: those then make up the next batch together.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from broker.errors import Conflict, StoreUnavailable
from broker.runtime.ports import OutboxMessage
from broker.runtime.requests import group_commit, submission
from broker.runtime.requests.group_commit import Committer, Prepare
from broker.runtime.requests.submission import Prepared, Submission, Submitted
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import OutboxRow, Request, RequestEvent
from tests.support.waits import wait_until


class Pinned:
    definition_id = "approval"
    version = 1
    version_id = "approval-v1"
    queue: str | None = None


@pytest.fixture
def settings(settings: Settings, database_url: str) -> Settings:
    """The suite's settings on each database, so ``factory`` runs on SQLite and PostgreSQL."""
    return settings.replace(database_url=database_url)


@dataclasses.dataclass
class Published:
    """Stands in for ``Publisher.publish_new``: records each call and what was committed then."""

    factory: sessionmaker[Session]
    calls: list[list[OutboxMessage]] = dataclasses.field(default_factory=list)
    committed_when_sent: list[bool] = dataclasses.field(default_factory=list)

    def __call__(self, messages: Sequence[OutboxMessage]) -> None:
        self.calls.append(list(messages))
        ids = [message.request_id for message in messages]
        with transaction(self.factory, write=False) as session:
            found = session.scalar(select(func.count()).where(Request.id.in_(ids)))
        self.committed_when_sent.append(found == len(ids))


@dataclasses.dataclass
class Transactions:
    commits: int = 0
    rollbacks: int = 0


@contextlib.contextmanager
def counting(factory: sessionmaker[Session]) -> Iterator[Transactions]:
    engine = factory.kw["bind"]
    assert isinstance(engine, Engine)
    count = Transactions()

    def on_commit(_conn: Any) -> None:
        count.commits += 1

    def on_rollback(_conn: Any) -> None:
        count.rollbacks += 1

    event.listen(engine, "commit", on_commit)
    event.listen(engine, "rollback", on_rollback)
    try:
        yield count
    finally:
        event.remove(engine, "commit", on_commit)
        event.remove(engine, "rollback", on_rollback)


def body(n: int, key: str | None = None, amount: int = 1) -> Submission:
    return Submission("Approval", {"n": str(n)}, {"amount": amount}, idempotency_key=key)


def preparing(what: Submission, client_id: str = "ClientA") -> Prepare:
    return functools.partial(
        submission.prepare, client_id=client_id, submission=what, workflow=Pinned()
    )


def key_of(what: Submission, client_id: str = "ClientA") -> tuple[str, str] | None:
    return None if what.idempotency_key is None else (client_id, what.idempotency_key)


def together(
    committer: Committer, prepares: Sequence[tuple[Prepare, tuple[str, str] | None]]
) -> list[Submitted | Exception]:
    """Submit ``prepares`` from one thread each while a first submission holds the leader role,
    so they all wait and make up the next batch; answers each one's outcome or error."""
    release, entered = threading.Event(), threading.Event()
    first = preparing(body(0))

    def held(session: Session) -> Prepared | Submitted:
        entered.set()
        assert release.wait(30)
        return first(session)

    outcomes: list[Submitted | Exception | None] = [None] * len(prepares)

    def run(index: int, prepare: Prepare, key: tuple[str, str] | None) -> None:
        try:
            outcomes[index] = committer.submit(prepare, idempotency=key)
        except Exception as error:
            outcomes[index] = error

    leader = threading.Thread(target=committer.submit, args=(held,))
    leader.start()
    assert entered.wait(10)
    threads = [
        threading.Thread(target=run, args=(index, prepare, key))
        for index, (prepare, key) in enumerate(prepares)
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: committer.waiting == len(prepares), timeout=10)
    release.set()
    for thread in (leader, *threads):
        thread.join(30)
    assert all(outcome is not None for outcome in outcomes)
    return [outcome for outcome in outcomes if outcome is not None]


def count_rows(factory: sessionmaker[Session]) -> tuple[int, int, int]:
    with transaction(factory, write=False) as session:
        return (
            session.scalar(select(func.count()).select_from(Request)) or 0,
            session.scalar(select(func.count()).select_from(RequestEvent)) or 0,
            session.scalar(select(func.count()).select_from(OutboxRow)) or 0,
        )


def test_concurrent_submissions_share_one_transaction_and_each_gets_its_own_outcome(
    factory: sessionmaker[Session],
) -> None:
    # Given a committer whose publish records what it sends
    published = Published(factory)
    committer = Committer(factory, publish=published)
    # When eight submissions arrive while a commit is under way
    whats = [body(n) for n in range(1, 9)]
    with counting(factory) as count:
        outcomes = together(committer, [(preparing(what), None) for what in whats])
    # Then each got its own new request
    assert all(isinstance(outcome, Submitted) and outcome.created for outcome in outcomes)
    done = [outcome for outcome in outcomes if isinstance(outcome, Submitted)]
    assert [d.view["keys"] for d in done] == [dict(what.keys) for what in whats]
    assert len({d.request_id for d in done}) == 8
    # And the nine submissions cost two commits: the first one's, and the batch's (the others
    # are the checks of ``published``, one read each)
    assert (count.commits - len(published.calls), count.rollbacks) == (2, 0)
    # And every request, audit event and outbox row is there
    assert count_rows(factory) == (9, 9, 9)
    # And the batch's messages went out together, after its commit
    assert sorted(len(call) for call in published.calls) == [1, 8]
    assert published.committed_when_sent == [True, True]
    (batch,) = [call for call in published.calls if len(call) == 8]
    assert {m.request_id for m in batch} == {d.request_id for d in done}


def test_a_conflicting_submission_answers_alone_while_the_others_commit(
    factory: sessionmaker[Session],
) -> None:
    # Given a request submitted earlier under the Idempotency-Key "k-1"
    committer = Committer(factory)
    earlier = committer.submit(preparing(body(1, "k-1")), idempotency=("ClientA", "k-1"))
    # When a batch holds a replay of it, another body under its key and two new submissions
    replay, clash = body(1, "k-1"), body(1, "k-1", amount=2)
    whats = [body(2), replay, clash, body(3)]
    with counting(factory) as count:
        outcomes = together(committer, [(preparing(w), key_of(w)) for w in whats])
    # Then the replay answers the earlier request, the other body a conflict
    new_a, again, conflict, new_b = outcomes
    assert isinstance(again, Submitted)
    assert (again.request_id, again.created) == (earlier.request_id, False)
    assert isinstance(conflict, Conflict)
    assert conflict.details["correlationId"] == earlier.request_id
    # And the others were created, in the same batch (the clash shares its key with the replay,
    # so it waited for a batch of its own: three commits in all)
    assert isinstance(new_a, Submitted)
    assert new_a.created
    assert isinstance(new_b, Submitted)
    assert new_b.created
    assert (count.commits, count.rollbacks) == (3, 0)
    assert count_rows(factory) == (4, 4, 4)


@pytest.mark.parametrize(("amount", "answer"), [(1, "same request"), (2, "conflict")])
def test_two_submissions_with_one_key_in_a_batch_behave_as_if_sequential(
    factory: sessionmaker[Session], amount: int, answer: str
) -> None:
    # When two submissions under the same Idempotency-Key arrive in one batch
    committer = Committer(factory)
    first, second = body(1, "k-9"), body(1, "k-9", amount=amount)
    outcomes = together(
        committer, [(preparing(first), key_of(first)), (preparing(second), key_of(second))]
    )
    # Then the first creates the request and the second finds it
    created, then = outcomes
    assert isinstance(created, Submitted)
    assert created.created
    if answer == "same request":
        assert isinstance(then, Submitted)
        assert (then.request_id, then.created) == (created.request_id, False)
        assert then.view["correlationId"] == created.request_id
    else:
        assert isinstance(then, Conflict)
    assert count_rows(factory) == (2, 2, 2)


def test_a_database_error_of_one_submission_fails_it_alone(
    factory: sessionmaker[Session],
) -> None:
    # Given a request already recorded
    committer = Committer(factory)
    existing = committer.submit(preparing(body(1)))
    # And a submission whose row collides with it (its primary key), a failure of the database
    normal = preparing(body(2))

    def colliding(session: Session) -> Prepared | Submitted:
        prepared = normal(session)
        assert isinstance(prepared, Prepared)
        prepared.request["id"] = existing.request_id
        return prepared

    # When it arrives in a batch with three others
    prepares: list[tuple[Prepare, tuple[str, str] | None]] = [
        (preparing(body(3)), None),
        (colliding, None),
        (preparing(body(4)), None),
        (preparing(body(5)), None),
    ]
    with counting(factory) as count:
        outcomes = together(committer, prepares)
    # Then it alone fails; the others are committed, each in its own transaction after the
    # batch was rolled back
    ok_a, failed, ok_b, ok_c = outcomes
    assert isinstance(failed, IntegrityError)
    for ok in (ok_a, ok_b, ok_c):
        assert isinstance(ok, Submitted)
        assert ok.created
    assert count.commits == 1 + 3
    assert count_rows(factory) == (5, 5, 5)


def test_nothing_is_answered_before_its_commit(factory: sessionmaker[Session]) -> None:
    # Given a database whose commits fail
    published = Published(factory)
    committer = Committer(factory, publish=published)
    engine = factory.kw["bind"]
    failing = threading.Event()

    def refuse(_conn: Any) -> None:
        if failing.is_set():
            raise RuntimeError("commit failed")

    event.listen(engine, "commit", refuse)
    try:
        release, entered = threading.Event(), threading.Event()
        first = preparing(body(0))

        def held(session: Session) -> Prepared | Submitted:
            entered.set()
            assert release.wait(30)
            return first(session)

        errors: list[Exception] = []

        def run(prepare: Prepare) -> None:
            try:
                committer.submit(prepare)
            except Exception as error:
                errors.append(error)

        leader = threading.Thread(target=run, args=(held,))
        leader.start()
        assert entered.wait(10)
        threads = [threading.Thread(target=run, args=(preparing(body(n)),)) for n in range(1, 5)]
        for thread in threads:
            thread.start()
        wait_until(lambda: committer.waiting == 4, timeout=10)
        # When the batch of four commits while commits fail
        failing.set()
        release.set()
        for thread in (leader, *threads):
            thread.join(30)
    finally:
        event.remove(engine, "commit", refuse)
    # Then every one of them (and the first) got an error, nothing of them remains and nothing
    # was sent
    assert len(errors) == 5
    assert all("commit failed" in str(error) for error in errors)
    assert count_rows(factory) == (0, 0, 0)
    assert published.calls == []


def test_a_submission_that_loses_a_key_race_after_a_failed_batch_answers_the_winner(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    if settings.database_url.startswith("sqlite"):
        pytest.skip("SQLite has one writer: another process cannot commit between two statements")
    # Given a committer whose publish records what it sends, and a request already recorded
    published = Published(factory)
    committer = Committer(factory, publish=published)
    existing = committer.submit(preparing(body(1)))
    # And a batch that fails for another submission's sake (its primary key collides)
    normal = preparing(body(2))

    def colliding(session: Session) -> Prepared | Submitted:
        prepared = normal(session)
        assert isinstance(prepared, Prepared)
        prepared.request["id"] = existing.request_id
        return prepared

    # And a keyed submission that, once tried alone, loses its key to another process between
    # its lookup and its insert
    keyed = body(3, "k-race")
    winner: list[str] = []
    calls: list[str] = []

    def racing(session: Session) -> Prepared | Submitted:
        outcome = preparing(keyed)(session)
        calls.append(type(outcome).__name__)
        if len(calls) == 2:
            with transaction(factory) as other:
                won = submission.submit(
                    other, client_id="ClientA", submission=keyed, workflow=Pinned()
                )
            winner.append(won.request_id)
        return outcome

    # When they arrive together with a plain new submission
    sent_before = len(published.calls)
    failed, raced, fresh = together(
        committer,
        [(colliding, None), (racing, ("ClientA", "k-race")), (preparing(body(4)), None)],
    )
    # Then the colliding one fails alone, and the keyed one, tried once more, answers the
    # request that won its key (an idempotent replay: nothing of its own is written or sent)
    assert isinstance(failed, IntegrityError)
    assert calls == ["Prepared", "Prepared", "Submitted"]
    assert isinstance(raced, Submitted)
    assert (raced.request_id, raced.created) == (winner[0], False)
    # And the plain one, committed alone after the batch failed, is created and its message sent
    assert isinstance(fresh, Submitted)
    assert fresh.created
    sent = {m.request_id for call in published.calls[sent_before:] for m in call}
    assert fresh.request_id in sent
    assert winner[0] not in sent


def submit_bounded(
    committer: Committer, prepare: Prepare, idempotency: tuple[str, str] | None = None
) -> Submitted | Exception:
    """Submit from a thread of its own, which must be answered within a generous bound (a
    committer that never leads would leave it waiting forever)."""
    outcome: list[Submitted | Exception] = []

    def run() -> None:
        try:
            outcome.append(committer.submit(prepare, idempotency=idempotency))
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the submission was never answered"
    return outcome[0]


def test_a_lone_submission_leads_its_own_batch_at_once(factory: sessionmaker[Session]) -> None:
    # Given an idle committer, When one submission arrives, Then it is committed and answered
    # without waiting for anyone
    outcome = submit_bounded(Committer(factory), preparing(body(1)))
    assert isinstance(outcome, Submitted)
    assert outcome.created
    assert count_rows(factory) == (1, 1, 1)


def test_a_lone_replay_is_answered_at_once(factory: sessionmaker[Session]) -> None:
    # Given an idle committer, When a submission arrives whose answer needs no write (an
    # idempotent replay of an earlier request), Then it is answered without waiting for anyone
    earlier = Submitted("req-earlier", created=False, view={"correlationId": "req-earlier"})
    assert submit_bounded(Committer(factory), lambda session: earlier) is earlier


def test_the_defaults_are_those_of_the_settings(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    # A committer made without a batch size or window behaves as the default configuration
    # (BROKER_SUBMIT_BATCH_MAX, BROKER_SUBMIT_BATCH_WINDOW): batches of 64, no waiting
    committer = Committer(factory)
    assert (committer.max_batch, committer.window) == (
        settings.submit_batch_max,
        settings.submit_batch_window,
    )
    assert (committer.max_batch, committer.window) == (64, 0.0)


@pytest.mark.parametrize("max_batch", [1, 0])
def test_a_batch_of_one_commits_each_waiting_submission_alone(
    factory: sessionmaker[Session], max_batch: int
) -> None:
    # Given a committer whose batches hold one submission (0 means one as well)
    committer = Committer(factory, max_batch=max_batch)
    # When two submissions wait behind a first one
    with counting(factory) as count:
        outcomes = together(committer, [(preparing(body(n)), None) for n in (1, 2)])
    # Then each is committed in its own transaction: three commits in all
    assert all(isinstance(outcome, Submitted) and outcome.created for outcome in outcomes)
    assert (count.commits, count.rollbacks) == (3, 0)
    assert count_rows(factory) == (3, 3, 3)


def test_two_clients_using_the_same_key_share_a_batch(factory: sessionmaker[Session]) -> None:
    # Given two clients that happen to use the same Idempotency-Key
    committer = Committer(factory)
    mine, theirs = body(1, "k-1"), body(2, "k-1")
    # When both submissions wait for the same batch
    with counting(factory) as count:
        outcomes = together(
            committer,
            [
                (preparing(mine, "ClientA"), key_of(mine, "ClientA")),
                (preparing(theirs, "ClientB"), key_of(theirs, "ClientB")),
            ],
        )
    # Then their keys do not collide: both are created, in one batch (two commits in all)
    assert all(isinstance(outcome, Submitted) and outcome.created for outcome in outcomes)
    assert (count.commits, count.rollbacks) == (2, 0)


def test_a_keyed_submission_that_keeps_failing_alone_answers_its_database_error(
    factory: sessionmaker[Session],
) -> None:
    # Given a request already recorded, and a keyed submission whose row always collides with
    # it (its primary key): the unique violation looks like a lost key race at first
    committer = Committer(factory)
    existing = submit_bounded(committer, preparing(body(1)))
    assert isinstance(existing, Submitted)
    normal = preparing(body(2, "k-2"))
    calls: list[int] = []

    def colliding(session: Session) -> Prepared | Submitted:
        calls.append(1)
        prepared = normal(session)
        assert isinstance(prepared, Prepared)
        prepared.request["id"] = existing.request_id
        return prepared

    # When it is submitted, Then its batch fails, it is tried alone twice (the second try for
    # the race), and it answers the database's error
    assert isinstance(submit_bounded(committer, colliding, ("ClientA", "k-2")), IntegrityError)
    assert len(calls) == 3
    assert count_rows(factory) == (1, 1, 1)


def test_a_forked_child_starts_with_a_fresh_committer(factory: sessionmaker[Session]) -> None:
    # Given a committer in the middle of a batch: its lock held by the leader, a submission
    # queued behind it
    committer = Committer(factory)
    with committer._lock:
        committer._leading = True
        committer._queue.append(group_commit._Job(preparing(body(1)), None))
        # When the process forks (the child has no leader to finish the batch)
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the child only reports what it sees, and always exits
            try:
                free = committer._lock.acquire(blocking=False)
                state = f"{free} {committer._leading} {len(committer._queue)}"
                os.write(write_end, state.encode())
            finally:
                os._exit(0)
    # Then the child's committer is free, idle and empty
    os.close(write_end)
    with os.fdopen(read_end) as report:
        assert report.read() == "True False 0"
    assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
    # And the parent's is its own, untouched
    assert committer._leading
    assert committer.waiting == 1


def test_resetting_after_a_fork_frees_every_committer(factory: sessionmaker[Session]) -> None:
    # Given a committer as a forked child inherits it: its lock held and a leader that does not
    # exist in the child
    committer = Committer(factory)
    assert committer._lock.acquire(blocking=False)
    committer._leading = True
    # When the fork hook runs, Then the committer leads the next submission at once
    group_commit._reset_after_fork()
    outcome = submit_bounded(committer, preparing(body(1)))
    assert isinstance(outcome, Submitted)
    assert outcome.created


class Interrupted(BaseException):
    """Not an Exception: what a signal's handler raises into a thread (SystemExit, ...)."""


def queued_in_order(
    committer: Committer, prepares: Sequence[Prepare]
) -> list[Submitted | BaseException]:
    """As ``together``, but each submission is queued only once the one before it waits, so the
    first of them leads their batch; answers each one's outcome or error (BaseException too)."""
    release, entered = threading.Event(), threading.Event()
    first = preparing(body(0))

    def held(session: Session) -> Prepared | Submitted:
        entered.set()
        assert release.wait(30)
        return first(session)

    outcomes: list[Submitted | BaseException | None] = [None] * len(prepares)

    def run(index: int, prepare: Prepare) -> None:
        try:
            outcomes[index] = committer.submit(prepare)
        except BaseException as error:  # handed to the test thread
            outcomes[index] = error

    leader = threading.Thread(target=committer.submit, args=(held,), daemon=True)
    leader.start()
    assert entered.wait(10)
    threads = []
    for index, prepare in enumerate(prepares):
        threads.append(threading.Thread(target=run, args=(index, prepare), daemon=True))
        threads[-1].start()
        wait_until(lambda: committer.waiting == len(threads), timeout=10, interval=0.005)
    release.set()
    for thread in (leader, *threads):
        thread.join(10)
        assert not thread.is_alive(), "a submission was never answered"
    return [outcome for outcome in outcomes if outcome is not None]


def test_an_interrupted_batch_answers_each_submission_without_an_answer_of_its_own(
    factory: sessionmaker[Session],
) -> None:
    # Given a batch led by a plain submission, holding a replay (answered without a write), a
    # submission refused on its own account, another plain one, one whose preparation is
    # interrupted (not an Exception: a signal's SystemExit, say) and one after it
    committer = Committer(factory)
    earlier = Submitted("req-earlier", created=False, view={"correlationId": "req-earlier"})
    refused = Conflict("refused on its own account")

    def refusing(session: Session) -> Prepared | Submitted:
        raise refused

    def interrupting(session: Session) -> Prepared | Submitted:
        raise Interrupted

    # When the batch runs
    leading, replay, conflict, plain, interrupted, after = queued_in_order(
        committer,
        [
            preparing(body(1)),
            lambda session: earlier,
            refusing,
            preparing(body(2)),
            interrupting,
            preparing(body(3)),
        ],
    )
    # Then the interruption reaches the thread that led the batch
    assert isinstance(leading, Interrupted)
    # And the submissions that had their answer keep it
    assert replay is earlier
    assert conflict is refused
    # And each one without an answer learns that it was not committed, and why
    for unanswered in (plain, interrupted, after):
        assert isinstance(unanswered, StoreUnavailable)
        assert str(unanswered) == "the submission could not be committed"
        assert isinstance(unanswered.__cause__, Interrupted)
    # And nothing of the batch was written (the first submission's batch was)
    assert count_rows(factory) == (1, 1, 1)


def test_a_submission_refused_on_its_own_account_leaves_the_rest_of_its_batch(
    factory: sessionmaker[Session],
) -> None:
    # Given a batch whose first submission is refused on its own account (say, paused)
    committer = Committer(factory)
    refused = Conflict("refused on its own account")

    def refusing(session: Session) -> Prepared | Submitted:
        raise refused

    # When it runs with two plain submissions behind it
    outcomes = together(
        committer, [(refusing, None), (preparing(body(1)), None), (preparing(body(2)), None)]
    )
    # Then it alone is refused, and the others are created
    assert outcomes[0] is refused
    for created in outcomes[1:]:
        assert isinstance(created, Submitted)
        assert created.created
    assert count_rows(factory) == (3, 3, 3)


def test_a_window_ends_and_a_lone_submission_is_answered(factory: sessionmaker[Session]) -> None:
    # Given a committer that waits a moment for company before each batch
    committer = Committer(factory, window=0.05)
    # When one submission arrives and no other follows, Then its window ends and it is committed
    outcome = submit_bounded(committer, preparing(body(1)))
    assert isinstance(outcome, Submitted)
    assert outcome.created
