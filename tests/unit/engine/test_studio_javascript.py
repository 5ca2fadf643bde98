"""A workflow as Elsa Studio writes it, whose JavaScript uses Elsa's helpers end to end:
``variables.X`` read and written, ``get<Output>From<Activity>()`` reading an earlier activity's
outputs, RunJavaScript's ``setOutcome`` choosing its port, and the instance's correlation id and
name changed from a script (tests/fixtures/workflows/studio-js-helpers.json)."""

from __future__ import annotations

import json

from broker.engine.run.state import migrate
from tests.unit.engine.conftest import Harness


def test_studio_workflow_reads_and_writes_variables_and_earlier_outputs(
    harness: Harness,
) -> None:
    # Given the Studio file: Start -> HttpCall (200) -> Compute (RunJavaScript) -Paid-> Report
    # When it runs, the HTTP call answering 200 {"ok": true}
    result = harness.start("studio-js-helpers", correlation_id="request-1")
    # Then it finished through the Paid port, never the Failed one
    assert result.sub_status == "Finished", result.fault
    assert list(result.write_lines) == ["42 studio-js-helpers paid 200 order-42 Order 42 v2"]
    # And the script's variable writes, correlation id and name are in the saved state
    state = migrate(json.loads(json.dumps(result.state)))
    assert state["variables"]["OrderTotal"] == 42
    assert state["variables"]["Status"] == "paid"
    assert state["correlationId"] == "order-42"
    assert state["name"] == "Order 42 v2"
    assert [r.url for r in harness.http.requests] == ["http://127.0.0.1:8099/orders"]


def test_studio_workflow_takes_the_port_its_script_chose(harness: Harness) -> None:
    # Given the same file, started with input that makes the script choose the Failed outcome
    result = harness.start(
        "studio-js-helpers", correlation_id="request-2", input={"forceFail": True}
    )
    # Then RunJavaScript left through Failed only, after writing the variable
    assert result.sub_status == "Finished", result.fault
    assert list(result.write_lines) == ["payment failed"]
    assert result.state["variables"]["Status"] == "failed"
