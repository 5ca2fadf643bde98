"""What a short request costs PostgreSQL: SQL statements and transactions, counted, so the count
cannot creep back up.

A request whose workflow finishes in its first step is run by the worker's task body
(``runner.run_request``, what ``broker.run_request`` calls) in process; its submission goes through
the public app's ``POST /requests``. Both are counted on the engine with SQLAlchemy's events:
``before_cursor_execute`` (one per statement; each is a round trip), ``commit`` and ``rollback``
(each ends a transaction: a round trip, and psycopg's ``BEGIN`` is one more) and the pool's
``checkout`` (each runs the pre-ping, one more round trip). The first request of each kind warms
the caches (definitions, the client directory, the pause flag); the second one is counted.

The limits are today's measured figures. Lower them when a change saves a statement; a change
that needs more must say why here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.locks import FileLockProvider
from broker.ingress.auth import PEER_CERT
from broker.ingress.routes.requests import COMMITTER
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.ports import OutboxMessage
from broker.runtime.requests.group_commit import Committer
from broker.runtime.steps import runner
from broker.settings import Settings
from broker.store import db
from broker.store.models import Request
from broker.web.context import EXTENSION
from broker.wiring.runtime import Runtime
from broker.wiring.web import create_public_app
from tests.support.doubles import RecordingSender
from tests.support.ingress import INVOICE_KEYS, make_pki, settings_for, write_config
from tests.support.runtime import prepare, runtime_env, submit_request
from tests.support.workflows import set_output, workflow, write_workflow

pytestmark = pytest.mark.postgres

#: a one-step request run by the worker: 6 statements in 1 transaction on 1 checkout, about 9
#: round trips (6 + BEGIN + COMMIT + the ping): one read (the outbox row's state, the instance,
#: the request, a pending start and the webhook endpoints), then the request's UPDATE, the
#: instance's INSERT in its final state, the journal, the outbox row marked done and the audit
#: events. It was 12 statements, 2 commits and 2 checkouts (about 18 round trips) before the read
#: and the save shared one transaction (docs/design.md section 3).
WORKER_STATEMENTS = 6
WORKER_COMMITS = 1
WORKER_CHECKOUTS = 1
#: one accepted ``POST /requests`` at the ingress, alone, measured the same way: 3 INSERTs in one
#: transaction on one checkout, about 6 round trips
SUBMIT_STATEMENTS = 3
SUBMIT_COMMITS = 1
SUBMIT_CHECKOUTS = 1
#: ``SUBMIT_BATCH`` concurrent ones, which the group committer writes together: the same 3
#: multi-row INSERTs, one commit and one checkout for the whole batch (3/8 of a statement and
#: 1/8 of a commit each, about 6/8 of a round trip)
SUBMIT_BATCH = 8
SUBMIT_BATCH_STATEMENTS = 3
SUBMIT_BATCH_COMMITS = 1
SUBMIT_BATCH_CHECKOUTS = 1


@dataclasses.dataclass
class SqlCount:
    """What one piece of work sent to the database."""

    statements: list[str] = dataclasses.field(default_factory=list)
    commits: int = 0
    rollbacks: int = 0
    checkouts: int = 0

    def summary(self) -> str:
        lines = [
            f"{len(self.statements)} statements, {self.commits} commits, "
            f"{self.rollbacks} rollbacks, {self.checkouts} checkouts:"
        ]
        lines.extend(f"  {' '.join(s.split())[:160]}" for s in self.statements)
        return "\n".join(lines)


@contextlib.contextmanager
def counting(engine: Engine) -> Iterator[SqlCount]:
    """Count the statements, transactions and connection checkouts on ``engine`` meanwhile."""
    count = SqlCount()

    def on_statement(
        _conn: Any, _cursor: Any, statement: str, _params: Any, _context: Any, _many: bool
    ) -> None:
        count.statements.append(statement)

    def on_commit(_conn: Any) -> None:
        count.commits += 1

    def on_rollback(_conn: Any) -> None:
        count.rollbacks += 1

    def on_checkout(_dbapi: Any, _record: Any, _proxy: Any) -> None:
        count.checkouts += 1

    listeners: Sequence[tuple[Any, str, Any]] = (
        (engine, "before_cursor_execute", on_statement),
        (engine, "commit", on_commit),
        (engine, "rollback", on_rollback),
        (engine.pool, "checkout", on_checkout),
    )
    for target, name, listener in listeners:
        event.listen(target, name, listener)
    try:
        yield count
    finally:
        for target, name, listener in listeners:
            event.remove(target, name, listener)


def engine_of(factory: sessionmaker[Session]) -> Engine:
    bind = factory.kw["bind"]
    assert isinstance(bind, Engine)
    return bind


@pytest.fixture
def rt(postgres_url: str, tmp_path: Path) -> Iterator[Runtime]:
    db.dispose_engines()
    folder = tmp_path / "wf"
    write_workflow(folder, workflow("one-step", [set_output("out", "result", "done")],
                                    request_type="OneStep"))  # fmt: skip
    settings = Settings.from_env(
        runtime_env(tmp_path / "var", database_url=postgres_url, workflows=folder)
    )
    factory, registry = prepare(settings)
    yield Runtime(
        settings,
        factory=factory,
        registry=registry,
        sender=RecordingSender(),
        locks=FileLockProvider(tmp_path / "locks"),
    )
    registry.stop()
    db.dispose_engines()


def run_one(rt: Runtime) -> tuple[str, Outcome]:
    """Submit a one-step request and run its task body as the worker does."""
    request_id = submit_request(rt.factory, rt.registry, "OneStep", publisher=rt.publisher)
    sender = rt.sender
    assert isinstance(sender, RecordingSender)
    return request_id, runner.run_request(rt, request_id, sender.sent[-1].id)


def test_a_one_step_request_costs_the_worker_at_most_todays_statements(rt: Runtime) -> None:
    # Given a worker that has run one request already (its caches are warm)
    request_id, outcome = run_one(rt)
    assert outcome is Outcome.DONE
    # When it runs a second one-step request, counted
    request_id = submit_request(rt.factory, rt.registry, "OneStep", publisher=rt.publisher)
    sender = rt.sender
    assert isinstance(sender, RecordingSender)
    outbox_id = sender.sent[-1].id
    with counting(engine_of(rt.factory)) as count:
        outcome = runner.run_request(rt, request_id, outbox_id)
    # Then the request completed
    assert outcome is Outcome.DONE
    with db.transaction(rt.factory, write=False) as session:
        assert session.scalar(select(Request.status).where(Request.id == request_id)) == (
            "Completed"
        )
    # And it cost no more statements, commits and checkouts than today
    print("\nworker, one-step request: " + count.summary())
    assert len(count.statements) <= WORKER_STATEMENTS, count.summary()
    assert count.commits <= WORKER_COMMITS, count.summary()
    assert count.checkouts <= WORKER_CHECKOUTS, count.summary()
    assert count.rollbacks == 0, count.summary()


# The submission at the ingress ---------------------------------------------------------------


class FastPathPublisher:
    """The production publisher's shape: rows go in already dispatched; nothing is sent."""

    dispatch_lease: float | None = 60.0

    def publish(self, outbox_ids: Sequence[str]) -> None:
        pass

    def publish_new(self, messages: Sequence[OutboxMessage]) -> None:
        pass


