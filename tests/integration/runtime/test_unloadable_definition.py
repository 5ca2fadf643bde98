"""A worker never fails again and again on a definition it cannot load (issue 34, finding 1): a
version stored before the nesting limit, 950 levels deep, faults its request once, with the
reason and a dead letter, and every other request type keeps running. In process, on SQLite and
PostgreSQL (``drain`` stands in for the worker). (950 levels is deeper than the driver's JSON
reader goes on a worker's stack; 200 is read back, then refused by the parser's nesting limit.)"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text

from broker.runtime.requests.submission import Submission, submit
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import DeadLetter, OutboxRow, Request
from broker.wiring.runtime import Runtime
from tests.support.runtime import drain, in_process_runtime, runtime_env, submit_request
from tests.support.workflows import deep_definition_text, set_output, workflow, write_workflow


@pytest.fixture
def rt(database_url: str, tmp_path: Path) -> Iterator[Runtime]:
    dispose_engines()
    folder = tmp_path / "wf"
    write_workflow(folder, workflow("fine", [set_output("out", "ok", 1)], request_type="Fine"))
    env = runtime_env(tmp_path / "var", database_url=database_url, workflows=folder)
    yield in_process_runtime(Settings.from_env(env), tmp_path / "locks")
    dispose_engines()


def store_deep_version(rt: Runtime, version_id: str, depth: int) -> None:
    """A version row as a publish before the fix stored it, ``depth`` levels deep (written as
    text: too deep for ``json.dumps``)."""
    document = deep_definition_text(depth, "activities")
    with transaction(rt.factory) as session:
        session.execute(
            text(
                "INSERT INTO workflow_definitions (id, definition_id, version, name, "
                "request_type, request_type_key, queue, source_path, content_hash, document, "
                "is_latest, is_published, created_at) VALUES (:id, 'deep', 1, 'deep', 'Deep', "
                "'deep', 'broker.deep', NULL, :hash, :document, :true, :true, :at)"
            ),
            {
                "id": version_id,
                "hash": "0" * 64,
                "document": document,
                "true": True,
                "at": dt.datetime.now(dt.UTC),
            },
        )


@pytest.mark.parametrize(
    ("depth", "reason"),
    [(200, "nests deeper than 64 levels"), (950, "nests too deep to be read back")],
)
def test_a_request_of_an_unloadable_version_faults_once_and_others_run(
    rt: Runtime, depth: int, reason: str
) -> None:
    # Given a request pinned to a stored version nesting too deep, and a request of a good type
    store_deep_version(rt, "deep-v1", depth)
    with transaction(rt.factory) as session:
        submitted = submit(
            session,
            client_id="TestClient",
            submission=Submission(request_type="Deep", keys={}, payload=None),
            workflow=Pinned("deep-v1"),
        )
    fine = submit_request(rt.factory, rt.registry, "Fine")
    # When the worker runs what is queued
    ran = drain(rt)
    # Then each request ran once: the deep one faulted with the reason, the good one completed
    assert sorted(ran) == ["broker.run_request", "broker.run_request"]
    with transaction(rt.factory, write=False) as session:
        deep = session.get(Request, submitted.request_id)
        assert deep is not None
        assert deep.status == "Faulted"
        assert "cannot be loaded" in (deep.error_detail or "")
        assert reason in (deep.error_detail or "")
        assert session.get(Request, fine).status == "Completed"  # type: ignore[union-attr]
        # ... its outbox row is finished (nothing is delivered again) and a dead letter names why
        states = session.scalars(
            select(OutboxRow.state).where(OutboxRow.request_id == submitted.request_id)
        ).all()
        assert set(states) == {"done"}
        (letter,) = session.scalars(
            select(DeadLetter).where(DeadLetter.request_id == submitted.request_id)
        ).all()
        assert letter.reason == "WorkflowDefinitionUnloadable"


@dataclasses.dataclass(frozen=True)
class Pinned:
    """The version a request is pinned to, as ``submit`` reads it (``PinnedWorkflow``)."""

    version_id: str
    definition_id: str = "deep"
    version: int = 1
    queue: str | None = "broker.deep"
