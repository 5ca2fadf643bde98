"""The execution journal on SQLite and PostgreSQL: a step's rows are numbered after the stored
ones and go to the database as one INSERT, whatever the number of entries."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from sqlalchemy import event, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, sessionmaker

from broker.engine.run.results import JournalEntry
from broker.runtime.persist import journal, recorded_values
from broker.store.db import transaction
from broker.store.models import ActivityExecution

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def entries(count: int) -> Iterator[JournalEntry]:
    for index in range(count):
        yield JournalEntry(
            activity_id=f"a{index}",
            activity_instance_id=f"ai{index}",
            activity_type="Elsa.WriteLine",
            activity_name=None,
            event_name="Completed" if index % 2 else "Started",
            outcome="Done" if index % 2 else None,
            timestamp=NOW,
        )


def test_a_step_journal_is_one_insert_numbered_after_the_stored_rows(
    factory: sessionmaker[Session],
) -> None:
    # Given an instance with three journal rows already stored
    with transaction(factory) as session:
        assert journal.append(session, "i1", entries(3), sequence=1) == 3
    inserts: list[str] = []

    def count(conn: Connection, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO ACTIVITY_EXECUTIONS"):
            inserts.append(statement)

    engine = factory.kw["bind"]
    event.listen(engine, "before_cursor_execute", count)
    try:
        # When a step with twelve entries is stored, its sequence read from the database
        with transaction(factory) as session:
            written = journal.append(session, "i1", entries(12), attempt=2)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    # Then the twelve rows went in with one statement, numbered 4 to 15, with their attempt
    assert written == 12
    assert len(inserts) == 1
    with transaction(factory, write=False) as session:
        rows = session.execute(
            select(ActivityExecution.sequence, ActivityExecution.attempt)
            .where(ActivityExecution.instance_id == "i1")
            .order_by(ActivityExecution.sequence)
        ).all()
    assert [r.sequence for r in rows] == list(range(1, 16))
    assert [r.attempt for r in rows] == [1] * 3 + [2] * 12


def test_recorded_inputs_and_outputs_go_into_the_payload_bounded_in_size(
    factory: sessionmaker[Session],
) -> None:
    # Given a step whose entries carry inputs and outputs: a long one, one JSON cannot hold
    long_text = "x" * (recorded_values.MAX_VALUE_CHARS * 3)
    step = [
        JournalEntry("a", "ai1", "Elsa.WriteLine", None, "Completed", "Done", NOW, {"text": "hi"}),
        JournalEntry(
            "b",
            "ai2",
            "Elsa.RunJavaScript",
            None,
            "Completed",
            "Done",
            NOW,
            inputs={"script": long_text},
            outputs={"result": {"when": NOW}},
        ),
        JournalEntry("c", "ai3", "Elsa.Sequence", None, "Started", None, NOW),
    ]
    # When it is stored
    with transaction(factory) as session:
        journal.append(session, "i2", step, sequence=1, extra={"note": "kept"})
    with transaction(factory, write=False) as session:
        payloads = list(
            session.scalars(
                select(ActivityExecution.payload)
                .where(ActivityExecution.instance_id == "i2")
                .order_by(ActivityExecution.sequence)
            )
        )
    # Then short values are kept as they are, a long one is cut with a marker saying its size,
    # a date becomes its text, and an entry without values keeps only the step's extra
    assert payloads[0] == {"note": "kept", "inputs": {"text": "hi"}}
    script = payloads[1]["inputs"]["script"]
    assert len(script) < recorded_values.MAX_VALUE_CHARS + 100
    assert script.endswith(f"[truncated: {len(long_text) + 2} characters]")
    assert payloads[1]["outputs"] == {"result": {"when": str(NOW)}}
    assert payloads[2] == {"note": "kept"}
