"""A watching registry picks up saved changes within 2 seconds, however the editor saves."""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.registry import WorkflowRegistry
from broker.settings import Settings
from tests.support.services import PROJECT_ROOT

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "registry"
LIVE_WITHIN = 2.0  # seconds: the contract for a saved change


def fixture(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return document


def invoice(text: str) -> str:
    document = copy.deepcopy(fixture("invoice.json"))
    document["root"]["activities"][1]["text"]["expression"]["value"] = text
    return json.dumps(document, indent=2)


class Watched:
    """A watching registry and a way to wait for what its reloads show."""

    def __init__(self, registry: WorkflowRegistry) -> None:
        self.registry = registry
        self._cond = threading.Condition()
        self.reloads = 0
        self.served: list[str | None] = []  # the InvoiceProcess text after every reload
        registry.add_listener(self._reloaded)

    def _reloaded(self) -> None:
        with self._cond:
            self.reloads += 1
            self.served.append(self.text())
            self._cond.notify_all()

    def text(self) -> str | None:
        found = self.registry.for_request_type("InvoiceProcess")
        if found is None:
            return None
        value: str = found.document["root"]["activities"][1]["text"]["expression"]["value"]
        return value

    def wait_for(self, check: Callable[[], bool], timeout: float = LIVE_WITHIN) -> bool:
        """Wait until ``check()`` holds after a reload, for at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not check():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "workflows"
    path.mkdir()
    (path / "invoice.json").write_text(invoice("one"), encoding="utf-8")
    return path


@pytest.fixture
def watch(settings: Settings, folder: Path) -> Iterator[Callable[[], Watched]]:
    started: list[WorkflowRegistry] = []

    def start() -> Watched:
        registry = WorkflowRegistry(settings.replace(workflow_paths=(str(folder),)))
        registry.load()
        watched = Watched(registry)
        registry.watch()
        started.append(registry)
        return watched

    yield start
    for registry in started:
        registry.stop()


def test_a_saved_change_is_live_within_two_seconds(
    watch: Callable[[], Watched], folder: Path
) -> None:
    # Given a watching registry serving version 1
    watched = watch()
    assert watched.text() == "one"

    # When the file is saved in place (truncate and write)
    (folder / "invoice.json").write_text(invoice("two"), encoding="utf-8")

    # Then version 2 is served within two seconds
    assert watched.wait_for(lambda: watched.text() == "two")
    found = watched.registry.for_request_type("InvoiceProcess")
    assert found is not None
    assert found.version == 2


def test_a_save_through_a_renamed_temporary_file_is_picked_up(
    watch: Callable[[], Watched], folder: Path
) -> None:
    # Given a watching registry
    watched = watch()

    # When an editor writes a temporary file and renames it over the workflow
    temporary = folder / ".invoice.json.tmp"
    temporary.write_text(invoice("renamed"), encoding="utf-8")
    os.replace(temporary, folder / "invoice.json")

    # Then the new content is served
    assert watched.wait_for(lambda: watched.text() == "renamed")


def test_a_delete_and_create_save_ends_with_the_new_content(
    watch: Callable[[], Watched], folder: Path
) -> None:
    # Given a watching registry
    watched = watch()

    # When an editor deletes the file and creates it again
    (folder / "invoice.json").unlink()
    (folder / "invoice.json").write_text(invoice("recreated"), encoding="utf-8")

    # Then the new content is served
    assert watched.wait_for(lambda: watched.text() == "recreated")


def test_a_half_written_file_never_unloads_the_good_version(
    watch: Callable[[], Watched], folder: Path
) -> None:
    # Given a watching registry
    watched = watch()
    path = folder / "invoice.json"

    # When the file is seen half written
    path.write_text(invoice("two")[:50], encoding="utf-8")
    assert watched.wait_for(lambda: bool(watched.registry.problems))

    # Then the good version is still served, and the completed file replaces it
    assert watched.text() == "one"
    path.write_text(invoice("two"), encoding="utf-8")
    assert watched.wait_for(lambda: watched.text() == "two" and not watched.registry.problems)
    assert None not in watched.served


def test_new_and_deleted_files_register_and_unregister(
    watch: Callable[[], Watched], folder: Path
) -> None:
    # Given a watching registry without an Approval workflow
    watched = watch()
    registry = watched.registry
    assert registry.for_request_type("Approval") is None

    # When a workflow file appears in a new subfolder
    (folder / "sub").mkdir()
    (folder / "sub" / "approval.json").write_text(json.dumps(fixture("approval.json")))

    # Then its request type is served, and when it is deleted again, no longer
    assert watched.wait_for(lambda: registry.for_request_type("Approval") is not None)
    (folder / "sub" / "approval.json").unlink()
    assert watched.wait_for(lambda: registry.for_request_type("Approval") is None)


def test_every_watching_registry_sees_the_change(
    watch: Callable[[], Watched], folder: Path
) -> None:
    # Given two registries watching the same folder (as two processes would)
    first, second = watch(), watch()

    # When the file changes, then both serve the new content
    (folder / "invoice.json").write_text(invoice("both"), encoding="utf-8")
    assert first.wait_for(lambda: first.text() == "both")
    assert second.wait_for(lambda: second.text() == "both")


def test_stop_ends_the_watch_threads(settings: Settings, folder: Path) -> None:
    # Given a registry that watched and stopped
    registry = WorkflowRegistry(settings.replace(workflow_paths=(str(folder),)))
    registry.watch()
    registry.stop()

    # Then no watcher thread is left running
    names = {t.name for t in threading.enumerate()}
    assert "workflow-watcher" not in names
