"""Regression tests for what the fuzzing of the public listener found (on SQLite and PostgreSQL).

- A NUL character in a path or query parameter reached PostgreSQL, which cannot compare a text
  with one: ``GET /requests/a%00b`` and eight other operations answered 500. Now 400 naming the
  parameter, before any lookup.
- ``POST /events/{name}`` accepted an event name holding control characters, which the document
  did not allow. Now 400, and the document says what an event name may hold.
- ``GET /requests?status=`` (an empty filter, taken as no filter) contradicted the document's
  enum. The document now declares that query values may be empty.
- gunicorn answers a request line over 4094 bytes with 414 (an HTML page) before the app sees it;
  the document now lists it (the live check is in ``tests/e2e/test_fuzz_mtls.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select

from broker.ingress import openapi
from broker.ingress.auth import PEER_CERT
from broker.store import db
from broker.store.models import BookmarkQueueItem
from broker.wiring.web import create_internal_app, create_public_app
from tests.support.ingress import Pki, make_pki, settings_for, write_config


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def admin(database_url: str, tmp_path: Path, pki: Pki) -> Iterator[tuple[FlaskClient, FlaskClient]]:
    settings = settings_for(
        tmp_path / "var",
        pki,
        write_config(tmp_path / "config", pki),
        BROKER_DATABASE_URL=database_url,
    )
    db.upgrade(database_url)
    factory = db.make_session_factory(db.make_engine(database_url))
    client = create_public_app(settings, session_factory=factory).test_client()
    client.environ_base[PEER_CERT] = pki.der("Admin")  # type: ignore[assignment]
    internal = create_internal_app(settings, session_factory=factory).test_client()
    yield client, internal
    db.dispose_engines()


NUL_CASES = [
    ("get", "/requests/a%00b", "request_id"),
    ("post", "/requests/a%00b/cancel", "request_id"),
    ("get", "/requests/a%00b/events", "request_id"),
    ("post", "/events/a%00b", "name"),
    ("get", "/requests?requestType=a%00b", "requestType"),
    ("get", "/requests?cursor=%00", "cursor"),
    ("get", "/admin/workflow-instances/a%00b", "instance_id"),
    ("get", "/admin/workflow-instances?definitionId=a%00", "definitionId"),
    ("get", "/admin/dead-letters/a%00", "letter_id"),
    ("get", "/admin/bookmark-queue/dead-letters?workflowInstanceId=a%00", "workflowInstanceId"),
    ("get", "/requests?x%00=1", "x\x00"),
]


def test_a_nul_in_a_path_or_query_parameter_is_400_naming_it_not_a_500(
    admin: tuple[FlaskClient, FlaskClient],
) -> None:
    client, _ = admin
    # When a parameter of each operation holds a NUL character
    answers = {
        url: getattr(client, method)(url, json={"correlationId": "c"})
        for method, url, _ in NUL_CASES
    }
    # Then each answer is 400 naming the parameter, not a 500 from the database
    found = {
        url: (answer.status_code, (answer.json or {}).get("field"))
        for url, answer in answers.items()
    }
    assert found == {url: (400, field) for _, url, field in NUL_CASES}
    assert all("NUL" in (answer.json or {}).get("error", "") for answer in answers.values())
    # And on the internal listener too, for a caller holding the callback secret
    callback = admin[1].post(
        "/internal/requests/a%00b/result",
        json={"status": "Completed"},
        headers={"X-Callback-Secret": "s3cret-callback"},
    )
    assert callback.status_code == 400


def test_an_event_name_with_control_characters_is_400_and_queues_nothing(
    admin: tuple[FlaskClient, FlaskClient], database_url: str
) -> None:
    client, _ = admin
    factory = db.make_session_factory(db.make_engine(database_url))
    response = client.post("/events/qy%F0%9C%B0%AA%0F", json={"correlationId": "c"})
    assert response.status_code == 400
    assert response.json is not None
    assert response.json["field"] == "name"
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(BookmarkQueueItem)) == 0
    # While a name with spaces and non-ASCII letters is fine, as Elsa allows
    assert (
        client.post("/events/Facture%20approuv%C3%A9e", json={"correlationId": "c"}).status_code
        == 202
    )


def test_an_empty_query_value_is_no_filter_as_the_document_says(
    admin: tuple[FlaskClient, FlaskClient],
) -> None:
    client, _ = admin
    assert client.get("/requests?status=&requestType=&limit=").status_code == 200
    parameters = openapi.PATHS["/requests"]["get"]["parameters"]
    assert all(p["allowEmptyValue"] for p in parameters)


def test_the_document_lists_gunicorns_414_for_every_operation() -> None:
    document = openapi.document()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method != "parameters" and path != "/openapi.json":
                assert "414" in operation["responses"], f"{method} {path}"
    assert "text/html" in document["components"]["responses"]["E414"]["content"]
