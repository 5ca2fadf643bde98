"""The schema on SQLite and PostgreSQL: migrations match the models, every model round-trips."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from broker.store.db import make_engine, transaction
from broker.store.models import Base, Request, RequestStatus, UTCDateTime

# A zone other than UTC, with microseconds: it must come back as the same instant, in UTC.
WHEN = dt.datetime(2026, 3, 29, 2, 30, 15, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
NESTED = {
    "ключ": ["値", {"emoji": "🎉", "float": 1.5, "bool": True, "none": None}],
    "deep": {"a": {"b": {"c": [1, 2, {"d": "é"}]}}},
    "empty": {},
}
MODELS = sorted(Base.registry.mappers, key=lambda m: m.class_.__name__)


def sample_value(column: sa.Column[Any], seed: int) -> Any:
    """A value of the column's type that exercises it: unicode text, aware times, nested JSON."""
    kind = column.type
    if isinstance(kind, UTCDateTime):
        return WHEN + dt.timedelta(seconds=seed)
    if isinstance(kind, sa.JSON):
        return {**NESTED, "seed": seed}
    if isinstance(kind, sa.Boolean):
        return seed % 2 == 0
    if isinstance(kind, sa.Integer):  # BigInteger too
        return 1_000 + seed
    if isinstance(kind, sa.String):
        value = f"{column.name}-ü-{seed}"
        return value[-kind.length :] if kind.length else value
    raise AssertionError(f"no sample for {column.table.name}.{column.name} of type {kind!r}")


def sample(model: type[Any], seed: int = 0) -> dict[str, Any]:
    values = {}
    for attr in sa.inspect(model).column_attrs:
        column = attr.columns[0]
        if column.primary_key and column.autoincrement is True:
            continue
        values[attr.key] = sample_value(column, seed)
    return values


def make_request(client_key: str, idempotency_key: str | None, seed: int) -> Request:
    values = sample(Request, seed)
    values.update(client_key=client_key, idempotency_key=idempotency_key)
    return Request(**values)


def test_migrations_create_exactly_the_schema_of_the_models(migrated_url: str) -> None:
    # Given a database migrated to head

    # When alembic compares it with the models (types included)
    with make_engine(migrated_url).connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)

    # Then there is nothing to migrate: a model change without a migration fails here
    assert differences == []


@pytest.mark.parametrize("mapper", MODELS, ids=lambda m: m.class_.__name__)
def test_every_model_round_trips(factory: sessionmaker[Session], mapper: Any) -> None:
    # Given a row of the model with every column set
    model = mapper.class_
    values = sample(model)
    with transaction(factory) as session:
        row = model(**values)
        session.add(row)
        session.flush()
        identity = sa.inspect(row).identity

    # When it is read back in another session
    with transaction(factory, write=False) as session:
        loaded = session.get(model, identity)
        assert loaded is not None
        stored = {key: getattr(loaded, key) for key in values}

    # Then every value is equal, and times come back aware, in UTC
    assert stored == values
    for key, value in stored.items():
        if isinstance(value, dt.datetime):
            assert value.utcoffset() == dt.timedelta(0), key
            assert value.tzinfo is dt.UTC, key


def test_defaults_and_nulls_round_trip(factory: sessionmaker[Session]) -> None:
    # Given a request with only the required columns
    with transaction(factory) as session:
        session.add(
            Request(
                id="r1",
                client_id="ClientA",
                client_key="clienta",
                request_type="Invoice",
                request_type_key="invoice",
                keys={},
                payload=None,
            )
        )

    # When it is read back
    with transaction(factory, write=False) as session:
        loaded = session.get(Request, "r1")
        assert loaded is not None
        null_payloads = session.scalar(
            sa.select(sa.func.count()).select_from(Request).where(Request.payload.is_(None))
        )

    # Then defaults are filled, and a None payload is SQL NULL, not the JSON text null
    assert loaded.status == RequestStatus.QUEUED
    assert loaded.submitted_at.tzinfo is dt.UTC
    assert loaded.result is None
    assert null_payloads == 1


def test_naive_datetimes_are_refused(factory: sessionmaker[Session]) -> None:
    # Given a request whose submission time has no zone
    values = sample(Request)
    values["submitted_at"] = dt.datetime(2026, 1, 1, 12, 0)

    # When it is stored, Then the store refuses it instead of guessing a zone
    with pytest.raises(sa.exc.StatementError, match="naive datetimes"), transaction(factory) as s:
        s.add(Request(**values))


def test_an_idempotency_key_is_unique_per_client(factory: sessionmaker[Session]) -> None:
    # Given a request of client a with key k
    with transaction(factory) as session:
        session.add(make_request("a", "k", seed=1))

    # When client a submits key k again, Then the database refuses it
    with pytest.raises(IntegrityError), transaction(factory) as session:
        session.add(make_request("a", "k", seed=2))

    # When another client uses the same key, or requests carry no key, Then they are stored
    with transaction(factory) as session:
        session.add(make_request("b", "k", seed=3))
        session.add(make_request("a", None, seed=4))
        session.add(make_request("a", None, seed=5))
    with transaction(factory, write=False) as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Request)) == 4


def test_partial_indexes_exist_with_their_conditions(migrated_url: str) -> None:
    # Given the partial indexes the models declare for this backend
    engine = make_engine(migrated_url)
    dialect = engine.dialect.name
    declared = {
        index.name: (table.name, index.dialect_options[dialect]["where"])
        for table in Base.metadata.tables.values()
        for index in table.indexes
        if index.dialect_options[dialect]["where"] is not None
    }
    assert set(declared) >= {"ix_outbox_pending", "ix_outbox_dispatched", "ix_timers_due"}

    # When the database's indexes are reflected
    inspector = sa.inspect(engine)
    for name, (table, where) in declared.items():
        reflected = {i["name"]: i for i in inspector.get_indexes(table)}[name]
        condition = reflected.get("dialect_options", {}).get(f"{dialect}_where")

        # Then each is partial, on the declared condition
        assert condition is not None, name
        assert normalize(str(condition)) == normalize(str(where)), name


def normalize(condition: str) -> str:
    # PostgreSQL prints "((state)::text = 'pending'::text)" for "state = 'pending'".
    text = condition.replace("::text", "").replace("(", "").replace(")", "")
    return " ".join(text.split()).lower()
