"""Property tests of the workflow loader: any JSON either loads or is refused with
``WorkflowDefinitionError`` (naming the file, the JSON path and the reason), never another error.

Two sources of documents: arbitrary JSON, and the shipped and fixture workflows with one part
replaced by arbitrary JSON or removed (which reaches deep into activities, connections and
expressions). The engine's parser (``parse_workflow``) and the registry's file loading
(``read_workflow_file``) are both checked; the registry must not have to mask a parser crash as
"the workflow parser failed".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.engine.model.definition import WorkflowDefinition
from broker.engine.parser import parse_workflow
from broker.errors import WorkflowDefinitionError
from broker.registry.files import WorkflowFile, read_workflow_file
from tests.support.services import PROJECT_ROOT

SOURCES = sorted(
    [
        *(PROJECT_ROOT / "tests" / "fixtures" / "workflows").glob("*.json"),
        *(PROJECT_ROOT / "workflows").glob("*.json"),
    ]
)
DOCUMENTS = {path.name: json.loads(path.read_text()) for path in SOURCES}
FUZZ = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TRIED: dict[str, int] = {}

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
    st.sampled_from(["", "Elsa.Sequence", "Elsa.Flowchart", "JavaScript", "Liquid", "Object"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=15,
)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\nworkflow loader fuzzing: {sum(TRIED.values())} documents ({TRIED})")


def parts(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value inside ``value`` (keys and list indexes)."""
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from parts(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from parts(child, (*path, index))


def replaced(document: Any, path: tuple[Any, ...], new: Any, *, remove: bool) -> Any:
    """A copy of ``document`` with the value at ``path`` replaced by ``new`` (or removed)."""
    if not path:
        return new
    copy = json.loads(json.dumps(document))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    if remove:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return copy


@st.composite
def mutated_workflows(draw: st.DrawFn) -> Any:
    """A shipped or fixture workflow with one to three parts replaced or removed."""
    document = DOCUMENTS[draw(st.sampled_from(sorted(DOCUMENTS)))]
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = list(parts(document))
        path = draw(st.sampled_from(paths[1:] if len(paths) > 1 else paths))
        remove = bool(path) and draw(st.booleans())
        document = replaced(document, path, None if remove else draw(VALUES), remove=remove)
    return document


def load(document: Any) -> WorkflowDefinition | None:
    """``parse_workflow``: a definition, or None for a ``WorkflowDefinitionError`` (anything
    else propagates and fails the test)."""
    refused: WorkflowDefinitionError | None = None
    try:
        return parse_workflow(document, file="fuzz.json")
    except WorkflowDefinitionError as exc:
        refused = exc
    assert refused.file == "fuzz.json"
    assert refused.path.startswith("$")
    assert refused.reason
    return None


def read(tmp_path: Path, document: Any) -> WorkflowFile | None:
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(document))
    refused: WorkflowDefinitionError | None = None
    try:
        return read_workflow_file(path)
    except WorkflowDefinitionError as exc:
        refused = exc
    assert "the workflow parser failed" not in refused.reason, refused.__cause__
    assert refused.file == str(path)
    return None


def test_every_source_workflow_loads_unchanged() -> None:
    # (the mutations start from documents that load, so a refusal comes from the mutation)
    assert len(DOCUMENTS) > 30
    for name, document in DOCUMENTS.items():
        assert load(document) is not None, name


@FUZZ
@given(document=VALUES)
def test_any_json_loads_or_is_refused_with_a_definition_error(document: Any) -> None:
    TRIED["any JSON"] = TRIED.get("any JSON", 0) + 1
    load(document)
    load({"definitionId": "d", "root": document})


@FUZZ
@given(document=mutated_workflows())
def test_a_mutated_workflow_loads_or_is_refused_with_a_definition_error(document: Any) -> None:
    TRIED["mutated"] = TRIED.get("mutated", 0) + 1
    load(document)


@FUZZ
@given(document=mutated_workflows())
def test_a_mutated_workflow_file_loads_or_is_refused_naming_the_file(
    tmp_path_factory: pytest.TempPathFactory, document: Any
) -> None:
    TRIED["mutated file"] = TRIED.get("mutated file", 0) + 1
    read(tmp_path_factory.getbasetemp(), document)
