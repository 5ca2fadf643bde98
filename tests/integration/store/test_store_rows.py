"""Many rows in one statement (``broker.store.rows``) on SQLite and PostgreSQL: every value as the
column takes it, the rows in the order given, a naive timestamp refused."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, sessionmaker

from broker.store.db import transaction
from broker.store.models import RequestEvent, table_of
from broker.store.rows import insert_rows

AT = dt.datetime(2026, 1, 1, 12, 30, 15, 123456, tzinfo=dt.UTC)
EVENTS = table_of(RequestEvent)


def event_row(n: int, **values: object) -> dict[str, object]:
    return {
        "request_id": "r1",
        "timestamp": AT + dt.timedelta(seconds=n),
        "event_type": f"E{n}",
        "source": "worker",
        "message": None,
        "properties": None,
        **values,
    }


def test_rows_go_in_with_one_statement_in_order_with_their_values(
    factory: sessionmaker[Session],
) -> None:
    # Given five rows: texts, NULLs, JSON of every kind and a timestamp in another zone
    rows = [event_row(n) for n in range(5)]
    rows[1].update(message='it\'s "quoted" ünïcode', properties={"a": [1, 2.5, None, True]})
    rows[2].update(properties={"nested": {"deep": "x"}}, message="")
    rows[3].update(
        timestamp=(AT + dt.timedelta(seconds=3)).astimezone(dt.timezone(dt.timedelta(hours=5)))
    )
    inserts: list[str] = []

    def count(conn: Connection, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("INSERT"):
            inserts.append(statement)

    engine = factory.kw["bind"]
    event.listen(engine, "before_cursor_execute", count)
    try:
        # When they are inserted together
        with transaction(factory) as session:
            insert_rows(session, EVENTS, rows)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    # Then one statement wrote them, their ids in the order given, each value as it was
    assert len(inserts) == 1
    with transaction(factory, write=False) as session:
        stored = session.scalars(select(RequestEvent).order_by(RequestEvent.id)).all()
        assert [e.event_type for e in stored] == ["E0", "E1", "E2", "E3", "E4"]
        assert [e.timestamp for e in stored] == [AT + dt.timedelta(seconds=n) for n in range(5)]
        assert stored[0].message is None
        assert stored[0].properties is None
        assert stored[1].message == 'it\'s "quoted" ünïcode'
        assert stored[1].properties == {"a": [1, 2.5, None, True]}
        assert stored[2].properties == {"nested": {"deep": "x"}}
        assert stored[2].message == ""
        # (a JSON column's None is SQL NULL, not the JSON text null)
        assert (
            session.scalar(
                select(RequestEvent.id).where(
                    RequestEvent.properties.is_(None), RequestEvent.event_type == "E4"
                )
            )
            is not None
        )


def test_a_naive_timestamp_is_refused_and_nothing_is_written(
    factory: sessionmaker[Session],
) -> None:
    with pytest.raises(Exception, match="naive"), transaction(factory) as session:
        insert_rows(
            session, EVENTS, [event_row(0), event_row(1, timestamp=AT.replace(tzinfo=None))]
        )
    with transaction(factory, write=False) as session:
        assert session.scalars(select(RequestEvent)).all() == []
