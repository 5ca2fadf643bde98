"""HTTP activities in the authors' kit: an HttpEndpoint reached mid-workflow waits for its
request, a response needs a request to answer, resilience strategies retry statuses."""

from __future__ import annotations

from typing import Any

import pytest

from broker.engine.model.resilience import HttpStrategy, parse_strategies
from broker.engine.parser import parse_workflow
from broker.engine.testing import HttpAnswer, WorkflowTest
from tests.support.workflows import activity, flowchart, literal, obj, resilient, workflow

UPSTREAM = "http://upstream.test/data"


def endpoint(activity_id: str, path: str, *methods: str, start: bool = False) -> dict[str, Any]:
    node = activity(
        activity_id,
        "Elsa.HttpEndpoint",
        path=literal(path),
        supportedMethods=obj(list(methods or ("GET",))),
    )
    if start:
        node["customProperties"] = {"canStartWorkflow": True}
    return node


def respond(activity_id: str, content: Any, status: int = 200) -> dict[str, Any]:
    return activity(
        activity_id, "Elsa.WriteHttpResponse", content=literal(content), statusCode=literal(status)
    )


def test_an_http_endpoint_reached_mid_workflow_waits_for_its_request_and_answers_it() -> None:
    # Given Elsa's SimpleHttpApiWorkflow: an endpoint that starts it, then one it waits at
    document = workflow(
        "simple-http-api",
        [
            endpoint("start", "simple-http-api/start", start=True),
            endpoint("resume", "simple-http-api/resume"),
            respond("answer", "resumed"),
        ],
    )
    test = WorkflowTest(parse_workflow(document))
    # When the start path is called
    run = test.call_endpoint("GET", "simple-http-api/start")
    # Then the instance waits on the second endpoint: a bookmark for its path and method
    run.assert_waiting_for("resume")
    [bookmark] = run.bookmarks
    assert (bookmark.name, dict(bookmark.payload)) == (
        "Elsa.HttpEndpoint",
        {"path": "simple-http-api/resume", "method": "get"},
    )
    # When the resume path is called, then the workflow answers that call
    run.call_endpoint("GET", "/Simple-Http-Api/Resume/", query={"x": "1"})
    run.assert_finished()
    response = run.latest.http_response
    assert response is not None
    assert (response["statusCode"], response["content"]) == (200, "resumed")
    assert str(response["requestId"]).startswith("instance-1-http-")


def test_an_endpoint_waits_for_each_of_its_methods() -> None:
    run = WorkflowTest(
        parse_workflow(workflow("two", [endpoint("wait", "orders", "POST", "PUT")]))
    ).start()
    # Elsa's bookmark payloads: one per method, lower-cased
    assert sorted(b.payload["method"] for b in run.bookmarks) == ["post", "put"]
    run.call_endpoint("PUT", "orders", {"id": 7})
    run.assert_finished()


def test_write_http_response_without_a_request_to_answer_records_elsas_incident() -> None:
    # Given a workflow whose only activity answers an HTTP request, started by no request
    run = WorkflowTest(parse_workflow(workflow("lost", [respond("answer", "x")]))).start()
    # Then it faults, NoHttpContext in category HTTP, with Elsa's message as its incident
    run.assert_faulted("HTTP context was lost")
    fault = run.latest.fault
    assert fault is not None
    assert (fault.code, fault.category) == ("NoHttpContext", "HTTP")
    [incident] = run.latest.state["incidents"]
    assert (
        "background processing, virtual actor, or after a workflow transition"
        in (incident["message"])
    )


def test_a_submitted_request_is_the_request_a_response_answers() -> None:
    test = WorkflowTest(parse_workflow(workflow("answered", [respond("answer", {"ok": 1})])))
    run = test.submit(payload={"n": 1})
    run.assert_finished()
    assert run.output == {"ok": 1}


# Resilience --------------------------------------------------------------------------------------


def flow_call(**custom: Any) -> dict[str, Any]:
    call = activity("call", "Elsa.FlowSendHttpRequest", url=literal(UPSTREAM))
    call["expectedStatusCodes"] = obj([200])
    return {**call, **custom}


