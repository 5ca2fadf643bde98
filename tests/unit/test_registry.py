"""The workflow registry without a database: scanning, rules, versions, triggers."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from broker.errors import WorkflowDefinitionError
from broker.registry import WorkflowRegistry
from broker.registry.files import read_workflow_file
from broker.registry.triggers import index_triggers, trigger_hash
from broker.settings import Settings
from tests.support.services import PROJECT_ROOT

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "registry"


def fixture(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return document


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = document if isinstance(document, str) else json.dumps(document, indent=2)
    path.write_text(text, encoding="utf-8")
    return path


def registry_for(settings: Settings, *folders: Path) -> WorkflowRegistry:
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return WorkflowRegistry(settings.replace(workflow_paths=tuple(str(f) for f in folders)))


def with_request_type(document: dict[str, Any], request_type: str | None) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    props = changed.setdefault("customProperties", {})
    if request_type is None:
        props.pop("requestType", None)
    else:
        props["requestType"] = request_type
    return changed


def with_text(document: dict[str, Any], text: str) -> dict[str, Any]:
    """The invoice fixture with another WriteLine text: the same definition, new content."""
    changed = copy.deepcopy(document)
    changed["root"]["activities"][1]["text"]["expression"]["value"] = text
    return changed


# Scanning ----------------------------------------------------------------------------------------


def test_load_finds_workflows_in_nested_folders(settings: Settings, tmp_path: Path) -> None:
    # Given workflow files at several depths of one folder
    folder = tmp_path / "wf"
    write(folder / "invoice.json", fixture("invoice.json"))
    write(folder / "a" / "b" / "child.json", fixture("child.json"))
    write(folder / "a" / "notes.txt", "not a workflow")
    registry = registry_for(settings, folder)

    # When the registry loads
    registry.load()

    # Then every *.json file below the folder is a definition
    assert [w.definition_id for w in registry.definitions()] == ["invoice-child", "invoice-process"]
    assert registry.problems == []


def test_request_types_are_looked_up_case_insensitively(settings: Settings, tmp_path: Path) -> None:
    # Given a workflow for request type InvoiceProcess
    write(tmp_path / "wf" / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, tmp_path / "wf")
    registry.load()

    # When it is looked up in other spellings
    found = [registry.for_request_type(n) for n in ("InvoiceProcess", "invoiceprocess", "INVOICE")]

    # Then the first two find it, keeping the file's spelling, and a prefix does not
    assert found[0] is not None
    assert found[1] == found[0]
    assert found[0].request_type == "InvoiceProcess"
    assert found[2] is None


def test_a_file_with_a_byte_order_mark_loads(settings: Settings, tmp_path: Path) -> None:
    # Given a file saved with a UTF-8 BOM, as some Elsa exports are
    path = tmp_path / "wf" / "invoice.json"
    path.parent.mkdir()
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(fixture("invoice.json")).encode())
    registry = registry_for(settings, tmp_path / "wf")

    # When it loads, then it is registered
    registry.load()
    assert registry.for_request_type("InvoiceProcess") is not None


def test_a_workflow_without_request_type_is_a_definition_only(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a child workflow without customProperties.requestType
    write(tmp_path / "wf" / "child.json", fixture("child.json"))
    registry = registry_for(settings, tmp_path / "wf")

    # When the registry loads
    registry.load()

    # Then it is a definition on the default queue but serves no request type
    child = registry.get_definition("invoice-child")
    assert child is not None
    assert child.request_type is None
    assert child.queue == "broker.default"
    assert registry.request_types() == []


def test_queue_and_executor_come_from_custom_properties(settings: Settings, tmp_path: Path) -> None:
    # Given one workflow naming its queue and executor, and one naming neither
    write(tmp_path / "wf" / "approval.json", fixture("approval.json"))
    write(tmp_path / "wf" / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, tmp_path / "wf")

    # When the registry loads
    registry.load()

    # Then the named ones are kept, and the default queue derives from the request type
    approval = registry.for_request_type("approval")
    invoice = registry.for_request_type("invoiceprocess")
    assert approval is not None
    assert invoice is not None
    assert (approval.queue, approval.executor) == ("broker.approvals", "elsa")
    assert (invoice.queue, invoice.executor) == ("broker.invoiceprocess", "local")


# Problems ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{ not json", "malformed JSON"),
        ("", "the file is empty"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"root": {"type": "Elsa.Sequence", "id": "s"}}', "$.definitionId: is required"),
        ('{"definitionId": "x"}', "$.root: must be an activity object"),
        (
            '{"definitionId": "x", "version": "two", "root": {"type": "Elsa.Sequence"}}',
            "$.version: must be an integer",
        ),
        (
            '{"definitionId": "x", "customProperties": {"executor": "cobol"}, '
            '"root": {"type": "Elsa.Sequence"}}',
            "executor must be one of local, elsa",
        ),
        (
            '{"definitionId": "x", "customProperties": {"queue": "has space"}, '
            '"root": {"type": "Elsa.Sequence"}}',
            "queue name 'has space'",
        ),
    ],
)
def test_an_invalid_file_is_skipped_and_reported_with_file_and_reason(
    settings: Settings, tmp_path: Path, content: str, reason: str
) -> None:
    # Given a valid workflow next to an invalid file
    write(tmp_path / "wf" / "invoice.json", fixture("invoice.json"))
    bad = write(tmp_path / "wf" / "bad.json", content)
    registry = registry_for(settings, tmp_path / "wf")

    # When the registry loads
    registry.load()

    # Then the bad file is reported by name and reason, and the good one is loaded
    assert [p.file for p in registry.problems] == [str(bad)]
    assert reason in registry.problems[0].reason
    assert registry.for_request_type("InvoiceProcess") is not None


def test_a_file_that_turns_malformed_keeps_its_last_good_version(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a loaded workflow
    path = write(tmp_path / "wf" / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, tmp_path / "wf")
    registry.load()
    before = registry.for_request_type("InvoiceProcess")

    # When the file is half written and the registry reloads
    write(path, json.dumps(fixture("invoice.json"))[:40])
    registry.load()

    # Then the problem is reported but the last good version stays registered
    assert [p.file for p in registry.problems] == [str(path)]
    assert registry.for_request_type("InvoiceProcess") == before

    # And when the file is complete again, the problem is gone
    write(path, fixture("invoice.json"))
    registry.load()
    assert registry.problems == []
    assert registry.for_request_type("InvoiceProcess") == before


def test_a_missing_folder_is_reported(settings: Settings, tmp_path: Path) -> None:
    # Given a configured folder that does not exist
    registry = WorkflowRegistry(settings.replace(workflow_paths=(str(tmp_path / "nowhere"),)))

    # When the registry loads, then the folder is reported
    registry.load()
    assert registry.problems[0].file == str(tmp_path / "nowhere")


# Precedence --------------------------------------------------------------------------------------


def test_a_later_folder_wins_on_a_duplicate_request_type(
    settings: Settings, tmp_path: Path
) -> None:
    # Given two folders whose different definitions claim the same request type
    first, second = tmp_path / "base", tmp_path / "override"
    write(first / "invoice.json", fixture("invoice.json"))
    override = with_request_type(fixture("child.json"), "invoiceprocess")
    write(second / "invoice-v2.json", override)
    registry = registry_for(settings, first, second)

    # When the registry loads
    registry.load()

    # Then the later folder's workflow serves the request type, and that is no problem
    found = registry.for_request_type("InvoiceProcess")
    assert found is not None
    assert found.definition_id == "invoice-child"
    assert registry.problems == []


def test_a_later_folder_wins_on_a_duplicate_definition_id(
    settings: Settings, tmp_path: Path
) -> None:
    # Given the same definition in two folders with different content
    first, second = tmp_path / "base", tmp_path / "override"
    write(first / "invoice.json", fixture("invoice.json"))
    write(second / "invoice.json", with_text(fixture("invoice.json"), "overridden"))
    registry = registry_for(settings, first, second)

    # When the registry loads
    registry.load()

    # Then the later folder's file is the definition
    found = registry.get_definition("invoice-process")
    assert found is not None
    assert found.source_path == str(second / "invoice.json")


def test_two_files_of_one_folder_claiming_a_request_type_is_a_problem(
    settings: Settings, tmp_path: Path
) -> None:
    # Given two definitions in one folder claiming the same request type
    folder = tmp_path / "wf"
    write(folder / "a.json", fixture("invoice.json"))
    write(folder / "b.json", with_request_type(fixture("child.json"), "INVOICEPROCESS"))
    registry = registry_for(settings, folder)

    # When the registry loads
    registry.load()

    # Then the first in sorted order wins and the second is reported
    found = registry.for_request_type("InvoiceProcess")
    assert found is not None
    assert found.definition_id == "invoice-process"
    assert [p.file for p in registry.problems] == [str(folder / "b.json")]
    assert "already claimed" in registry.problems[0].reason


# Versions ----------------------------------------------------------------------------------------


def test_a_changed_file_publishes_version_two_and_version_one_stays_loadable(
    settings: Settings, tmp_path: Path
) -> None:
    # Given version 1 of a workflow
    path = write(tmp_path / "wf" / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, tmp_path / "wf")
    registry.load()
    v1 = registry.for_request_type("InvoiceProcess")
    assert v1 is not None

    # When its content changes and the registry reloads
    write(path, with_text(fixture("invoice.json"), "changed"))
    registry.load()

    # Then version 2 is the latest, with a new id, and version 1 is still found by its id
    v2 = registry.for_request_type("InvoiceProcess")
    assert v2 is not None
    assert (v1.version, v2.version) == (1, 2)
    assert v1.version_id == "invoice-process-v1"
    assert v2.version_id != v1.version_id
    assert v2.content_hash != v1.content_hash
    assert registry.get_version(v1.version_id) == v1


def test_reloading_unchanged_content_publishes_nothing(settings: Settings, tmp_path: Path) -> None:
    # Given a loaded workflow
    write(tmp_path / "wf" / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, tmp_path / "wf")
    registry.load()
    first = registry.for_request_type("InvoiceProcess")

    # When the registry reloads without changes, then the version is the same
    registry.load()
    assert registry.for_request_type("InvoiceProcess") == first


def test_the_files_own_version_is_used_when_higher(settings: Settings, tmp_path: Path) -> None:
    # Given a file that says it is version 3
    write(tmp_path / "wf" / "approval.json", fixture("approval.json"))
    registry = registry_for(settings, tmp_path / "wf")

    # When it loads, then it is version 3
    registry.load()
    found = registry.get_definition("approval")
    assert found is not None
    assert found.version == 3


def test_a_deleted_file_unregisters_its_request_type(settings: Settings, tmp_path: Path) -> None:
    # Given a loaded workflow
    path = write(tmp_path / "wf" / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, tmp_path / "wf")
    registry.load()
    loaded = registry.for_request_type("InvoiceProcess")
    assert loaded is not None

    # When its file is deleted and the registry reloads
    path.unlink()
    registry.load()

    # Then neither its request type nor its definition is served, but its version is kept
    assert registry.for_request_type("InvoiceProcess") is None
    assert registry.get_definition("invoice-process") is None
    assert registry.get_version(loaded.version_id) == loaded


def test_a_draft_falls_back_to_the_last_published_version(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a published version, then a draft of the same definition
    path = write(tmp_path / "wf" / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, tmp_path / "wf")
    registry.load()
    draft = with_text(fixture("invoice.json"), "draft")
    draft["isPublished"] = False
    write(path, draft)
    registry.load()

    # When the definition is asked for, published or latest
    published = registry.get_definition("invoice-process")
    latest = registry.get_definition("invoice-process", published=False)

    # Then the published one is version 1, the latest the draft
    assert published is not None
    assert latest is not None
    assert (published.version, published.published) == (1, True)
    assert (latest.version, latest.published) == (2, False)


def test_listeners_are_called_after_each_reload(settings: Settings, tmp_path: Path) -> None:
    # Given a registry with a listener
    write(tmp_path / "wf" / "invoice.json", fixture("invoice.json"))
    registry = registry_for(settings, tmp_path / "wf")
    seen: list[int] = []
    registry.add_listener(lambda: seen.append(len(registry.definitions())))

    # When it loads twice, then the listener saw the new view both times
    registry.load()
    registry.load()
    assert seen == [1, 1]


# Triggers ----------------------------------------------------------------------------------------


def test_an_http_endpoint_indexes_one_trigger_per_method_with_a_lower_cased_path() -> None:
    # Given the invoice workflow (HttpEndpoint, path Invoices/Submit, POST and PUT)
    # When its triggers are indexed
    triggers = index_triggers(fixture("invoice.json"))

    # Then there is one trigger per method, under the canonical name, with Elsa's payload
    assert [(t.activity_id, t.name, t.payload) for t in triggers] == [
        ("receive", "Elsa.HttpEndpoint", {"path": "invoices/submit", "method": "post"}),
        ("receive", "Elsa.HttpEndpoint", {"path": "invoices/submit", "method": "put"}),
    ]
    assert triggers[0].hash == trigger_hash("Elsa.HttpEndpoint", triggers[0].payload or {})


def test_aliases_events_and_timers_index_their_payloads() -> None:
    # Given a workflow starting on a SignalReceived alias and a Timer, with a non-starting Event
    # When its triggers are indexed
    triggers = index_triggers(fixture("approval.json"))

    # Then the signal is an event trigger by name and the timer carries its schedule;
    # the Event that cannot start the workflow is no trigger
    assert [(t.activity_id, t.name, t.payload) for t in triggers] == [
        ("approved", "Elsa.Event", {"eventName": "Approved"}),
        ("nightly", "Elsa.Timer", {"interval": "1.00:00:00"}),
    ]


def test_trigger_hashes_differ_by_name_and_payload() -> None:
    # Given the same payload under two names, and two payloads under one name
    hashes = {
        trigger_hash("Elsa.Event", {"eventName": "A"}),
        trigger_hash("Elsa.Timer", {"eventName": "A"}),
        trigger_hash("Elsa.Event", {"eventName": "B"}),
    }
    # Then all hashes differ, and key order does not change a hash
    assert len(hashes) == 3
    assert trigger_hash("x", {"a": 1, "b": 2}) == trigger_hash("x", {"b": 2, "a": 1})


def test_a_trigger_without_a_computable_payload_refuses_the_file(tmp_path: Path) -> None:
    # Given an HttpEndpoint that can start the workflow but whose path is JavaScript
    path = write(tmp_path / "computed-path.json", fixture("computed-path.json"))

    # When the file is read, then it is refused with Elsa's message, naming the activity
    with pytest.raises(WorkflowDefinitionError, match="Trigger should have a payload") as info:
        read_workflow_file(path)
    assert info.value.path == "$.root.activities[0]"
    assert "'receive'" in info.value.reason


def test_a_missing_path_is_a_placeholder_trigger() -> None:
    # Given an HttpEndpoint trigger without a path
    document = fixture("invoice.json")
    del document["root"]["activities"][0]["path"]

    # When its triggers are indexed, then the trigger is a placeholder
    (trigger, *_) = index_triggers(document)
    assert trigger.is_placeholder
    assert trigger.hash is None


def test_an_activity_that_registers_no_triggers_may_compute_its_payload(
    settings: Settings, tmp_path: Path
) -> None:
    # Given the computed-path workflow with the opt-out on its endpoint
    document = fixture("computed-path.json")
    document["root"]["activities"][0]["customProperties"]["registersTriggers"] = False
    write(tmp_path / "wf" / "computed-path.json", document)
    registry = registry_for(settings, tmp_path / "wf")

    # When the registry loads, then the file is accepted and indexes no trigger
    registry.load()
    assert registry.problems == []
    assert registry.for_request_type("ComputedPath") is not None
    assert index_triggers(document) == []


def test_legacy_property_lists_are_read_as_literals() -> None:
    # Given an Elsa 2 style activity whose inputs are a "properties" list
    document = {
        "definitionId": "legacy",
        "root": {
            "type": "Elsa.Flowchart",
            "id": "f",
            "activities": [
                {
                    "type": "Elsa.Http.HttpEndpoint",
                    "id": "http",
                    "canStartWorkflow": True,
                    "properties": [
                        {
                            "name": "Path",
                            "syntax": "Literal",
                            "expressions": {"Literal": "/Orders"},
                        },
                        {"name": "Methods", "syntax": "Json", "expressions": {"Json": '["GET"]'}},
                    ],
                }
            ],
        },
    }

    # When its triggers are indexed, then the literal values are used
    (trigger,) = index_triggers(document)
    assert trigger.payload == {"path": "/orders", "method": "get"}


def test_a_file_the_engine_parser_refuses_is_reported(settings: Settings, tmp_path: Path) -> None:
    # Given a flowchart whose connection names an activity that does not exist
    document = fixture("invoice.json")
    document["root"]["connections"][0]["target"]["activity"] = "nowhere"
    path = write(tmp_path / "wf" / "invoice.json", document)
    registry = registry_for(settings, tmp_path / "wf")

    # When the registry loads, then the parser's reason is reported with the JSON path
    registry.load()
    assert [p.file for p in registry.problems] == [str(path)]
    assert registry.problems[0].reason.startswith("$.root.connections[0]: ")
    assert "nowhere" in registry.problems[0].reason
    assert registry.for_request_type("InvoiceProcess") is None


def test_a_pascal_case_file_indexes_its_pascal_case_trigger_flag(tmp_path: Path) -> None:
    # Given the invoice workflow as an older export writes it: PascalCase property names and
    # the trigger flag as "CanStartWorkflow" in customProperties
    document = fixture("invoice.json")
    endpoint = document["root"]["activities"][0]
    flags = endpoint.setdefault("customProperties", {})
    flags.pop("canStartWorkflow", None)
    endpoint.pop("canStartWorkflow", None)
    flags["CanStartWorkflow"] = True
    pascal = {key[0].upper() + key[1:]: value for key, value in document.items()}
    path = write(tmp_path / "invoice.json", pascal)

    # When the file is read, Then its definition id and its endpoint's triggers are found
    wf = read_workflow_file(path)
    assert wf.definition_id == document["definitionId"]
    assert [(t.activity_id, t.name) for t in wf.triggers] == [
        ("receive", "Elsa.HttpEndpoint"),
        ("receive", "Elsa.HttpEndpoint"),
    ]


def test_supported_methods_written_as_json_text_index_each_method() -> None:
    # Given Elsa's literal list written as JSON text ("[\"GET\",\"POST\"]")
    document = fixture("invoice.json")
    endpoint = document["root"]["activities"][0]
    endpoint["supportedMethods"] = {
        "typeName": "List<String>",
        "expression": {"type": "Literal", "value": '["GET","POST"]'},
    }
    # When its triggers are indexed, Then there is one per method, as Elsa converts the text
    methods = sorted(t.payload["method"] for t in index_triggers(document) if t.payload)
    assert methods == ["get", "post"]
