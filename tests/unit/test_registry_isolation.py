"""A bad workflow file is refused alone (issue 34, finding 1): a definition nesting 950 or 200,000
levels deep, or one whose reading fails in any way, is named with its reason, in the registry's
problems and in the logs, while every other type keeps being served; from a folder scan and from
the watcher alike. And the nesting limit holds wherever a definition is parsed."""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import pytest

from broker.engine.parser import parse_workflow
from broker.errors import WorkflowDefinitionError
from broker.registry import WorkflowRegistry
from broker.registry import files as registry_files
from broker.settings import Settings
from tests.support.services import PROJECT_ROOT
from tests.support.workflows import DEEP_SHAPES, deep_definition_text

DEPTHS = (950, 200_000)
#: the nesting limit of every workflow load path: System.Text.Json's default, as Elsa reads
WORKFLOW_MAX_DEPTH = 64
WATCH_WITHIN = 10.0  # seconds (the watcher's contract is 2 s; a loaded machine gets more)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    found = tmp_path / "workflows"
    shutil.copytree(PROJECT_ROOT / "workflows", found)
    return found


def registry_over(settings: Settings, folder: Path) -> WorkflowRegistry:
    return WorkflowRegistry(settings.replace(workflow_paths=(str(folder),)), quiet=0.05)


@pytest.mark.parametrize("shape", DEEP_SHAPES)
@pytest.mark.parametrize("depth", DEPTHS)
def test_a_deep_file_is_refused_alone_and_every_other_type_is_served(
    settings: Settings,
    folder: Path,
    depth: int,
    shape: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given the shipped invoice workflow and, beside it, a definition nesting far too deep
    deep = folder / "deep.json"
    deep.write_text(deep_definition_text(depth, shape), encoding="utf-8")
    registry = registry_over(settings, folder)
    # When the registry loads the folder
    with caplog.at_level(logging.WARNING):
        registry.load()
    # Then the invoice type is served, the deep file is not, and it is named with a clear reason
    assert registry.for_request_type("InvoiceProcess") is not None
    assert registry.for_request_type("Deep") is None
    (problem,) = registry.problems
    assert problem.file == str(deep)
    assert f"nesting exceeds {WORKFLOW_MAX_DEPTH} levels" in problem.reason
    # ... in the logs too
    assert any(str(deep) in r.getMessage() and "nesting" in r.getMessage() for r in caplog.records)


def test_an_oversized_file_is_refused_alone_before_it_is_read(
    settings: Settings, folder: Path
) -> None:
    # Given, beside the shipped workflows, a valid definition padded past the file size limit
    big = folder / "big.json"
    padding = "x" * (registry_files.WORKFLOW_FILE_MAX_BYTES + 1)
    document = {"definitionId": "big", "name": "Big", "description": padding, "root": {}}
    big.write_text(json.dumps(document), encoding="utf-8")
    registry = registry_over(settings, folder)
    # When the registry loads the folder
    registry.load()
    # Then the big file alone is refused, naming its size, and the other types are served
    (problem,) = registry.problems
    assert problem.file == str(big)
    assert f"over the {registry_files.WORKFLOW_FILE_MAX_BYTES} a workflow file may hold" in (
        problem.reason
    )
    assert registry.for_request_type("InvoiceProcess") is not None


@pytest.mark.parametrize("depth", DEPTHS)
def test_the_watcher_refuses_a_deep_file_saved_while_it_runs(
    settings: Settings, folder: Path, depth: int
) -> None:
    # Given a watching registry serving the shipped invoice workflow
    registry = registry_over(settings, folder)
    registry.load()
    registry.watch()
    try:
        # When a definition nesting far too deep is saved into the folder
        (folder / "deep.json").write_text(deep_definition_text(depth), encoding="utf-8")
        deadline = time.monotonic() + WATCH_WITHIN
        while not registry.problems and time.monotonic() < deadline:
            time.sleep(0.05)
        # Then the reload names it and keeps serving everything else
        assert [Path(p.file).name for p in registry.problems] == ["deep.json"]
        assert "nesting" in registry.problems[0].reason
        assert registry.for_request_type("InvoiceProcess") is not None
    finally:
        registry.stop()


def test_a_file_whose_reading_fails_unexpectedly_is_refused_alone(
    settings: Settings,
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a file whose reading raises something no rule anticipated
    broken = folder / "broken.json"
    broken.write_text(deep_definition_text(10, definition_id="broken", request_type="Broken"))
    real = registry_files.parse_workflow_document

    def failing(document: object, *, file: str) -> registry_files.WorkflowFile:
        if file == str(broken):
            raise MemoryError("the reader ran out")
        return real(document, file=file)

    monkeypatch.setattr(registry_files, "parse_workflow_document", failing)
    registry = registry_over(settings, folder)
    # When the registry loads
    with caplog.at_level(logging.ERROR):
        registry.load()
    # Then that file alone is refused, named with the error, and logged with its traceback
    assert registry.for_request_type("InvoiceProcess") is not None
    assert [(p.file, p.reason) for p in registry.problems] == [
        (str(broken), "the file could not be loaded: MemoryError: the reader ran out")
    ]
    assert any(r.exc_info for r in caplog.records if str(broken) in r.getMessage())


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("version", 10**20, "must be from 1 to 2147483647"),
        ("definitionId", "d" * 201, "longer than 200 characters"),
        ("name", "n" * 201, "longer than 200 characters"),
    ],
)
def test_values_the_store_cannot_hold_are_refused_at_load(
    settings: Settings, folder: Path, field: str, value: object, reason: str
) -> None:
    # Given a file whose version or names are wider than the store's columns
    document = json.loads(deep_definition_text(10))
    document[field] = value
    (folder / "wide.json").write_text(json.dumps(document))
    registry = registry_over(settings, folder)
    # When the registry loads, then that file is refused with the reason, the rest is served
    registry.load()
    assert [Path(p.file).name for p in registry.problems] == ["wide.json"]
    assert reason in registry.problems[0].reason
    assert registry.for_request_type("InvoiceProcess") is not None


def test_the_engine_refuses_a_deep_document_before_walking_it() -> None:
    # Given a parsed document 950 levels deep (e.g. a stored version, or one built in code)
    document = {"definitionId": "deep", "root": {"type": "Elsa.Sequence", "activities": []}}
    node: dict[str, object] = document["root"]  # type: ignore[assignment]
    for n in range(950):
        child: dict[str, object] = {"id": f"s{n}", "type": "Elsa.Sequence", "activities": []}
        node["activities"] = [child]
        node = child
    # When the engine's parser is given it, then it refuses it by its depth, no RecursionError
    with pytest.raises(WorkflowDefinitionError, match=f"deeper than {WORKFLOW_MAX_DEPTH} levels"):
        parse_workflow(document, file="deep.json")


def test_a_definition_at_the_limit_loads_everywhere_without_running_out_of_stack(
    settings: Settings, folder: Path
) -> None:
    # Given a definition that nests exactly as deep as the limit allows, both ways
    for shape in DEEP_SHAPES:
        text = deep_definition_text(WORKFLOW_MAX_DEPTH - 6, shape, definition_id=f"at-{shape}")
        document = json.loads(text)
        document["customProperties"] = {}
        (folder / f"at-{shape}.json").write_text(json.dumps(document))
    registry = registry_over(settings, folder)
    # When it loads, then it is accepted (the limit refuses only what is deeper)
    registry.load()
    assert registry.problems == []
    assert {d.definition_id for d in registry.definitions()} >= {"at-activities", "at-value"}
