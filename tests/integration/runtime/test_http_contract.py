"""One HTTP contract: the same table of answers (statuses, a refused connection, a timeout),
each with the route, the retries and the end Elsa's contract gives, runs through the authors'
kit (its HTTP table) and through production (the runtime, the outbound client and its guard,
a real server on 127.0.0.1), so the two cannot drift apart.

Each row's workflow is a FlowSendHttpRequest (or SendHttpRequest) whose ports lead to WriteLine
markers; what a side shows is the markers that completed, the calls made, the retries its
resilience strategy asked for, and how the run ended."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from broker.adapters.locks import FileLockProvider
from broker.engine.model.resilience import parse_strategies
from broker.engine.parser import parse_workflow
from broker.engine.testing import HttpAnswer, HttpTable, WorkflowTest
from broker.runtime import ids
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import ActivityExecution, Request, WorkflowInstance
from broker.wiring.runtime import Runtime
from tests.support.doubles import RecordingSender
from tests.support.runtime import drain, prepare, runtime_env, submit_request
from tests.support.scripted_http import ScriptedServer
from tests.support.services import free_port
from tests.support.workflows import activity, flowchart, literal, obj, resilient, write_workflow

#: the strategy the rows name (production: BROKER_RESILIENCE_STRATEGIES; the kit: strategies=)
STRATEGIES = (
    '[{"$type": "HttpResilienceStrategy", "id": "contract", "maxRetryAttempts": 2, '
    '"delay": "00:00:00"}]'
)
MARKERS = ("on-200", "on-unmatched", "on-failed", "on-timeout", "on-done")
KIT_BASE = "http://upstream.test"
#: the broker's own policy in the rows: two attempts, no delay (drain runs retries at once)
POLICY = {"maxAttempts": 2, "initialDelay": 0, "maxDelay": 0}


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table: what the server does, the workflow's shape, and what follows."""

    name: str
    answers: tuple[int | str, ...]  # statuses in turn; "connect" or "timeout" instead
    route: tuple[str, ...]  # the markers that complete, in order
    calls: int | None = 1  # calls the server sees (None: it sees none, nothing connects)
    retries: int = 0  # retries the resilience strategy asks for
    end: str = "Finished"  # Finished, or "policy-retry" (the broker's own policy retries)
    flow: bool = True  # FlowSendHttpRequest, else SendHttpRequest
    strategy: bool = False
    handled: bool = True  # the failure ports are connected (present)


TABLE = (
    Row("flow-200", (200,), ("on-200", "on-done")),
    Row("flow-404-unmatched", (404,), ("on-unmatched", "on-done")),
    # Elsa's contract: a 5xx is an answer, routed; nothing retries it without a strategy
    Row("flow-500-unmatched-no-retry", (500,), ("on-unmatched", "on-done")),
    Row("flow-503-no-strategy", (503, 200), ("on-unmatched", "on-done")),
    Row(
        "flow-503-retried-by-strategy",
        (503, 503, 200),
        ("on-200", "on-done"),
        calls=3,
        retries=2,
        strategy=True,
    ),
    Row(
        "flow-503-strategy-exhausted-routes-last-answer",
        (503,),
        ("on-unmatched", "on-done"),
        calls=3,
        retries=2,
        strategy=True,
    ),
    Row("flow-429-retried", (429, 200), ("on-200", "on-done"), calls=2, retries=1, strategy=True),
    Row("flow-409-retried", (409, 200), ("on-200", "on-done"), calls=2, retries=1, strategy=True),
    Row("flow-400-not-transient", (400,), ("on-unmatched", "on-done"), strategy=True),
    Row("flow-connect-handled", ("connect",), ("on-failed",), calls=None),
    Row(
        "flow-connect-retried-by-strategy-then-handled",
        ("connect",),
        ("on-failed",),
        calls=None,
        retries=2,
        strategy=True,
    ),
    Row("flow-timeout-handled", ("timeout",), ("on-timeout",)),
    # a timeout is not retried by the strategy (Elsa's handles HttpRequestException only)
    Row("flow-timeout-not-retried", ("timeout",), ("on-timeout",), strategy=True),
    Row(
        "flow-connect-unhandled-broker-retries",
        ("connect",),
        (),
        calls=None,
        end="policy-retry",
        handled=False,
    ),
    Row("plain-200", (200,), ("on-200", "on-done"), flow=False),
    Row("plain-500-unmatched", (500,), ("on-unmatched", "on-done"), flow=False),
    Row(
        "plain-503-retried-by-strategy",
        (503, 200),
        ("on-200", "on-done"),
        calls=2,
        retries=1,
        flow=False,
        strategy=True,
    ),
    Row("plain-500-no-port-completes", (500,), ("on-done",), flow=False, handled=False),
    Row("plain-connect-handled", ("connect",), ("on-failed", "on-done"), calls=None, flow=False),
    Row(
        "plain-connect-unhandled-broker-retries",
        ("connect",),
        (),
        calls=None,
        end="policy-retry",
        flow=False,
        handled=False,
    ),
)


def marker(activity_id: str) -> dict[str, Any]:
    return activity(activity_id, "Elsa.WriteLine", text=literal(activity_id))


