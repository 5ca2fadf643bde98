"""The shipped invoice workflow, run through the engine with fake HTTP and mail."""

from __future__ import annotations

import json

from broker.engine.api import Engine, EngineServices
from broker.engine.model.lookup import DefinitionIndex
from broker.engine.parser import parse_workflow
from broker.engine.testing import HttpAnswer, WorkflowTest
from tests.support.services import PROJECT_ROOT
from tests.unit.engine.conftest import NOW, FakeHttp, FakeMailer

INVOICE = PROJECT_ROOT / "workflows" / "invoice-process.json"


def engine() -> tuple[Engine, FakeHttp, FakeMailer, object]:
    definition = parse_workflow(json.loads(INVOICE.read_text()), file=INVOICE.name)
    http, mailer = FakeHttp(), FakeMailer()
    services = EngineServices(http=http, mailer=mailer, clock=lambda: NOW)
    return Engine(DefinitionIndex([definition]), services), http, mailer, definition


def request(amount: int) -> dict[str, object]:
    return {"keys": {"InvoiceNumber": "INV-1", "VendorCode": "V-9"}, "payload": {"amount": amount}}


def test_invoice_file_declares_its_request_type() -> None:
    _, _, _, definition = engine()
    assert definition.request_type == "InvoiceProcess"  # type: ignore[attr-defined]


def test_small_invoice_is_posted_to_the_ledger_and_auto_approved() -> None:
    # Given an invoice under the auto-approve limit
    eng, http, mailer, definition = engine()
    # When it runs
    result = eng.start(
        definition,
        instance_id="req-1",
        input=request(250),  # type: ignore[arg-type]
        correlation_id="req-1",
    )
    # Then the ledger got one idempotent POST and the request completed
    assert result.sub_status == "Finished", result.fault
    [call] = http.requests
    assert (call.method, call.url) == ("POST", "http://127.0.0.1:8099/ledger")
    assert json.loads(call.body or b"") == {
        "invoiceNumber": "INV-1",
        "vendorCode": "V-9",
        "amount": 250,
    }
    assert call.idempotency_key
    assert call.idempotency_key.startswith("req-1:")
    assert result.output == {"status": "Completed", "decision": "auto-approved"}
    assert mailer.sent == []


def test_large_invoice_waits_for_approval_and_takes_its_decision() -> None:
    # Given an invoice over the limit
    eng, http, mailer, definition = engine()
    first = eng.start(
        definition,
        instance_id="req-2",
        input=request(5000),  # type: ignore[arg-type]
        correlation_id="req-2",
    )
    # Then AP got an e-mail and the instance waits for the approval event
    assert first.sub_status == "Suspended", first.fault
    assert [m.to for m in mailer.sent] == [("ap-team@example.com",)]
    [bookmark] = first.bookmarks
    assert dict(bookmark.payload) == {"eventName": "approval"}
    # When the approval arrives (after a trip through JSON)
    stored = json.loads(json.dumps(first.state))
    done = eng.resume(stored, bookmark_id=bookmark.id, input={"decision": "approved"})
    # Then the decision comes from the event payload and the ledger was not called
    assert done.sub_status == "Finished", done.fault
    assert done.output == {"status": "Completed", "decision": "approved"}
    assert http.requests == []


def test_bench_workflow_runs_five_activities_without_io() -> None:
    path = PROJECT_ROOT / "tests" / "perf" / "bench" / "bench-five-steps.json"
    definition = parse_workflow(json.loads(path.read_text()), file=path.name)
    result = Engine(DefinitionIndex([definition])).start(
        definition, instance_id="b-1", input=request(1)
    )
    assert definition.request_type == "BenchFiveSteps"
    assert result.output == {"status": "Completed"}
    assert len(definition.root.activities) == 5


def test_a_ledger_that_rejects_the_invoice_faults_the_workflow() -> None:
    # Given a ledger that answers 400 (not one of the expected statuses)
    eng, http, _, definition = engine()
    http.status = 400
    # When a small invoice runs
    result = eng.start(
        definition,
        instance_id="req-2",
        input=request(250),  # type: ignore[arg-type]
        correlation_id="req-2",
    )
    # Then the workflow faults with the ledger's code instead of auto-approving
    assert result.sub_status == "Faulted"
    assert result.fault is not None
    assert result.fault.code == "ledger_rejected"
    assert result.output != {"status": "Completed", "decision": "auto-approved"}


def test_a_busy_ledger_is_retried_by_the_posting_activitys_resilience_strategy() -> None:
    # Given a ledger that answers 503 twice, then accepts (the kit, as an author tests it)
    ledger = "POST http://127.0.0.1:8099/ledger"
    answers = [HttpAnswer(503), HttpAnswer(503), HttpAnswer(201)]
    run = WorkflowTest.from_file(INVOICE, http={ledger: answers}).submit(
        {"InvoiceNumber": "INV-1", "VendorCode": "V-9"}, {"amount": 250}
    )
    # Then the strategy retried the 503s (not the broker's policy) and the invoice was posted
    run.assert_finished().assert_output(decision="auto-approved")
    assert [r.strategy for r in run.strategy_retries] == ["ledger", "ledger"]
    # And a ledger that keeps answering 503 routes its last answer: rejected, not retried forever
    refused = WorkflowTest.from_file(INVOICE, http={ledger: [HttpAnswer(503)]}).submit(
        {"InvoiceNumber": "INV-2", "VendorCode": "V-9"}, {"amount": 250}
    )
    refused.assert_faulted()
    assert len(refused.strategy_retries) == 4