@pytest.fixture
def client(postgres_url: str, tmp_path: Path) -> Iterator[tuple[FlaskClient, Engine]]:
    db.dispose_engines()
    pki = make_pki(tmp_path / "pki")
    settings = settings_for(tmp_path / "var", pki, write_config(tmp_path / "config", pki))
    settings = settings.replace(database_url=postgres_url)
    db.upgrade(postgres_url)
    factory = db.make_session_factory(db.make_engine(postgres_url))
    app = create_public_app(settings, session_factory=factory, publisher=FastPathPublisher())
    test_client = app.test_client()
    test_client.environ_base[PEER_CERT] = pki.der("ClientA")  # type: ignore[assignment]
    yield test_client, engine_of(factory)
    db.dispose_engines()


def test_a_submission_costs_the_ingress_at_most_todays_statements(
    client: tuple[FlaskClient, Engine],
) -> None:
    test_client, engine = client
    body = {"requestType": "InvoiceProcess", "keys": INVOICE_KEYS}
    # Given an ingress that has accepted one submission already (its caches are warm)
    assert test_client.post("/requests", json=body).status_code == 202
    # When a second one is submitted, counted
    with counting(engine) as count:
        answer = test_client.post("/requests", json=body)
    # Then it was accepted
    assert answer.status_code == 202, answer.get_data(as_text=True)
    # And it cost no more statements, commits and checkouts than today
    print("\ningress, one submission: " + count.summary())
    assert len(count.statements) <= SUBMIT_STATEMENTS, count.summary()
    assert count.commits <= SUBMIT_COMMITS, count.summary()
    assert count.checkouts <= SUBMIT_CHECKOUTS, count.summary()
    assert count.rollbacks == 0, count.summary()


def test_a_batch_of_submissions_costs_the_ingress_at_most_todays_statements(
    client: tuple[FlaskClient, Engine],
) -> None:
    test_client, engine = client
    body = {"requestType": "InvoiceProcess", "keys": INVOICE_KEYS}
    # Given a warm ingress whose committer waits for SUBMIT_BATCH submissions before it commits
    assert test_client.post("/requests", json=body).status_code == 202
    extra = test_client.application.extensions[EXTENSION].extra
    extra[COMMITTER] = Committer(
        extra[COMMITTER].factory, max_batch=SUBMIT_BATCH, window=30, publish=lambda _: None
    )
    answers: list[int] = []

    def post() -> None:
        other = test_client.application.test_client()
        other.environ_base[PEER_CERT] = test_client.environ_base[PEER_CERT]
        answers.append(other.post("/requests", json=body).status_code)

    # When SUBMIT_BATCH submissions arrive together, counted
    with counting(engine) as count:
        threads = [threading.Thread(target=post) for _ in range(SUBMIT_BATCH)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    # Then each was accepted
    assert answers == [202] * SUBMIT_BATCH
    # And together they cost no more statements, commits and checkouts than today
    print(f"\ningress, {SUBMIT_BATCH} concurrent submissions: " + count.summary())
    assert len(count.statements) <= SUBMIT_BATCH_STATEMENTS, count.summary()
    assert count.commits <= SUBMIT_BATCH_COMMITS, count.summary()
    assert count.checkouts <= SUBMIT_BATCH_CHECKOUTS, count.summary()
    assert count.rollbacks == 0, count.summary()
