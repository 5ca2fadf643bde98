"""The OpenAPI document against the app: generated calls to every operation, no 5xx, and every
response conforming to the documented status codes, content types and schemas.

In-process WSGI: the Admin client's certificate (every scope) is put into the environ the way the
peer-certificate middleware puts it there under gunicorn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy.orm import Session, sessionmaker

from broker.ingress import openapi
from broker.ingress.auth import PEER_CERT
from broker.store import db
from broker.store.models import (
    ActivityExecution,
    DeadLetter,
    Request,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WorkflowInstance,
)
from broker.wiring.web import create_public_app
from tests.support.ingress import make_pki, settings_for, write_config

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("schemathesis")
    pki = make_pki(root / "certs")
    broker_settings = settings_for(root / "var", pki, write_config(root / "config", pki))
    db.upgrade(broker_settings.database_url)
    app = create_public_app(broker_settings)
    der = pki.der("Admin")

    def with_certificate(
        environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        environ[PEER_CERT] = der
        return app(environ, start_response)

    _seed(db.make_session_factory(db.make_engine(broker_settings.database_url)))
    return schemathesis.openapi.from_wsgi("/openapi.json", with_certificate)


def _seed(factory: sessionmaker[Session]) -> None:
    """Records for the success paths: an instance with a journal, dead letters of each kind
    (one Faulted request among them, so its replay succeeds), webhook endpoints of the Admin
    client with a dead delivery."""
    with factory.begin() as session:
        for endpoint_id in ("wh_seed", "wh_gone"):
            session.add(
                WebhookEndpoint(
                    id=endpoint_id,
                    client_id="Admin",
                    client_key="admin",
                    url="http://93.184.216.34/hook",
                    events=["request.completed"],
                    secrets=["whsec_" + "A" * 43 + "="],
                    source="api",
                    enabled=False,
                    disabled_reason="every delivery failed",
                )
            )
        session.add(
            WebhookDelivery(
                id="delivery-1",
                message_id="msg_1",
                endpoint_id="wh_seed",
                request_id="faulted-1",
                event_type="request.completed",
                body="{}",
                state="dead",
                attempts=8,
            )
        )
        session.add(
            WebhookAttempt(
                delivery_id="delivery-1",
                endpoint_id="wh_seed",
                attempt=8,
                status_code=503,
                latency_ms=12,
                outcome="dead",
                error="the receiver answered 503",
            )
        )
        session.add(
            Request(
                id="faulted-1",
                client_id="Admin",
                client_key="admin",
                request_type="OpenType",
                request_type_key="opentype",
                keys={},
                status="Faulted",
                error_detail="boom",
                instance_id="instance-1",
            )
        )
        session.add(
            WorkflowInstance(
                id="instance-1",
                definition_id="open-type",
                definition_version_id="v1",
                version=1,
                request_id="faulted-1",
                status="Running",
                sub_status="Suspended",
            )
        )
        session.add(
            ActivityExecution(
                instance_id="instance-1",
                sequence=1,
                activity_id="receive",
                activity_type="Elsa.HttpEndpoint",
                event_name="Completed",
                payload={"secret": 1},
            )
        )
        for letter_id, kind, data in (
            ("bookmark-1", "bookmark", {"name": "Approved", "payload": {"secret": 1}}),
            ("bookmark-2", "bookmark", {"name": "Approved"}),
            ("request-1", "request", {"queue": "broker.default"}),
            ("outbox-1", "outbox", {"taskName": "broker.run_request", "args": {"x": 1}}),
            ("webhook-1", "webhook", {"deliveryId": "delivery-1", "endpointId": "wh_seed"}),
        ):
            session.add(
                DeadLetter(
                    id=letter_id,
                    kind=kind,
                    reason="Failed",
                    request_id="faulted-1",
                    instance_id="instance-1",
                    name="Approved",
                    error="failed",
                    attempts=3,
                    data=data,
                )
            )


SUCCESS_CASES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "/requests",
        "post",
        {
            "body": {"requestType": "OpenType", "keys": {"a": "b"}, "payload": {"n": 1}},
            "headers": {"Idempotency-Key": "schema-1"},
        },
    ),
    (
        "/requests",
        "post",
        {
            "body": {"requestType": "OpenType", "keys": {"a": "b"}, "payload": {"n": 1}},
            "headers": {"Idempotency-Key": "schema-1"},
        },
    ),
    ("/requests", "get", {"query": {"limit": 1, "status": "Faulted"}}),
    ("/requests/{id}", "get", {"path_parameters": {"id": "faulted-1"}}),
    ("/requests/{id}/events", "get", {"path_parameters": {"id": "faulted-1"}}),
    (
        "/events/{name}",
        "post",
        {
            "path_parameters": {"name": "Approved"},
            "body": {"correlationId": "faulted-1", "payload": {}},
        },
    ),
    ("/request-types", "get", {}),
    ("/admin/bookmark-queue/dead-letters", "get", {"query": {"page": 0, "pageSize": 1}}),
    ("/admin/bookmark-queue/dead-letters/{id}", "get", {"path_parameters": {"id": "bookmark-1"}}),
    (
        "/admin/bookmark-queue/dead-letters/{id}/replay",
        "post",
        {"path_parameters": {"id": "bookmark-1"}},
    ),
    (
        "/admin/bookmark-queue/dead-letters/{id}/replay",
        "post",
        {"path_parameters": {"id": "bookmark-1"}},
    ),
    (
        "/admin/bookmark-queue/dead-letters/{id}",
        "delete",
        {"path_parameters": {"id": "bookmark-2"}},
    ),
    ("/admin/dead-letters", "get", {"query": {"kind": "request"}}),
    ("/admin/dead-letters/{id}", "get", {"path_parameters": {"id": "outbox-1"}}),
    ("/admin/dead-letters/{id}/replay", "post", {"path_parameters": {"id": "request-1"}}),
    ("/admin/dead-letters/{id}/replay", "post", {"path_parameters": {"id": "outbox-1"}}),
    ("/admin/workflow-instances", "get", {"query": {"status": "Suspended"}}),
    ("/admin/workflow-instances/{id}", "get", {"path_parameters": {"id": "instance-1"}}),
    ("/admin/workflow-instances/{id}/journal", "get", {"path_parameters": {"id": "instance-1"}}),
    ("/admin/workflow-instances/{id}/cancel", "post", {"path_parameters": {"id": "instance-1"}}),
    ("/admin/workflow-instances/{id}/cancel", "post", {"path_parameters": {"id": "instance-1"}}),
    ("/admin/workflow-runtime/pause", "post", {}),
    ("/requests", "post", {"body": {"requestType": "OpenType"}}),
    ("/admin/workflow-runtime/resume", "post", {}),
    ("/admin/workflow-runtime/status", "get", {}),
    ("/requests/{id}/cancel", "post", {"path_parameters": {"id": "faulted-1"}}),
    ("/webhooks", "post", {"body": {"url": "http://93.184.216.34/hook"}}),
    ("/webhooks", "get", {}),
    ("/webhooks/{id}", "get", {"path_parameters": {"id": "wh_seed"}}),
    ("/webhooks/{id}/deliveries", "get", {"path_parameters": {"id": "wh_seed"}}),
    ("/webhooks/{id}/rotate-secret", "post", {"path_parameters": {"id": "wh_seed"}}),
    ("/admin/dead-letters", "get", {"query": {"kind": "webhook"}}),
    ("/admin/dead-letters/{id}/replay", "post", {"path_parameters": {"id": "webhook-1"}}),
    ("/webhooks/{id}", "delete", {"path_parameters": {"id": "wh_gone"}}),
    ("/openapi.json", "get", {}),
]


def test_success_paths_conform_to_the_document(api_schema: Any) -> None:
    # Given seeded records, when each documented operation succeeds (and its repeat conflicts),
    # then every answer conforms; the statuses show the calls really did what they say
    statuses: list[int] = []
    for path, method, parts in SUCCESS_CASES:
        case = api_schema[path][method].Case(**parts)
        # (the one intended 503, a submission while paused, is checked for conformance only)
        checks = CHECKS[1:] if path == "/requests" and len(statuses) == 22 else CHECKS
        statuses.append(case.call_and_validate(checks=checks).status_code)
    assert statuses == [
        202,
        200,
        200,
        200,
        200,
        202,
        200,
        200,
        200,
        200,
        409,
        204,
        200,
        200,
        200,
        200,
        200,
        200,
        200,
        202,
        409,
        200,
        503,
        200,
        200,
        409,
        201,
        200,
        200,
        200,
        200,
        200,
        200,
        204,
        200,
    ]


OPERATIONS = [
    (path, method)
    for path, item in openapi.PATHS.items()
    for method in item
    if method != "parameters"
]


@pytest.mark.parametrize(
    ("path", "method"), OPERATIONS, ids=[f"{m.upper()} {p}" for p, m in OPERATIONS]
)
def test_operation_conforms_to_the_document(api_schema: Any, path: str, method: str) -> None:
    # Given the documented operation, when schemathesis calls it with generated data,
    # then no answer is a 5xx or strays from the documented statuses, types and schemas
    operation = api_schema[path][method]

    @given(case=operation.as_strategy())
    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def call(case: Any) -> None:
        case.call_and_validate(checks=CHECKS)

    call()
