"""Publishing workflow versions on SQLite and PostgreSQL, including two publishers racing."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.registry import WorkflowRegistry
from broker.settings import Settings
from broker.store import models
from tests.support.services import PROJECT_ROOT

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "registry"


def fixture(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return document


def with_text(document: dict[str, Any], text: str) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["root"]["activities"][1]["text"]["expression"]["value"] = text
    return changed


def write(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return path


@pytest.fixture
def settings(settings: Settings, database_url: str) -> Settings:
    """The suite's settings on each database, so ``factory`` runs on SQLite and PostgreSQL."""
    return settings.replace(database_url=database_url)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "workflows"
    path.mkdir()
    return path


def registry_for(
    settings: Settings, folder: Path, factory: sessionmaker[Session]
) -> WorkflowRegistry:
    return WorkflowRegistry(settings.replace(workflow_paths=(str(folder),)), factory)


def rows(factory: sessionmaker[Session], definition_id: str) -> list[tuple[int, str, bool]]:
    table = models.WorkflowDefinition
    with factory() as session:
        found = session.execute(
            select(table.version, table.id, table.is_latest)
            .where(table.definition_id == definition_id)
            .order_by(table.version)
        ).all()
    return [(v, i, latest) for v, i, latest in found]


def test_a_file_is_published_once_with_its_triggers(
    settings: Settings, folder: Path, factory: sessionmaker[Session]
) -> None:
    # Given the invoice workflow (an HttpEndpoint for POST and PUT)
    write(folder / "invoice.json", fixture("invoice.json"))

    # When two registries load it, one after the other
    registry_for(settings, folder, factory).load()
    second = registry_for(settings, folder, factory)
    second.load()

    # Then there is one version row, under the file's id, and one trigger row per method
    assert rows(factory, "invoice-process") == [(1, "invoice-process-v1", True)]
    with factory() as session:
        triggers = session.scalars(select(models.Trigger).order_by(models.Trigger.hash)).all()
        indexed = sorted((t.name, t.activity_id, t.payload["method"]) for t in triggers)
    assert indexed == [
        ("Elsa.HttpEndpoint", "receive", "post"),
        ("Elsa.HttpEndpoint", "receive", "put"),
    ]
    found = second.for_request_type("invoiceprocess")
    assert found is not None
    assert found.version_id == "invoice-process-v1"


def test_a_change_publishes_version_two_and_version_one_stays_in_the_database(
    settings: Settings, folder: Path, factory: sessionmaker[Session]
) -> None:
    # Given version 1 published
    path = write(folder / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, folder, factory)
    registry.load()

    # When the file changes and the registry reloads
    write(path, with_text(fixture("invoice.json"), "version two"))
    registry.load()

    # Then version 2 is the latest row, version 1 is kept
    (v1, v2) = rows(factory, "invoice-process")
    assert v1 == (1, "invoice-process-v1", False)
    assert (v2[0], v2[2]) == (2, True)

    # And a process that never saw version 1 finds it by id in the database
    other = registry_for(settings, folder, factory)
    other.load()
    old = other.get_version("invoice-process-v1")
    assert old is not None
    assert old.version == 1
    assert old.document == fixture("invoice.json")
    current = other.for_request_type("InvoiceProcess")
    assert current is not None
    assert current.version_id == v2[1]


def test_reverting_a_file_makes_the_earlier_version_latest_again(
    settings: Settings, folder: Path, factory: sessionmaker[Session]
) -> None:
    # Given versions 1 and 2
    path = write(folder / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, folder, factory)
    registry.load()
    write(path, with_text(fixture("invoice.json"), "version two"))
    registry.load()

    # When the file goes back to its first content
    write(path, fixture("invoice.json"))
    registry.load()

    # Then no version is added and version 1 is the latest again
    assert [(v, latest) for v, _, latest in rows(factory, "invoice-process")] == [
        (1, True),
        (2, False),
    ]
    current = registry.for_request_type("InvoiceProcess")
    assert current is not None
    assert current.version == 1


def test_a_deleted_file_keeps_its_rows_for_running_instances(
    settings: Settings, folder: Path, factory: sessionmaker[Session]
) -> None:
    # Given a published workflow
    path = write(folder / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, folder, factory)
    registry.load()

    # When its file is deleted
    path.unlink()
    registry.load()

    # Then its request type is gone, but its version is still readable
    assert registry.for_request_type("InvoiceProcess") is None
    assert rows(factory, "invoice-process") == [(1, "invoice-process-v1", True)]
    assert registry_for(settings, folder, factory).get_version("invoice-process-v1") is not None


def test_a_draft_falls_back_to_the_newest_published_row(
    settings: Settings, folder: Path, factory: sessionmaker[Session]
) -> None:
    # Given a published version 1, then a draft saved over it
    path = write(folder / "invoice.json", fixture("invoice.json"))
    registry_for(settings, folder, factory).load()
    draft = with_text(fixture("invoice.json"), "draft")
    draft["isPublished"] = False
    write(path, draft)

    # When a fresh registry loads and asks for the published definition
    fresh = registry_for(settings, folder, factory)
    fresh.load()
    published = fresh.get_definition("invoice-process")

    # Then the database's version 1 answers
    assert published is not None
    assert (published.version, published.version_id) == (1, "invoice-process-v1")


def test_registries_publishing_the_same_change_concurrently_agree(
    settings: Settings, folder: Path, factory: sessionmaker[Session]
) -> None:
    # Given four registries (as four processes would have) that loaded version 1
    path = write(folder / "invoice.json", fixture("invoice.json"))
    registries = [registry_for(settings, folder, factory) for _ in range(4)]
    for registry in registries:
        registry.load()

    for round_number in range(2, 5):
        # When the file changes and all of them reload at the same moment
        write(path, with_text(fixture("invoice.json"), f"round {round_number}"))
        barrier = threading.Barrier(len(registries))
        errors: list[BaseException] = []

        def reload(
            registry: WorkflowRegistry,
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                barrier.wait(timeout=10)
                registry.load()
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=reload, args=(r,)) for r in registries]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

        # Then none failed, one row was added, and all serve that same version
        assert errors == []
        stored = rows(factory, "invoice-process")
        assert [v for v, _, _ in stored] == list(range(1, round_number + 1))
        assert [latest for _, _, latest in stored].count(True) == 1
        served = {r.for_request_type("InvoiceProcess") for r in registries}
        assert {(w.version, w.version_id) for w in served if w} == {(round_number, stored[-1][1])}


def test_a_worker_still_consumes_the_queue_of_a_workflow_whose_file_went_bad(
    settings: Settings, folder: Path, factory: sessionmaker[Session]
) -> None:
    # Given a workflow on its own queue, published, with a second workflow beside it
    document = fixture("invoice.json")
    document.setdefault("customProperties", {})["queue"] = "billing.slow"
    path = write(folder / "invoice.json", document)
    registry = registry_for(settings, folder, factory)
    registry.load()
    assert "billing.slow" in registry.queues()
    # When its file goes bad (as one does when a Python activity it uses gains a required
    # input) and a process starts with the folder as it is now
    path.write_text("{ not json", encoding="utf-8")
    restarted = registry_for(settings, folder, factory)
    restarted.load()
    # Then the workflow is no longer served, but its queue is still consumed: its instances'
    # steps (and their task-mode calls) still run
    assert restarted.for_request_type("InvoiceProcess") is None
    assert "billing.slow" in restarted.queues()
