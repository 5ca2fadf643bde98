"""The example workflow run with the authors' kit: the team's activities for real, or faked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import order_activities.activities  # noqa: F401  (declares the activities)

from broker.engine.testing import WorkflowTest

WORKFLOW = Path(__file__).parents[1] / "workflows" / "place-order.json"


def test_an_order_in_stock_is_priced_and_charged() -> None:
    run = WorkflowTest.from_file(WORKFLOW).submit(
        {"Sku": "SKU-1"}, {"quantity": 2, "card": "tok_4242"}
    )
    run.assert_finished().assert_output(status="Charged", total=39.0, chargeId="ch_4242_3900")
    run.assert_journal("check-stock:Completed", "price-order:Completed", "charge-card:Completed")


def test_an_order_out_of_stock_leaves_by_the_out_of_stock_outcome() -> None:
    run = WorkflowTest.from_file(WORKFLOW).submit(
        {"Sku": "SKU-2"}, {"quantity": 1, "card": "tok_4242"}
    )
    run.assert_finished().assert_output(status="OutOfStock")
    [checked] = [e for e in run.journal if e.activity_id == "check-stock" and e.outcome]
    assert (checked.outcome, checked.outputs) == ("OutOfStock", {"available": 0})


def test_a_declined_card_faults_the_order() -> None:
    run = WorkflowTest.from_file(WORKFLOW).submit({"Sku": "SKU-1"}, {"card": "tok_declined"})
    run.assert_faulted("the card was declined")


def test_the_payment_can_be_faked_and_sees_the_priced_total() -> None:
    charged: list[dict[str, Any]] = []

    def fake_charge(amount: float, card: str, details: dict[str, Any] | None) -> dict[str, Any]:
        charged.append({"amount": amount, "card": card, "details": details})
        return {"charge_id": "ch_fake"}

    flow = WorkflowTest.from_file(WORKFLOW, activities={"Orders.ChargeCard": fake_charge})
    run = flow.submit({"Sku": "SKU-1"}, {"quantity": 2, "card": "tok_1", "coupon": "welcome10"})
    run.assert_finished().assert_output(status="Charged", chargeId="ch_fake")
    assert charged == [{"amount": 35.1, "card": "tok_1", "details": {"sku": "SKU-1"}}]


def test_a_busy_gateway_is_retried_by_the_declared_policy() -> None:
    run = WorkflowTest.from_file(WORKFLOW).submit({"Sku": "SKU-1"}, {"card": "tok_busy"})
    assert run.retry_pending is not None
    assert run.retry_pending.policy == {"maxAttempts": 3, "initialDelay": 0.5, "maxDelay": 5}


def test_await_shipment_waits_for_the_warehouses_event(tmp_path: Path) -> None:
    # Given a workflow that waits for the shipment after the order
    document = {
        "id": "ship-v1",
        "definitionId": "ship",
        "version": 1,
        "isPublished": True,
        "root": {
            "id": "flow",
            "type": "Elsa.Flowchart",
            "activities": [
                {
                    "id": "await",
                    "type": "Orders.AwaitShipment",
                    "orderNumber": {"expression": {"type": "Literal", "value": "ORD-1"}},
                }
            ],
            "connections": [],
        },
    }
    path = tmp_path / "ship.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    run = WorkflowTest.from_file(path).start()
    # Then it suspends until the ShipmentDispatched event, whose payload becomes its result
    run.assert_waiting_for("await")
    run.deliver_event("ShipmentDispatched", {"carrier": "DHL"}).assert_finished()
    [done] = [e for e in run.journal if e.activity_id == "await" and e.event_name == "Completed"]
    assert done.outputs == {"orderNumber": "ORD-1", "result": {"carrier": "DHL"}}
