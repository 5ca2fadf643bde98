"""Studio's per-activity and per-variable settings: resilience, storage drivers, log persistence."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from broker.engine.parser import parse_workflow
from broker.errors import RetryLater, WorkflowDefinitionError
from tests.unit.engine.conftest import FIXTURES, Harness

INCLUDE = "Elsa.Workflows.LogPersistence.Strategies.Include, Elsa.Workflows.Core"


def document(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def test_an_inline_resilience_strategy_becomes_the_retry_policy_of_the_retry_row(
    harness: Harness,
) -> None:
    # Given an HTTP call with Elsa's HttpResilienceStrategy: 2 retries, 5 s apart (Constant)
    harness.http.failures.append(RetryLater("connect refused", delay=1))
    # When the call fails transiently
    first = harness.start("http-resilience")
    # Then the retry carries the mapped policy: 3 attempts in all, 5 s each
    assert first.retry is not None
    assert first.retry.policy == {"maxAttempts": 3, "initialDelay": 5.0, "maxDelay": 5.0}
    # And without a strategy the settings' policy applies (no per-activity policy)
    harness.http.failures.append(RetryLater("connect refused", delay=1))
    assert harness.start("http-call").retry.policy is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("strategy", "path", "reason"),
    [
        ({"mode": "Identifier", "strategyId": "fast"}, ".mode", "by identifier is not supported"),
        (
            {"mode": "Expression", "expression": {"type": "JavaScript", "value": "x"}},
            ".expression",
            "known at load",
        ),
        (
            {
                "mode": "Expression",
                "expression": {"type": "Object", "value": {"backoffType": "Linear"}},
            },
            ".expression.value.backoffType",
            "'Linear' is not supported",
        ),
        (
            {"mode": "Expression", "expression": {"type": "Object", "value": {"maxDelay": "1"}}},
            ".expression.value.maxDelay",
            "unsupported resilience setting",
        ),
    ],
)
def test_a_resilience_strategy_the_broker_cannot_honour_is_refused_at_load(
    strategy: dict[str, Any], path: str, reason: str
) -> None:
    changed = document("http-resilience")
    changed["root"]["activities"][1]["customProperties"]["resilienceStrategy"] = strategy
    with pytest.raises(WorkflowDefinitionError) as caught:
        parse_workflow(changed)
    where = "$.root.activities[1].customProperties.resilienceStrategy"
    assert caught.value.path == where + path
    assert reason in caught.value.reason


def test_a_memory_variable_is_not_kept_across_a_suspension(harness: Harness) -> None:
    # Given both variables set before an Event wait
    first = harness.start("memory-variable")
    assert first.write_lines == ("before: set set",)
    # When the instance is saved (JSON) and resumed
    [bookmark] = first.bookmarks
    saved = json.loads(json.dumps(first.state))
    done = harness.engine.resume(saved, bookmark_id=bookmark.id, input=None)
    # Then the instance-stored variable kept its value and the Memory one did not
    assert done.write_lines == ("after: set null",)


def test_an_unknown_storage_driver_is_refused_with_its_path() -> None:
    changed = document("memory-variable")
    changed["variables"][1]["storageDriverTypeName"] = "Acme.BlobStorageDriver, Acme"
    with pytest.raises(WorkflowDefinitionError) as caught:
        parse_workflow(changed)
    assert caught.value.path == "$.variables[1].storageDriverTypeName"


@pytest.mark.parametrize(
    ("setting", "refused"),
    [
        ({"logPersistenceMode": {"default": "Exclude", "inputs": {"text": "Inherit"}}}, None),
        ({"logPersistenceMode": {"default": "Include", "outputs": {"result": 2}}}, None),
        (
            {
                "logPersistenceConfig": {
                    "default": {"evaluationMode": "Strategy", "strategyType": INCLUDE}
                }
            },
            None,
        ),
        (
            {"logPersistenceMode": {"default": "Sometimes"}},
            "$.customProperties.logPersistenceMode.default",
        ),
        (
            {
                "logPersistenceConfig": {
                    "default": {"evaluationMode": "Strategy", "strategyType": "Acme.Keep, Acme"}
                }
            },
            "$.customProperties.logPersistenceConfig.default.strategyType",
        ),
        (
            {
                "logPersistenceConfig": {
                    "default": {"evaluationMode": "Expression", "expression": {}}
                }
            },
            "$.customProperties.logPersistenceConfig.default.evaluationMode",
        ),
    ],
)
def test_log_persistence_modes_are_honoured_or_refused(
    setting: dict[str, Any], refused: str | None
) -> None:
    # Include, Exclude and Inherit decide what the journal keeps; a mode the broker cannot honour
    # (unknown, or chosen by an expression) is refused at load, not guessed
    changed = copy.deepcopy(document("sequence"))
    changed["customProperties"] = setting
    if refused is None:
        parse_workflow(changed)
        return
    with pytest.raises(WorkflowDefinitionError) as caught:
        parse_workflow(changed)
    assert caught.value.path == refused
