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


def test_an_inline_resilience_strategy_retries_a_transient_status_and_waits_its_delay(
    harness: Harness,
) -> None:
    # Given an HTTP call with Elsa's HttpResilienceStrategy: 2 retries, 5 s apart (Constant,
    # with jitter), and a server answering 503
    harness.http.status = 503
    # When the call is answered
    first = harness.start("http-resilience")
    # Then the strategy asks for a retry of the call, about 5 s later (jitter: 3.75 to 6.25 s),
    # which the runtime waits exactly (its own policy does not count it)
    assert first.retry is not None
    assert first.retry.strategy == "fast"
    assert first.retry.activity_id == "call"
    assert first.retry.delay is not None
    assert 3.75 <= first.retry.delay <= 6.25
    assert first.retry.policy == {
        "maxAttempts": 1_000_000,
        "initialDelay": 0,
        "maxDelay": first.retry.delay,
    }
    # And once its retries are spent, the last 503 is routed (Unmatched status code, Done)
    second = harness.engine.retry(first.state)
    assert second.retry is not None
    third = harness.engine.retry(second.state)
    assert third.retry is None
    assert third.status == "Finished"
    assert len(harness.http.requests) == 3
    assert [r.attempt for r in harness.http.requests] == [0, 1, 2]


def test_without_a_strategy_a_status_is_routed_and_a_refused_connection_left_to_the_policy(
    harness: Harness,
) -> None:
    # Given the call without its strategy
    plain = document("http-resilience")
    del plain["root"]["activities"][1]["customProperties"]["resilienceStrategy"]
    definition = parse_workflow(plain)
    # When the server answers 503, then nothing retries: the answer is routed
    harness.http.status = 503
    routed = harness.engine.start(definition, instance_id="plain-1")
    assert (routed.status, routed.retry) == ("Finished", None)
    # And when the connection is refused (no Failed to connect port), the broker's retry policy
    # (the settings' one: no per-activity policy) retries it
    harness.http.failures.append(RetryLater("connect refused", reason="connect"))
    refused = harness.engine.start(definition, instance_id="plain-2")
    assert refused.retry is not None
    assert (refused.retry.strategy, refused.retry.policy) == (None, None)


@pytest.mark.parametrize(
    ("strategy", "path", "reason"),
    [
        ({"mode": "Identifier"}, ".strategyId", "strategyId must name a strategy"),
        ({"mode": "Sometimes", "strategyId": "x"}, ".mode", "is not Identifier or Expression"),
        (
            {
                "mode": "Expression",
                "expression": {"type": "Object", "value": {"id": "x", "backoffType": "Cubic"}},
            },
            ".expression.value",
            "backoffType must be one of Constant, Linear, Exponential",
        ),
        (
            {
                "mode": "Expression",
                "expression": {"type": "Object", "value": {"$type": "Acme", "id": "x"}},
            },
            ".expression.value",
            "is not 'HttpResilienceStrategy'",
        ),
    ],
)
def test_a_resilience_strategy_elsa_would_not_read_is_refused_at_load(
    strategy: dict[str, Any], path: str, reason: str
) -> None:
    changed = document("http-resilience")
    changed["root"]["activities"][1]["customProperties"]["resilienceStrategy"] = strategy
    with pytest.raises(WorkflowDefinitionError) as caught:
        parse_workflow(changed)
    where = "$.root.activities[1].customProperties.resilienceStrategy"
    assert caught.value.path == where + path
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    "strategy",
    [
        {"mode": "Identifier", "strategyId": "fast"},
        {"mode": 1, "expression": {"type": "JavaScript", "value": "'fast'"}},
        {"mode": "Expression", "expression": {"type": "Literal", "value": "fast"}},
    ],
)
def test_a_strategy_by_id_or_by_a_run_time_expression_loads(strategy: dict[str, Any]) -> None:
    changed = document("http-resilience")
    changed["root"]["activities"][1]["customProperties"]["resilienceStrategy"] = strategy
    parse_workflow(changed)


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
