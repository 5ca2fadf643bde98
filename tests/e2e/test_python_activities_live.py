"""A team's Python activities through the ingress, on a full stack: a request whose workflow uses
an inline and a task activity completes; a fault in a task activity leaves a dead letter that an
operator replays; a waiting activity is resumed by the event API."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.live import DEV, LiveStack, running_stack
from tests.support.services import PROJECT_ROOT
from tests.support.workflows import activity, flowchart, into, literal, write_workflow

pytestmark = pytest.mark.slow
EXAMPLE = PROJECT_ROOT / "examples" / "order-activities" / "workflows" / "place-order.json"
SAMPLES = "tests.integration.activities.sample_activities"


def fragile_order(down: Path) -> dict[str, object]:
    """Check stock inline, call the fragile service as a task, then wait for the shipment."""
    nodes = [
        activity("check", "Orders.CheckStock", sku=literal("SKU-1"), available=into("Available")),
        activity(
            "fragile",
            "Samples.Fragile",
            text=literal("parcel"),
            downWhile=literal(str(down)),
            echo=into("Echo"),
        ),
        activity("ship", "Orders.AwaitShipment", orderNumber=literal("ORD-7"), result=into("Ship")),
        activity(
            "out",
            "Elsa.SetOutput",
            outputName=literal("shipment"),
            outputValue={"expression": {"type": "JavaScript", "value": "[getEcho(), getShip()]"}},
        ),
    ]
    connections = [
        ("check", "InStock", "fragile"),
        ("fragile", "Done", "ship"),
        ("ship", "Done", "out"),
    ]
    return flowchart(
        "fragile-order",
        nodes,
        connections,
        request_type="FragileOrder",
        variables=("Available", "Echo", "Ship"),
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    root = tmp_path_factory.mktemp("python-activities")
    folder, down = root / "team-workflows", root / "fragile-is-down"
    folder.mkdir()
    shutil.copy(EXAMPLE, folder / EXAMPLE.name)
    write_workflow(folder, fragile_order(down))
    rules = [
        {"clientId": DEV, "requestType": name, "requiredKeys": keys, "allowAdditionalKeys": False}
        for name, keys in (("PlaceOrder", ["Sku"]), ("FragileOrder", []))
    ]
    types = root / "requestTypes.json"
    types.write_text(json.dumps({"requestTypes": rules}), encoding="utf-8")
    with running_stack(
        root,
        BROKER_WORKFLOW_PATHS=str(folder),
        BROKER_REQUEST_TYPES_FILE=str(types),
        BROKER_TASK_MODULES=f"tasks,{SAMPLES}",
    ) as running:
        running.down = down  # type: ignore[attr-defined]
        yield running


def test_an_order_runs_its_inline_and_task_activities_to_completion(stack: LiveStack) -> None:
    # Given a client submits an order whose workflow checks stock and prices inline, then charges
    # the card as its own task on the orders.payments queue
    request_id = stack.submit("PlaceOrder", {"Sku": "SKU-1"}, {"quantity": 3, "card": "tok_9999"})
    # Then it completes with the outputs of all three
    view = stack.wait_status(request_id, "Completed")
    assert view["result"] == {"status": "Charged", "total": 58.5, "chargeId": "ch_9999_5850"}


def test_a_faulted_task_activity_leaves_a_dead_letter_whose_replay_completes(
    stack: LiveStack,
) -> None:
    down: Path = stack.down  # type: ignore[attr-defined]
    down.touch()
    # Given the fragile service is down when the request's task activity runs
    request_id = stack.submit("FragileOrder")
    stack.wait_status(request_id, "Faulted")
    # Then a replayable request dead letter names the activity
    listing = stack.call(DEV, "GET", "/admin/dead-letters?kind=request&pageSize=500").body
    letter = next(d for d in listing["items"] if d["requestId"] == request_id)
    assert (letter["activityId"], letter["replayable"]) == ("fragile", True)
    # When the service is back and an operator replays it
    down.unlink()
    replayed = stack.call(DEV, "POST", f"/admin/dead-letters/{letter['id']}/replay")
    assert replayed.status == 200, replayed
    # Then the task runs again and the workflow waits for the shipment event
    stack.wait_suspended(request_id)
    # When the warehouse reports the shipment through the event API
    assert stack.event("ShipmentDispatched", request_id, {"carrier": "DHL"}).status == 202
    # Then the request completes with the task's output and the event's payload
    view = stack.wait_status(request_id, "Completed")
    assert view["result"] == {"shipment": ["PARCEL", {"carrier": "DHL"}]}
