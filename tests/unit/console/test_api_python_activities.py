"""A team's Python activities in the Elsa API Studio reads: the toolbox's descriptors, and the
publishes refused with the activity and the input named."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import order_activities.activities  # noqa: F401  (declares the example's activities)
import pytest
from flask.testing import FlaskClient

from tests.support.services import PROJECT_ROOT

Client = Callable[[str | None], FlaskClient]
API = "/elsa/api/workflow-definitions"
EXAMPLE = PROJECT_ROOT / "examples" / "order-activities" / "workflows" / "place-order.json"


@pytest.fixture
def order_model() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    return document


def nodes(model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["id"]: node for node in model["root"]["activities"]}


def refusal(client: FlaskClient, model: dict[str, Any]) -> str:
    response = client.post(API, json={"model": model, "publish": True})
    assert response.status_code == 400, response.get_json()
    return str(response.get_json()["errors"]["generalErrors"][0])


def test_the_toolbox_lists_the_example_activities_under_their_category(client_as: Client) -> None:
    body = client_as("viewer").get("/elsa/api/descriptors/activities").get_json()
    by_type = {d["typeName"]: d for d in body["items"]}
    check = by_type["Orders.CheckStock"]
    assert (check["category"], check["displayName"], check["kind"]) == (
        "Orders",
        "Check stock",
        "Action",
    )
    assert [(i["name"], i["uiHint"]) for i in check["inputs"]] == [
        ("Sku", "singleline"),
        ("Quantity", "singleline"),
        ("Warehouse", "dropdown"),
    ]
    assert [p["name"] for p in check["ports"]] == ["InStock", "OutOfStock"]
    assert [o["name"] for o in check["outputs"]] == ["Available"]
    charge = by_type["Orders.ChargeCard"]
    assert charge["kind"] == "Task"
    assert {i["name"]: i["uiHint"] for i in charge["inputs"]}["Details"] == "json-editor"
    assert {d["category"] for t, d in by_type.items() if t.startswith("Orders.")} == {"Orders"}


def test_a_workflow_using_the_activities_publishes(
    client_as: Client, order_model: dict[str, Any]
) -> None:
    designer = client_as("designer")
    response = designer.post(API, json={"model": order_model, "publish": True})
    assert response.status_code == 200, response.get_json()
    published = designer.get(f"{API}/by-definition-id/place-order?versionOptions=Published")
    assert published.status_code == 200


def test_a_publish_missing_a_required_input_is_refused_naming_the_activity_and_input(
    client_as: Client, order_model: dict[str, Any]
) -> None:
    model = copy.deepcopy(order_model)
    del nodes(model)["charge-card"]["card"]
    message = refusal(client_as("designer"), model)
    assert "'charge-card' (Orders.ChargeCard) misses its required input 'Card'" in message


def test_a_publish_connecting_an_undeclared_outcome_is_refused(
    client_as: Client, order_model: dict[str, Any]
) -> None:
    model = copy.deepcopy(order_model)
    model["root"]["connections"][0]["source"]["port"] = "Backordered"
    message = refusal(client_as("designer"), model)
    assert "'check-stock' (Orders.CheckStock) has no port 'Backordered'" in message


def test_a_publish_using_an_unknown_activity_is_refused_naming_it(
    client_as: Client, order_model: dict[str, Any]
) -> None:
    model = copy.deepcopy(order_model)
    nodes(model)["price-order"]["type"] = "Orders.PriceOrdr"
    message = refusal(client_as("designer"), model)
    assert "Orders.PriceOrdr" in message
