"""Load-time checks: a file that would fault at run time is refused with its JSON path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from broker.cli.workflows import workflows
from broker.engine.parser import parse_workflow
from broker.engine.validation import WORKFLOW_OPTIONS, validate_document
from broker.errors import WorkflowDefinitionError
from broker.registry import WorkflowRegistry
from broker.settings import Settings, set_settings
from tests.support.services import CORPUS, PROJECT_ROOT

REFUSED = PROJECT_ROOT / "tests" / "fixtures" / "workflows" / "refused"
GOOD = PROJECT_ROOT / "tests" / "fixtures" / "workflows" / "sequence.json"

#: Each refused fixture: the JSON path named and a part of the reason.
CASES = {
    "unknown-activity-type.json": (
        "$.root.activities[1].type",
        "unknown activity type 'Elsa.Cronjob'",
    ),
    "unknown-expression-language.json": (
        "$.root.activities[0].text.expression.type",
        "unknown expression language 'CSharp'",
    ),
    "missing-port.json": ("$.root.connections[0].source.port", "has no port 'Approved'"),
    "missing-target.json": ("$.root.connections[0]", "unknown activity 'nowhere'"),
    "unsupported-option.json": (
        "$.options.commitStrategyName",
        "commit strategy 'WorkflowExecuting' is not supported",
    ),
    "unknown-option.json": ("$.options.retentionPolicy", "unsupported workflow option"),
    "bad-incident-strategy.json": ("$.options.incidentStrategyType", "IgnoreStrategy"),
    "bad-cron.json": (
        "$.root.activities[0].cronExpression.expression.value",
        "has 5 fields; Elsa's has 6, seconds first",
    ),
    "unknown-definition-activity.json": (
        "$.root.activities[0].type",
        "unknown activity type 'NoSuchChild'",
    ),
}


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def test_every_refused_fixture_has_a_case() -> None:
    assert sorted(p.name for p in REFUSED.glob("*.json")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"unknown-definition-activity.json"}))
def test_a_file_that_would_fault_at_run_time_is_refused_with_its_path(name: str) -> None:
    # Given a file the parser alone accepts (apart from a connection to nowhere)
    path, reason = CASES[name]
    # When it is validated
    with pytest.raises(WorkflowDefinitionError) as caught:
        validate_document(load(REFUSED / name), file=name)
    # Then the JSON path and the reason are named
    assert caught.value.path == path
    assert reason in caught.value.reason


@pytest.mark.parametrize("name", sorted(CASES))
def test_workflows_validate_prints_the_path_and_the_reason(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BROKER_WORKFLOW_PATHS", str(tmp_path))
    result = CliRunner().invoke(workflows, ["validate", str(REFUSED / name)])
    path, reason = CASES[name]
    assert result.exit_code == 1, result.output
    assert f"{path}: " in result.output
    assert reason in result.output


def test_workflows_validate_knows_the_teams_python_activities(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("order_activities", reason="the example package is not installed")
    example = PROJECT_ROOT / "examples" / "order-activities" / "workflows" / "place-order.json"
    monkeypatch.setenv("BROKER_WORKFLOW_PATHS", str(tmp_path))
    set_settings(None)
    try:
        # A workflow of the example's activities is valid where the package is installed
        result = CliRunner().invoke(workflows, ["validate", str(example)])
        assert result.exit_code == 0, result.output
        # and an activity module that does not import is an error, not a pass
        monkeypatch.setenv("BROKER_TASK_MODULES", "tasks,no_such_activity_module")
        set_settings(None)  # the command reads the settings again
        result = CliRunner().invoke(workflows, ["validate", str(example)])
        assert result.exit_code == 1, result.output
        assert "activity module 'no_such_activity_module' does not import" in result.output
    finally:
        set_settings(None)


def test_workflows_list_reports_a_refused_file_and_keeps_the_last_good_one(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a loaded good workflow
    folder = tmp_path / "wf"
    folder.mkdir()
    target = folder / "flow.json"
    document = load(GOOD)
    target.write_text(json.dumps(document), encoding="utf-8")
    registry = WorkflowRegistry(settings.replace(workflow_paths=(str(folder),)))
    registry.load()
    before = registry.get_definition(document["definitionId"])
    assert before is not None
    assert registry.problems == []
    # When it is saved with an activity type the broker does not know
    changed = copy.deepcopy(document)
    changed["root"]["activities"][0]["type"] = "Elsa.Parallelish"
    target.write_text(json.dumps(changed), encoding="utf-8")
    registry.load()
    # Then the file is reported with its path and the last good version stays
    assert [(p.file, p.reason) for p in registry.problems] == [
        (str(target), "$.root.activities[0].type: unknown activity type 'Elsa.Parallelish'")
    ]
    assert registry.get_definition(document["definitionId"]) == before


def test_a_definition_activity_resolves_against_the_other_loaded_files(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a parent using its child as an activity, and the child
    fixtures = PROJECT_ROOT / "tests" / "fixtures" / "workflows"
    folder = tmp_path / "wf"
    folder.mkdir()
    for name in ("composite-parent.json", "composite-child.json"):
        (folder / name).write_text((fixtures / name).read_text(encoding="utf-8"), "utf-8")
    registry = WorkflowRegistry(settings.replace(workflow_paths=(str(folder),)))
    registry.load()
    assert registry.problems == []
    # When the child goes away, the parent is refused (nothing to keep: it loaded with the child)
    (folder / "composite-child.json").unlink()
    registry.load()
    problems = registry.problems
    assert len(problems) == 1
    assert problems[0].file.endswith("composite-parent.json")
    assert "names workflow definition 'composite-child'" in problems[0].reason


def test_studio_strategy_type_names_are_understood() -> None:
    # Given the type names Studio writes for the incident strategies
    base = load(GOOD)
    for value, expected in (
        (
            "Elsa.Workflows.IncidentStrategies.ContinueWithIncidentsStrategy, Elsa.Workflows.Core",
            "continue",
        ),
        ("Elsa.Workflows.IncidentStrategies.FaultStrategy, Elsa.Workflows.Core", "fault"),
        ("Continue", "continue"),
    ):
        document = {**base, "options": {"incidentStrategyType": value}}
        # Then each validates and maps onto the engine's strategy
        assert validate_document(document, file=None).incident_strategy == expected


def test_the_corpus_and_the_fixtures_pass_validation() -> None:
    folders = [p.parent for p in CORPUS.glob("*/expected.json")] if CORPUS.is_dir() else []
    folders.append(PROJECT_ROOT / "tests" / "fixtures" / "workflows")
    folders.append(PROJECT_ROOT / "workflows")
    checked = 0
    for folder in folders:
        for path in sorted(folder.glob("*.json")):
            if path.name != "expected.json":
                validate_document(json.loads(path.read_text(encoding="utf-8-sig")), file=str(path))
                checked += 1
    assert checked > 40


def test_every_option_check_refuses_a_wrong_type() -> None:
    for key, check in WORKFLOW_OPTIONS.items():
        if key != "commitStrategyName":
            assert check(12345) is not None, key
    assert parse_workflow(load(GOOD)).options == {}


@pytest.mark.parametrize("kind", [["JavaScript"], {"name": "Liquid"}, 7])
def test_a_case_condition_whose_language_is_not_a_name_is_refused_with_its_path(kind: Any) -> None:
    # Given a Switch whose case condition names its language with something not a string
    document = load(REFUSED / "unknown-expression-language.json")
    document["root"]["activities"] = [
        {
            "id": "choose",
            "type": "Elsa.Switch",
            "cases": [{"label": "odd", "condition": {"type": kind, "value": "true"}}],
        }
    ]
    # When it is validated, then it is refused naming the path (not a TypeError)
    with pytest.raises(WorkflowDefinitionError) as caught:
        validate_document(document, file="odd-language.json")
    assert caught.value.path == "$.root.activities[0].cases[0].condition"
    assert "unknown expression language" in caught.value.reason