def lines_of(node: dict[str, Any], answers: list[HttpAnswer], **kwargs: Any) -> Any:
    markers = [
        activity(m, "Elsa.WriteLine", text=literal(m)) for m in ("ok", "unmatched", "failed")
    ]
    document = flowchart(
        "resilient",
        [node, *markers],
        [
            ("call", "200", "ok"),
            ("call", "Unmatched status code", "unmatched"),
            ("call", "Failed to connect", "failed"),
        ],
    )
    test = WorkflowTest(parse_workflow(document), http={UPSTREAM: answers}, **kwargs)
    return test, test.start()


def test_a_strategy_by_id_retries_transient_statuses_then_routes_the_answer() -> None:
    # Given Elsa's Resilience:Strategies test configuration (5 retries, 1 ms apart)
    strategies = parse_strategies(
        '[{"$type": "HttpResilienceStrategy", "Id": "test", "DisplayName": "Test",'
        ' "MaxRetryAttempts": "5", "Delay": "00:00:00.001"}]'
    )
    node = resilient(flow_call(), "test")
    answers = [HttpAnswer(429), HttpAnswer(503), HttpAnswer(200)]
    test, run = lines_of(node, answers, strategies=strategies.values())
    # Then two retries, attempt numbers 0 and 1, and the 200 routed
    assert run.lines == ["ok"]
    assert [r.strategy for r in run.strategy_retries] == ["test", "test"]
    assert [r.attempt for r in test.http.calls] == [0, 1, 2]
    # And every attempt carries the same Idempotency-Key (a retry is the same request)
    assert all(
        call.idempotency_key == test.http.calls[0].idempotency_key for call in test.http.calls
    )


def test_an_unknown_strategy_id_runs_without_retries() -> None:
    _, run = lines_of(resilient(flow_call(), "nowhere"), [HttpAnswer(503), HttpAnswer(200)])
    assert run.lines == ["unmatched"]
    assert run.strategy_retries == []


def test_a_strategy_written_inline_retries_a_refused_connection_but_not_a_timeout() -> None:
    node = resilient(flow_call(), maxRetryAttempts=1, delay="00:00:00")
    _, refused = lines_of(node, [HttpAnswer(error="connect")])
    assert (len(refused.strategy_retries), refused.lines) == (1, ["failed"])
    _, slow = lines_of(node, [HttpAnswer(error="timeout")])
    # (no Timeout port is connected: the broker's own policy retries it)
    assert slow.strategy_retries == []
    assert slow.retry_pending is not None


def test_the_obsolete_enable_resiliency_input_retries_eight_times() -> None:
    node = flow_call(enableResiliency=literal(True))
    test, run = lines_of(node, [HttpAnswer(500)])
    assert len(run.strategy_retries) == 8
    assert len(test.http.calls) == 9
    assert run.lines == ["unmatched"]


@pytest.mark.parametrize(
    ("backoff", "delays"),
    [("Constant", [2.0, 2.0, 2.0]), ("Linear", [2.0, 4.0, 6.0]), ("Exponential", [2.0, 4.0, 8.0])],
)
def test_retry_delays_follow_pollys_backoff(backoff: str, delays: list[float]) -> None:
    strategy = HttpStrategy("s", delay=2.0, backoff_type=backoff)
    assert [strategy.retry_delay(n) for n in range(3)] == delays
    jittered = HttpStrategy("j", delay=2.0, backoff_type="Constant", use_jitter=True)
    assert jittered.retry_delay(0, rand=lambda: 0.0) == 1.5
    assert jittered.retry_delay(0, rand=lambda: 1.0) == 2.5


def test_a_strategy_serializes_as_elsa_does() -> None:
    strategy = HttpStrategy("fast", "Fast", 2, False, 0.5, "Constant")
    assert strategy.to_json() == {
        "$type": "HttpResilienceStrategy",
        "id": "fast",
        "displayName": "Fast",
        "maxRetryAttempts": 2,
        "useJitter": False,
        "delay": "00:00:00.5000000",
        "backoffType": "Constant",
    }
