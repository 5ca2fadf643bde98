"""The server and descriptor routes of the Elsa API, against Elsa's shapes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from broker.engine.activities.catalog import CATALOG
from broker.engine.activities.descriptors import spec_for
from broker.engine.expr.expressions import SUPPORTED_TYPES
from broker.engine.model.log_persistence import mode_of, policy_for
from broker.web.context import EXTENSION

Client = Callable[[str | None], FlaskClient]

LIST_ROUTES = [
    "/elsa/api/features/installed",
    "/elsa/api/descriptors/activities",
    "/elsa/api/descriptors/expression-descriptors",
    "/elsa/api/descriptors/variables",
    "/elsa/api/descriptors/storage-drivers",
    "/elsa/api/descriptors/workflow-activation-strategies",
    "/elsa/api/descriptors/incident-strategies",
    "/elsa/api/descriptors/log-persistence-strategies",
    "/elsa/api/descriptors/commit-strategies/workflows",
    "/elsa/api/descriptors/commit-strategies/activities",
]


def test_every_catalog_activity_has_a_descriptor() -> None:
    # Given the engine's catalog, Then each implementation class is described
    missing = sorted(t for t, b in CATALOG.items() if spec_for(b) is None)
    assert missing == []


@pytest.mark.parametrize("path", LIST_ROUTES)
def test_lists_answer_items_and_count(client_as: Client, path: str) -> None:
    response = client_as("viewer").get(path)
    assert response.status_code == 200
    body = response.get_json()
    assert set(body) == {"items", "count"}
    assert body["count"] == len(body["items"])


@pytest.mark.parametrize("path", [*LIST_ROUTES, "/elsa/api/package/version"])
def test_without_a_principal_the_api_answers_401(client_as: Client, path: str) -> None:
    assert client_as(None).get(path).status_code == 401


def test_package_version(client_as: Client) -> None:
    body = client_as("viewer").get("/elsa/api/package/version").get_json()
    assert isinstance(body["packageVersion"], str)


def test_activity_descriptors_cover_the_catalog_in_elsa_shape(client_as: Client) -> None:
    body = client_as("viewer").get("/elsa/api/descriptors/activities").get_json()
    by_type = {d["typeName"]: d for d in body["items"]}
    # Then every catalog type (aliases included) is described
    assert set(by_type) == set(CATALOG)
    decision = by_type["Elsa.FlowDecision"]
    assert decision["kind"] == "Action"
    assert decision["category"] == "Branching"
    assert decision["displayName"] == "Flow Decision"
    assert [(p["name"], p["type"]) for p in decision["ports"]] == [
        ("True", "Flow"),
        ("False", "Flow"),
    ]
    condition = decision["inputs"][0]
    assert condition["name"] == "Condition"
    assert condition["typeName"] == "Boolean"
    assert condition["isWrapped"] is True
    assert condition["uiHint"] == "singleline"
    assert by_type["Elsa.Event"]["kind"] == "Trigger"
    assert by_type["Elsa.Flowchart"]["isContainer"] is True
    assert by_type["Elsa.End"]["isTerminal"] is True
    # aliases render the designer's old files but are not offered in the picker
    assert by_type["Elsa.Http.HttpEndpoint"]["isBrowsable"] is False
    assert by_type["Elsa.HttpEndpoint"]["isBrowsable"] is True
    method = next(i for i in by_type["Elsa.SendHttpRequest"]["inputs"] if i["name"] == "Method")
    assert method["uiHint"] == "dropdown"
    items = method["uiSpecifications"]["dropdown"]["selectList"]["items"]
    assert {"text": "POST", "value": "POST"} in items


def test_one_activity_descriptor_by_type(client_as: Client) -> None:
    client = client_as("viewer")
    assert client.get("/elsa/api/descriptors/activities/Elsa.If").get_json()["name"] == "If"
    missing = client.get("/elsa/api/descriptors/activities/Elsa.Nope")
    assert missing.status_code == 404
    assert missing.get_json()["errors"]["generalErrors"]


def test_expression_descriptors_are_the_languages_the_engine_runs(client_as: Client) -> None:
    body = client_as("viewer").get("/elsa/api/descriptors/expression-descriptors").get_json()
    assert {d["type"] for d in body["items"]} == set(SUPPORTED_TYPES)
    js = next(d for d in body["items"] if d["type"] == "JavaScript")
    assert js["properties"] == {"MonacoLanguage": "javascript"}
    assert "CSharp" not in {d["type"] for d in body["items"]}


def test_variable_types_convert_values_as_the_engine_does(client_as: Client) -> None:
    from broker.engine.model.convert import convert

    body = client_as("viewer").get("/elsa/api/descriptors/variables").get_json()
    assert {"typeName", "displayName", "category", "description"} <= set(body["items"][0])
    names = {item["typeName"] for item in body["items"]}
    assert {"String", "Boolean", "Int32", "Object", "TimeSpan"} <= names
    assert convert("true", "Boolean") is True  # a listed type the engine converts


def test_features_installed_names_and_one_by_full_name(client_as: Client) -> None:
    client = client_as("viewer")
    items = client.get("/elsa/api/features/installed").get_json()["items"]
    full = items[0]["fullName"]
    assert client.get(f"/elsa/api/features/installed/{full}").get_json()["fullName"] == full
    assert client.get("/elsa/api/features/installed/Nope.Feature").status_code == 404


def test_log_persistence_strategies_start_with_what_the_journal_does_by_default(
    client_as: Client,
) -> None:
    # Studio shows the first strategy for a workflow that names none: it must be the default
    items = client_as("viewer").get("/elsa/api/descriptors/log-persistence-strategies")
    names = [s["displayName"] for s in items.get_json()["items"]]
    assert names[0] == "Include"
    # and what Studio saves for each choice is the mode the journal applies
    saved = [
        mode_of({"evaluationMode": "Strategy", "strategyType": s["typeName"]})
        for s in items.get_json()["items"]
    ]
    assert saved == names
    assert policy_for({}, {}).keeps("inputs", "anything")
    assert sorted(names) == ["Exclude", "Include", "Inherit"]


def test_the_resilience_strategies_are_listed_for_studios_resilience_tab(
    api_app: Flask, client_as: Client
) -> None:
    # Given two configured strategies
    strategies = (
        '[{"$type": "HttpResilienceStrategy", "id": "fast", "displayName": "Fast",'
        ' "maxRetryAttempts": 2, "delay": "00:00:00.5", "backoffType": "Constant"},'
        ' {"id": "slow", "delay": 60}]'
    )
    services = api_app.extensions[EXTENSION]
    api_app.extensions[EXTENSION] = dataclasses.replace(
        services, settings=services.settings.replace(resilience_strategies=strategies)
    )
    # When Studio lists them, then it gets Elsa's serialized strategies
    body = client_as("viewer").get("/elsa/api/resilience/strategies").get_json()
    assert body["count"] == 2
    assert body["items"][0] == {
        "$type": "HttpResilienceStrategy",
        "id": "fast",
        "displayName": "Fast",
        "maxRetryAttempts": 2,
        "useJitter": False,
        "delay": "00:00:00.5000000",
        "backoffType": "Constant",
    }
    assert body["items"][1]["delay"] == "00:01:00"
    # And the HTTP request activities are described as resilient, in category HTTP
    descriptors = client_as("viewer").get("/elsa/api/descriptors/activities").get_json()["items"]
    resilient = {d["typeName"] for d in descriptors if d["customProperties"].get("Resilient")}
    assert resilient == {
        "Elsa.SendHttpRequest",
        "Elsa.FlowSendHttpRequest",
        "Elsa.Http.SendHttpRequest",
    }