def row_workflow(row: Row, url: str) -> dict[str, Any]:
    """The row's workflow calling ``url`` (a request type named after the row)."""
    request_type = "Contract" + row.name.replace("-", "")
    inputs: dict[str, Any] = {"url": literal(url), "method": literal("GET")}
    if "timeout" in row.answers:
        inputs["timeout"] = literal(0.3)
    if row.flow:
        call = activity("call", "Elsa.FlowSendHttpRequest", **inputs)
        call["expectedStatusCodes"] = obj([200])
        ports = [("200", "on-200"), ("Unmatched status code", "on-unmatched"), ("Done", "on-done")]
        if row.handled:
            ports += [("Failed to connect", "on-failed"), ("Timeout", "on-timeout")]
        nodes = [call, *(marker(m) for m in MARKERS)]
        connections = [("call", port, target) for port, target in ports]
    else:
        call = activity("call", "Elsa.SendHttpRequest", **inputs)
        call["expectedStatusCodes"] = [{"statusCode": 200, "activity": marker("on-200")}]
        if row.handled:
            call["unmatchedStatusCode"] = marker("on-unmatched")
            call["failedToConnect"] = marker("on-failed")
            call["timeout"] = marker("on-timeout")
        nodes, connections = [call, marker("on-done")], [("call", "Done", "on-done")]
    if row.strategy:
        nodes[0] = resilient(nodes[0], "contract")
    return flowchart(row.name, nodes, connections, request_type=request_type, retry=POLICY)


@dataclasses.dataclass(frozen=True)
class Seen:
    route: tuple[str, ...]
    calls: int | None
    retries: int
    end: str


def expected(row: Row) -> Seen:
    return Seen(row.route, row.calls, row.retries, row.end)


# The kit ------------------------------------------------------------------------------------------


def through_the_kit(row: Row) -> Seen:
    url = f"{KIT_BASE}/{row.name}"
    answers = [
        HttpAnswer(error=a) if isinstance(a, str) else HttpAnswer(status=a)  # type: ignore[arg-type]
        for a in row.answers
    ]
    table = HttpTable({url: answers})
    test = WorkflowTest(
        parse_workflow(row_workflow(row, url)),
        http=table,
        strategies=parse_strategies(STRATEGIES).values(),
    )
    run = test.submit()
    completed = [e.activity_id for e in run.journal if e.event_name == "Completed"]
    end = "policy-retry" if run.retry_pending is not None else run.status
    calls = len(table.calls) if row.calls is not None else None
    return Seen(tuple(a for a in completed if a in MARKERS), calls, len(run.strategy_retries), end)


# Production ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Production:
    rt: Runtime
    server: ScriptedServer
    closed_port: int


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Production]:
    root = tmp_path_factory.mktemp("contract")
    closed = free_port()  # nothing listens here: a refused connection
    with ScriptedServer() as server:
        for row in TABLE:
            url = server.url(f"/{row.name}")
            if "connect" in row.answers:
                url = f"http://127.0.0.1:{closed}/{row.name}"
            write_workflow(root / "wf", row_workflow(row, url))
            server.scripts[f"/{row.name}"] = [a for a in row.answers if isinstance(a, int)] or [200]
            if "timeout" in row.answers:
                server.slow[f"/{row.name}"] = 1.5
        dispose_engines()
        env = runtime_env(
            root / "var",
            database_url=f"sqlite:///{root / 'broker.db'}",
            workflows=root / "wf",
            BROKER_RESILIENCE_STRATEGIES=STRATEGIES,
        )
        settings = Settings.from_env(env)
        factory, registry = prepare(settings)
        rt = Runtime(
            settings,
            factory=factory,
            registry=registry,
            sender=RecordingSender(),
            locks=FileLockProvider(root / "locks"),
        )
        yield Production(rt, server, closed)
        dispose_engines()


def through_production(row: Row, production: Production) -> Seen:
    rt = production.rt
    request_type = "Contract" + row.name.replace("-", "")
    request_id = submit_request(rt.factory, rt.registry, request_type)
    drain(rt)
    instance_id = ids.instance_id_for_request(request_id)
    with transaction(rt.factory, write=False) as session:
        entries = session.scalars(
            select(ActivityExecution)
            .where(ActivityExecution.instance_id == instance_id)
            .order_by(ActivityExecution.sequence)
        ).all()
        status = session.scalar(select(Request.status).where(Request.id == request_id))
        instance = session.get_one(WorkflowInstance, instance_id)
        fault = instance.fault or {}
    completed = [e.activity_id for e in entries if e.event_name == "Completed"]
    strategy_retries = sum(
        1
        for e in entries
        if e.event_name == "RetryScheduled" and "resilience strategy" in json.dumps(e.payload)
    )
    if status == "Faulted" and fault.get("code") == "RetriesExhausted":
        end = "policy-retry"  # the broker's own policy retried until its attempts ran out
    else:
        end = "Finished" if status == "Completed" else str(status)
    calls = production.server.calls[f"/{row.name}"] if row.calls is not None else None
    return Seen(tuple(a for a in completed if a in MARKERS), calls, strategy_retries, end)


@pytest.mark.parametrize("row", TABLE, ids=[row.name for row in TABLE])
def test_the_kit_and_production_follow_the_same_http_contract(
    row: Row, production: Production
) -> None:
    # Given one line of the table, when it runs through the kit and through production,
    # then both show what the contract says: the route, the calls, the retries and the end
    assert through_the_kit(row) == expected(row), "the kit"
    assert through_production(row, production) == expected(row), "production"


def test_the_table_covers_every_kind_of_answer() -> None:
    # The table is not vacuous: it holds statuses routed, retried and exhausted, and failures
    # handled by a port, retried by a strategy and left to the broker's policy
    kinds = {(a if isinstance(a, str) else a // 100) for row in TABLE for a in row.answers}
    assert kinds >= {2, 4, 5, "connect", "timeout"}
    assert {row.end for row in TABLE} == {"Finished", "policy-retry"}
    assert any(row.retries and row.route[0] == "on-unmatched" for row in TABLE)
