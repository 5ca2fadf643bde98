"""The HTTP contract over real mutual TLS, against gunicorn started from the shipped configs."""

from __future__ import annotations

import http.client
import json
import ssl
from typing import Any

import pytest

from tests.e2e.conftest import CALLBACK_SECRET, Server
from tests.support.ingress import INVOICE_KEYS, signed_callback

pytestmark = pytest.mark.slow

HANDSHAKE_REFUSED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)


def invoice(**overrides: Any) -> dict[str, Any]:
    return {
        "requestType": "InvoiceProcess",
        "keys": dict(INVOICE_KEYS),
        "payload": {"amount": 250},
        **overrides,
    }


@pytest.fixture
def server(broker_server: Server) -> Server:
    return broker_server


def submit(server: Server, name: str = "ClientA", **overrides: Any) -> str:
    response = server.call(name, "POST", "/requests", invoice(**overrides))
    assert response.status == 202, response.body
    return str(response.body["correlationId"])


def test_accepted_submission_answers_202_location_and_body(server: Server) -> None:
    # Given ClientA's certificate and an allowed request type
    # When it submits
    response = server.call("ClientA", "POST", "/requests", invoice())
    # Then the request is queued and can be read back at its location
    assert response.status == 202
    assert response.body["status"] == "Queued"
    location = response.headers["Location"]
    assert location == f"/requests/{response.body['correlationId']}"
    record = server.call("ClientA", "GET", location)
    assert record.status == 200
    assert record.body["clientId"] == "ClientA"
    assert record.body["keys"] == INVOICE_KEYS


def test_tls12_client_is_accepted(server: Server) -> None:
    response = server.call("ClientA", "GET", "/request-types", tls12=True)
    assert response.status == 200


def test_unknown_certificate_is_401(server: Server) -> None:
    # Given a certificate of the right CA that is not allowlisted
    response = server.call("Stranger", "POST", "/requests", invoice())
    # Then the broker refuses to know it
    assert response.status == 401
    assert response.body["error"] == "Unknown client certificate"


def test_certificate_of_another_ca_fails_the_handshake(server: Server) -> None:
    # Given an allowlisted thumbprint on a certificate our CA never issued
    # When it connects, then the TLS handshake itself refuses it
    with pytest.raises(HANDSHAKE_REFUSED):
        server.call("Rogue", "GET", "/requests")


def test_connection_without_certificate_fails_the_handshake(server: Server) -> None:
    with pytest.raises(HANDSHAKE_REFUSED):
        server.call(None, "GET", "/requests")


@pytest.mark.parametrize("tls12", [False, True])
def test_expired_certificate_fails_the_handshake(server: Server, tls12: bool) -> None:
    # Given an allowlisted but expired certificate: the TLS layer itself refuses it (the app's
    # own validity check serves the proxy mode, where no handshake sees the certificate)
    with pytest.raises(ssl.SSLError, match=r"(?i)certificate.expired"):
        server.call("Expired", "GET", "/requests", tls12=tls12)


def test_wrong_client_for_request_type_gets_elsa_brokers_message(server: Server) -> None:
    response = server.call("ClientB", "POST", "/requests", invoice())
    assert response.status == 400
    assert response.body["error"] == "Unknown request type 'InvoiceProcess' for client 'ClientB'"


def test_missing_and_unexpected_keys_are_named(server: Server) -> None:
    missing = server.call("ClientA", "POST", "/requests", invoice(keys={"VendorCode": "V"}))
    unexpected = server.call(
        "ClientA", "POST", "/requests", invoice(keys={**INVOICE_KEYS, "Color": "red"})
    )
    assert (missing.status, missing.body["error"], missing.body["keys"]) == (
        400,
        "Missing required keys",
        ["InvoiceNumber"],
    )
    assert (unexpected.status, unexpected.body["error"], unexpected.body["keys"]) == (
        400,
        "Unexpected keys",
        ["Color"],
    )


def test_malformed_json_is_400(server: Server) -> None:
    response = server.call("ClientA", "POST", "/requests", raw=b'{"requestType": ')
    assert response.status == 400
    assert response.body["error"].startswith("Malformed JSON")


LIMIT = 1_048_576  # BROKER_MAX_BODY_BYTES of the e2e listeners (the default)


