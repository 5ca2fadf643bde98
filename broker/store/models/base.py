"""The declarative base and the column types every table shares: timestamps in UTC
(``UTCDateTime``), JSON as JSONB on PostgreSQL and text on SQLite, and text ids (UUIDs or derived
ids) so that one id travels through Celery, logs and URLs."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from sqlalchemy import JSON, DateTime, MetaData, String, Table, TypeDecorator
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase

# Stable constraint names, so Alembic migrations are the same on every backend.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use broker.store.models.utcnow()")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


# none_as_null: a Python None is stored as SQL NULL, never as the JSON text 'null', so "IS NULL"
# means the same whether the attribute was set to None or never set.
JsonColumn = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
Id = String(64)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dt.datetime: UTCDateTime(), dict[str, Any]: JsonColumn, Any: JsonColumn}


def table_of(model: type[Base]) -> Table:
    """The Core table of a mapped class. The worker's hot statements are built once on it and
    run with bind parameters: building an ORM statement on every call costs more than the round
    trip to the database."""
    return cast(Table, model.__table__)
