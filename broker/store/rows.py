"""Many new rows of one table in one statement, cheaply: on PostgreSQL one JSON document that the
server unpacks (docs/design.md, section 3)."""

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