def _oversized(size: int) -> bytes:
    head, tail = b'{"requestType": "OpenType", "payload": {"x": "', b'"}}'
    body = head + b"x" * (size - len(head) - len(tail)) + tail
    assert len(body) == size
    return body


def test_oversized_bodies_are_413_with_json_every_time(server: Server) -> None:
    # Given bodies over the limit, from one byte over to five times it
    sizes = [LIMIT + 1, 1_100_000, 2 * LIMIT, 5 * LIMIT]
    conn = http.client.HTTPSConnection(
        "localhost", server.public_port, timeout=30, context=server.context("ClientA")
    )
    answers: list[tuple[int, int, bool, Any]] = []
    try:
        # When ClientA posts them 20 times in a row on one connection (it reopens the connection
        # only when the server asks it to), declared with a Content-Length and streamed in chunks
        for attempt in range(20):
            size, chunked = sizes[attempt % len(sizes)], attempt % 2 == 1
            big = _oversized(size)
            body: Any = (big[i : i + 65536] for i in range(0, size, 65536)) if chunked else big
            conn.request(
                "POST",
                "/requests",
                body=body,
                encode_chunked=chunked,
                headers={"Content-Type": "application/json"},
            )
            response = conn.getresponse()
            answers.append((size, response.status, chunked, json.loads(response.read())))
        # Then every one was answered 413 with the JSON error (a connection error fails the test)
        for size, status, chunked, document in answers:
            assert (size, chunked, status) == (size, chunked, 413)
            assert document == {
                "error": f"Request body exceeds {LIMIT} bytes",
                "code": "payload_too_large",
                "limit": LIMIT,
            }
        # And the connection is still good for a request within the limit
        conn.request("GET", "/request-types")
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def test_a_body_of_exactly_the_limit_is_read(server: Server) -> None:
    response = server.call("ClientA", "POST", "/requests", raw=_oversized(LIMIT))
    assert response.status == 202


def test_another_clients_record_is_403(server: Server) -> None:
    request_id = submit(server)
    response = server.call("ClientB", "GET", f"/requests/{request_id}")
    assert response.status == 403


def test_idempotent_retry_answers_the_same_record_and_another_body_conflicts(
    server: Server,
) -> None:
    headers = {"Idempotency-Key": "e2e-order-1"}
    first = server.call("ClientA", "POST", "/requests", invoice(), headers=headers)
    again = server.call("ClientA", "POST", "/requests", invoice(), headers=headers)
    other = server.call(
        "ClientA", "POST", "/requests", invoice(payload={"amount": 9}), headers=headers
    )
    assert first.status == 202
    assert again.status == 200
    assert again.body["correlationId"] == first.body["correlationId"]
    assert other.status == 409


def test_callback_unsigned_forged_and_signed(server: Server) -> None:
    # Given a request dispatched to a remote executor
    request_id = submit(server)
    attempt = server.dispatch(request_id)
    path = f"/internal/requests/{request_id}/result"
    done = {"status": "Completed", "result": {"approved": True}}
    # When callbacks arrive unsigned, with the secret itself, signed with a guessed token
    missing = server.internal("POST", path, done)
    secret = server.internal("POST", path, done, {"X-Callback-Secret": CALLBACK_SECRET})
    raw, forged = signed_callback("guess", request_id, attempt, done)
    guessed = server.internal("POST", path, headers=forged, raw=raw)
    # Then each is 401, and the executor's signed callback is accepted
    assert (missing.status, secret.status, guessed.status) == (401, 401, 401)
    assert server.callback(request_id, done, attempt=attempt).status == 204
    record = server.call("ClientA", "GET", f"/requests/{request_id}").body
    assert record["status"] == "Completed"
    assert record["result"] == {"approved": True}


def test_terminal_request_refuses_a_late_callback_and_stays_unchanged(server: Server) -> None:
    # Given a request completed by a callback
    request_id = submit(server)
    attempt = server.dispatch(request_id)
    assert (
        server.callback(request_id, {"status": "Completed", "result": 1}, attempt=attempt).status
        == 204
    )
    before = server.call("ClientA", "GET", f"/requests/{request_id}").body
    # When a late Faulted callback arrives, the first one is replayed, and the client cancels
    late = server.callback(request_id, {"status": "Faulted", "error": "boom"}, attempt=attempt)
    cancel = server.call("ClientA", "POST", f"/requests/{request_id}/cancel")
    # Then all are refused and the record did not change
    assert (late.status, cancel.status) == (409, 409)
    assert server.call("ClientA", "GET", f"/requests/{request_id}").body == before


