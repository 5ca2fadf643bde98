"""The console's own views: requests with their diagram, dead letters with replay, runtime."""

from __future__ import annotations

import re

from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.store.models import Request, RequestEvent
from tests.support.console import WALKED
from tests.unit.console.conftest import Keys, RecordingPublisher


def test_the_request_page_shows_status_history_and_the_executed_path(
    client: FlaskClient, keys: Keys, invoice_request: str
) -> None:
    page = client.get(f"/requests/{invoice_request}", headers=keys.header("viewer"))
    text = page.get_data(as_text=True)
    assert page.status_code == 200
    assert 'id="request-status">Faulted' in text
    assert "approval service down" in text
    diagram = re.search(r'<pre class="mermaid" id="diagram">(.*?)</pre>', text, re.S)
    assert diagram is not None
    mermaid = diagram.group(1)
    assert mermaid.startswith("flowchart TD")
    executed = re.search(r"class (\S+) executed", mermaid)
    assert executed is not None
    assert set(executed.group(1).split(",")) == {a.replace("-", "_") for a in WALKED}
    assert "class wait_approval faulted" in mermaid
    assert "linkStyle" in mermaid
    assert "/console-assets/mermaid/mermaid.min.js" in text


def test_the_request_list_shows_every_clients_requests(
    client: FlaskClient, keys: Keys, invoice_request: str
) -> None:
    text = client.get("/requests", headers=keys.header("viewer")).get_data(as_text=True)
    assert f"/requests/{invoice_request}" in text
    filtered = client.get("/requests?status=Completed", headers=keys.header("viewer"))
    assert f"/requests/{invoice_request}" not in filtered.get_data(as_text=True)
    bad = client.get("/requests?status=Nope", headers=keys.header("viewer"))
    assert bad.status_code == 400
    assert "status must be one of" in bad.get_data(as_text=True)


def test_an_unknown_request_is_404(client: FlaskClient, keys: Keys) -> None:
    assert client.get("/requests/nope", headers=keys.header("viewer")).status_code == 404


def test_an_operator_replays_a_dead_letter_once(
    client: FlaskClient,
    keys: Keys,
    invoice_request: str,
    session_factory: sessionmaker[Session],
    publisher: RecordingPublisher,
) -> None:
    listing = client.get("/dead-letters", headers=keys.header("operator")).get_data(as_text=True)
    assert "dl-req-1" in listing
    assert "Replay" in listing
    assert "secret" not in listing
    # When the operator replays it
    response = client.post("/dead-letters/dl-req-1/replay", headers=keys.header("operator"))
    # Then the request is back to Processing and its new work was published
    assert response.status_code == 302
    with session_factory() as session:
        record = session.get(Request, invoice_request)
        assert record is not None
        assert record.status == "Processing"
        events = [e.event_type for e in session.query(RequestEvent).all()]
    assert events[-1] == "RequestReplayed"
    assert len(publisher.published) == 1
    # And a second replay is refused
    assert (
        client.post("/dead-letters/dl-req-1/replay", headers=keys.header("operator")).status_code
        == 409
    )


def test_viewers_see_no_replay_or_pause_buttons(
    client: FlaskClient, keys: Keys, invoice_request: str
) -> None:
    assert "Replay</button>" not in client.get(
        "/dead-letters", headers=keys.header("viewer")
    ).get_data(as_text=True)
    assert "runtime-toggle" not in client.get("/runtime", headers=keys.header("viewer")).get_data(
        as_text=True
    )


def test_an_operator_pauses_and_resumes_the_runtime(client: FlaskClient, keys: Keys) -> None:
    operator = keys.header("operator")
    assert client.post("/runtime/pause", headers=operator).status_code == 302
    assert 'id="runtime-state">paused' in client.get("/runtime", headers=operator).get_data(
        as_text=True
    )
    assert client.post("/runtime/resume", headers=operator).status_code == 302
    assert 'id="runtime-state">running' in client.get("/runtime", headers=operator).get_data(
        as_text=True
    )


def test_dead_letters_refuse_an_unknown_kind_or_page(client: FlaskClient, keys: Keys) -> None:
    assert client.get("/dead-letters?kind=nope", headers=keys.header("viewer")).status_code == 400
    assert client.get("/dead-letters?page=-1", headers=keys.header("viewer")).status_code == 400
