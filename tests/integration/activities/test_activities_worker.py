"""Python activities run by a real worker: inline and task mode in one workflow, the task on its
own queue, and a task's fault dead-lettered and replayed like a built-in's."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from broker.names import RUN_ACTIVITY
from broker.runtime import ids
from broker.runtime.admin import dead_letters as dead_letter_admin
from broker.runtime.requests.submission import Submission, submit
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import DeadLetter, OutboxRow, WorkflowInstance
from broker.wiring.runtime import make_publisher
from tests.support.runtime import event_types, prepare, runtime_env, wait_for_status
from tests.support.stack.process import Process
from tests.support.stack.roster import worker_process
from tests.support.workflows import activity, flowchart, into, literal, write_workflow

pytestmark = pytest.mark.slow
WAIT = 60.0
EXAMPLE = Path(__file__).parents[3] / "examples" / "order-activities" / "workflows"


@dataclasses.dataclass
class Stack:
    factory: sessionmaker[Session]
    registry: object
    worker: Process
    publisher: object
    down: Path  # while it exists, Samples.Fragile's service is down


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("activities")
    folder = root / "workflows"
    folder.mkdir()
    shutil.copy(EXAMPLE / "place-order.json", folder / "place-order.json")
    down = root / "fragile-is-down"
    fragile = activity(
        "fragile",
        "Samples.Fragile",
        text=literal("hello"),
        downWhile=literal(str(down)),
        echo=into("Echo"),
    )
    output = activity(
        "out",
        "Elsa.SetOutput",
        outputName=literal("echo"),
        outputValue={"expression": {"type": "Variable", "value": "Echo"}},
    )
    write_workflow(
        folder,
        flowchart(
            "fragile",
            [fragile, output],
            [("fragile", "Done", "out")],
            request_type="Fragile",
            variables=("Echo",),
        ),
    )
    env = runtime_env(
        root / "var",
        database_url=f"sqlite:///{root / 'broker.db'}",
        workflows=folder,
        BROKER_TASK_MODULES="tasks,tests.integration.activities.sample_activities",
    )
    settings = Settings.from_env(env)
    factory, registry = prepare(settings)
    worker = worker_process(env, root / "worker.log").start()
    try:
        yield Stack(factory, registry, worker, make_publisher(settings, factory), down)
    finally:
        worker.stop()
        registry.stop()  # type: ignore[attr-defined]


def submitted(stack: Stack, request_type: str, keys: dict[str, str], payload: object) -> str:
    published = stack.registry.for_request_type(request_type)  # type: ignore[attr-defined]
    with transaction(stack.factory) as session:
        done = submit(
            session,
            client_id="TestClient",
            submission=Submission(request_type=request_type, keys=keys, payload=payload),
            workflow=published,
        )
    stack.publisher.publish(done.outbox_ids)  # type: ignore[attr-defined]
    return done.request_id


def wait_status(stack: Stack, request_id: str, status: str) -> None:
    wait_for_status(stack.factory, request_id, status, tail=stack.worker.tail, timeout=WAIT)


def output_of(stack: Stack, request_id: str) -> object:
    with transaction(stack.factory, write=False) as session:
        found = session.get(WorkflowInstance, ids.instance_id_for_request(request_id))
        assert found is not None
        return found.output


def test_inline_and_task_activities_complete_an_order_with_the_task_on_its_queue(
    stack: Stack,
) -> None:
    # Given an order whose workflow checks stock and prices inline, then charges as a task
    request_id = submitted(
        stack, "PlaceOrder", {"Sku": "SKU-1"}, {"quantity": 2, "card": "tok_4242"}
    )
    # When the worker runs it
    wait_status(stack, request_id, "Completed")
    # Then the outputs of all three activities reached the workflow's output
    assert output_of(stack, request_id) == {
        "status": "Charged",
        "total": 39.0,
        "chargeId": "ch_4242_3900",
    }
    # And the charge ran as its own task, on the queue its declaration names
    with transaction(stack.factory, write=False) as session:
        rows = session.scalars(
            select(OutboxRow).where(
                OutboxRow.task_name == RUN_ACTIVITY,
                OutboxRow.instance_id == ids.instance_id_for_request(request_id),
            )
        ).all()
    assert [(row.queue, row.args["type_name"], row.state) for row in rows] == [
        ("orders.payments", "Orders.ChargeCard", "done")
    ]


def test_a_task_activity_that_raises_leaves_a_dead_letter_whose_replay_completes(
    stack: Stack,
) -> None:
    # Given the fragile activity's service is down
    stack.down.touch()
    request_id = submitted(stack, "Fragile", {}, {})
    # When its task raises, the request faults with a replayable dead letter naming it
    wait_status(stack, request_id, "Faulted")
    with transaction(stack.factory, write=False) as session:
        letter = session.scalars(
            select(DeadLetter).where(DeadLetter.request_id == request_id)
        ).one()
        assert (letter.kind, letter.activity_id, letter.replayable) == ("request", "fragile", True)
        assert "the fragile service is down" in str(letter.error)
    # When the service is back and an operator replays the dead letter
    stack.down.unlink()
    with transaction(stack.factory) as session:
        replayed = dead_letter_admin.replay(session, letter.id)
    stack.publisher.publish([replayed.new_id])  # type: ignore[attr-defined]
    # Then the activity runs again and the same request completes with its output
    wait_status(stack, request_id, "Completed")
    assert output_of(stack, request_id) == {"echo": "HELLO"}
    assert event_types(stack.factory, request_id)[-3:] == [
        "RequestFaulted",
        "RequestReplayed",
        "RequestCompleted",
    ]