def test_replayed_callback_is_401(server: Server) -> None:
    request_id = submit(server)
    attempt = server.dispatch(request_id)
    done = {"status": "Completed", "result": 1}
    first = server.callback(request_id, done, attempt=attempt, msg_id=f"msg-{request_id}")
    before = server.call("ClientA", "GET", f"/requests/{request_id}").body
    replay = server.callback(request_id, done, attempt=attempt, msg_id=f"msg-{request_id}")
    assert (first.status, replay.status) == (204, 401)
    assert server.call("ClientA", "GET", f"/requests/{request_id}").body == before


def test_callback_for_a_request_never_dispatched_is_401_and_changes_nothing(
    server: Server,
) -> None:
    # Given a request the broker's own workers run, and one that does not exist
    request_id = submit(server)
    before = server.call("ClientA", "GET", f"/requests/{request_id}").body
    # When callbacks signed as for a first dispatch arrive for them
    local = server.callback(request_id, {"status": "Completed"}, attempt=1)
    unknown = server.callback("nope", {"status": "Completed"}, attempt=1)
    # Then both are refused and the request is unchanged
    assert (local.status, unknown.status) == (401, 401)
    assert server.call("ClientA", "GET", f"/requests/{request_id}").body == before


def test_list_pages_with_a_cursor(server: Server) -> None:
    # Given three fresh requests of Admin (no other test submits as Admin)
    ids = [submit(server, "Admin", requestType="OpenType", keys={}) for _ in range(3)]
    # When Admin pages through two at a time
    first = server.call("Admin", "GET", "/requests?limit=2&requestType=OpenType").body
    second = server.call(
        "Admin", "GET", f"/requests?limit=2&requestType=OpenType&cursor={first['next']}"
    ).body
    # Then it sees all three, newest first, and the last page has no next
    seen = [i["correlationId"] for i in first["items"] + second["items"]]
    assert seen[:3] == list(reversed(ids))
    assert second["next"] is None


def test_events_history_and_cancel(server: Server) -> None:
    request_id = submit(server)
    cancel = server.call("ClientA", "POST", f"/requests/{request_id}/cancel")
    events = server.call("ClientA", "GET", f"/requests/{request_id}/events")
    assert cancel.status == 202
    assert cancel.body == {"correlationId": request_id, "status": "Cancelled"}
    assert [e["eventType"] for e in events.body] == ["RequestSubmitted", "RequestCancelled"]
    assert all(e["source"] and e["timestamp"] for e in events.body)


def test_admin_endpoints_check_scopes(server: Server) -> None:
    refused = server.call("ClientA", "GET", "/admin/dead-letters")
    allowed = server.call("Admin", "GET", "/admin/dead-letters")
    status = server.call("Admin", "GET", "/admin/workflow-runtime/status")
    assert refused.status == 403
    assert refused.body["scope"] == "read:dead-letters"
    assert allowed.status == 200
    assert allowed.body["items"] == []
    assert status.body["paused"] is False


def test_event_is_accepted(server: Server) -> None:
    response = server.call(
        "ClientA", "POST", "/events/Approved", {"correlationId": "any", "payload": {"ok": True}}
    )
    assert response.status == 202
    assert response.body["queueItemId"]


def test_internal_probes_and_metrics(server: Server) -> None:
    submit(server)
    health = server.internal("GET", "/healthz")
    ready = server.internal("GET", "/readyz")
    metrics = server.internal("GET", "/metrics")
    assert (health.status, health.body) == (200, {"status": "ok"})
    assert ready.status == 200
    assert ready.body["checks"] == {"database": "ok", "transport": "ok"}
    assert metrics.status == 200
    assert 'broker_requests_accepted_total{request_type="InvoiceProcess"}' in metrics.body


def test_openapi_document_is_served(server: Server) -> None:
    response = server.call("Stranger", "GET", "/openapi.json")
    assert response.status == 200
    assert "/requests" in response.body["paths"]
