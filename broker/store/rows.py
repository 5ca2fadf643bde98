"""Many new rows of one table in one statement, cheaply (docs/design.md section 3).

A step's journal (a dozen rows), its audit events and a group commit's submissions are written as
one INSERT each. Through the driver's ``executemany`` every row's every value is bound and sent on
its own; on PostgreSQL ``insert_rows`` sends the rows as one JSON document instead and lets the
server unpack it (``INSERT ... SELECT ... FROM jsonb_to_recordset(:rows)``): one parameter, encoded
by the ``json`` module in C, whatever the number of rows, and a statement text that does not depend
on it (so the server prepares it once). Elsewhere (SQLite) it is the plain ``executemany``.

The rows arrive in the order given (the function scan keeps the document's order, so serial ids
follow it). Values are what the columns take: a timestamp must be timezone-aware (as
``UTCDateTime`` demands), a JSON column takes any JSON value and ``None`` is SQL NULL.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Insert, Table, bindparam, column, func, insert, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session


def insert_rows(session: Session, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows`` (each with the same keys) into ``table`` with one statement."""
    if not rows:
        return
    if session.get_bind().dialect.name != "postgresql":
        session.execute(insert(table), list(rows))
        return
    names = tuple(rows[0])
    session.execute(_from_document(table, names), {"rows": [_document(row) for row in rows]})


@functools.cache
def _from_document(table: Table, names: tuple[str, ...]) -> Insert:
    # Built once per table and set of columns; a column left out gets its default, as with
    # ``executemany`` (a callable default is taken once for the statement).
    document = (
        func.jsonb_to_recordset(bindparam("rows", type_=JSONB))
        .table_valued(*(column(name, table.c[name].type) for name in names))
        .render_derived(name="r", with_types=True)
    )
    return insert(table).from_select(names, select(*(document.c[name] for name in names)))


def _document(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _value(value) for key, value in row.items()}


def _value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use broker.store.models.utcnow()")
        return value.astimezone(dt.UTC).isoformat()
    return value
