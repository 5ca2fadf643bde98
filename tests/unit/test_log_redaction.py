"""No SQL parameter reaches a log line (issue 34, finding 7): the broker's engines hide the
parameters of failed statements (they hold drafts and payloads), and the log formatters mask
SQLAlchemy's parameter block whatever engine raised the error."""

from __future__ import annotations

import io
import logging

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from broker.settings import Settings
from broker.store import db
from broker.store.models import WorkflowDraft
from broker.telemetry.logs import JsonFormatter, TextFormatter

DRAFT_CONTENT = "TOP-SECRET-DRAFT-CONTENT"


def failed_insert(engine: sa.Engine) -> Exception:
    """The error of an insert that breaks a primary key, its parameters holding a draft."""
    meta = sa.MetaData()
    table = sa.Table(
        "t", meta, sa.Column("id", sa.Integer, primary_key=True), sa.Column("doc", sa.Text)
    )
    meta.create_all(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), {"id": 1, "doc": "first"})
    try:
        with engine.begin() as conn:
            conn.execute(table.insert(), {"id": 1, "doc": DRAFT_CONTENT})
    except sa.exc.IntegrityError as exc:
        return exc
    raise AssertionError("the insert did not fail")


def test_the_brokers_engines_hide_statement_parameters(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    # Given a draft saved twice under one id (a primary key the database refuses)
    with db.transaction(factory) as session:
        session.add(WorkflowDraft(definition_id="d", document={"root": "first"}))
    with pytest.raises(sa.exc.IntegrityError) as raised, db.transaction(factory) as session:
        session.add(WorkflowDraft(definition_id="d", document={"root": DRAFT_CONTENT}))
    # Then the error the database raised says which statement failed, never its values
    assert "INSERT INTO workflow_drafts" in str(raised.value)
    assert DRAFT_CONTENT not in str(raised.value)


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()], ids=["json", "text"])
def test_a_logged_database_error_never_shows_its_parameters(
    formatter: logging.Formatter, tmp_path: object
) -> None:
    # Given a database error from an engine that shows its parameters
    error = failed_insert(sa.create_engine("sqlite://"))
    assert DRAFT_CONTENT in str(error)
    # When it is logged with its traceback, as the console's 500 handler logs
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger("test.log.redaction")
    logger.addHandler(handler)
    try:
        logger.error("unhandled error on POST /x: %s", error, exc_info=error)
    finally:
        logger.removeHandler(handler)
    # Then the line names the failure but not the values
    line = stream.getvalue()
    assert "IntegrityError" in line
    assert DRAFT_CONTENT not in line
