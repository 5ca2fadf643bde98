"""The console's own views: requests with their diagram, dead letters with replay, runtime."""

from __future__ import annotations

import re
import urllib.parse

from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.store.models import Request, RequestEvent
from tests.support.console import WALKED
from tests.unit.console.conftest import Keys, RecordingPublisher
from tests.unit.console.test_console_auth import csrf_of, sign_in


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


def test_an_operator_retries_a_faulted_request_from_its_page(
    client: FlaskClient,
    keys: Keys,
    invoice_request: str,
    session_factory: sessionmaker[Session],
    publisher: RecordingPublisher,
) -> None:
    # Given a faulted request: viewers see no Retry button, operators do
    viewer_page = client.get(f"/requests/{invoice_request}", headers=keys.header("viewer"))
    assert "Retry</button>" not in viewer_page.get_data(as_text=True)
    page = client.get(f"/requests/{invoice_request}", headers=keys.header("operator"))
    assert "Retry</button>" in page.get_data(as_text=True)
    assert (
        client.post(f"/requests/{invoice_request}/retry", headers=keys.header("viewer")).status_code
        == 403
    )
    # When the operator presses it
    response = client.post(f"/requests/{invoice_request}/retry", headers=keys.header("operator"))
    # Then the request is back to Processing through its dead letter, its work published
    assert response.status_code == 302
    with session_factory() as session:
        record = session.get(Request, invoice_request)
        assert record is not None
        assert record.status == "Processing"
        events = [e.event_type for e in session.query(RequestEvent).all()]
    assert events[-1] == "RequestReplayed"
    assert len(publisher.published) == 1
    # And a request that is no longer Faulted has no button, and a second retry says why
    again = client.post(f"/requests/{invoice_request}/retry", headers=keys.header("operator"))
    assert "not Faulted" in urllib.parse.unquote_plus(again.headers["Location"])
    page = client.get(f"/requests/{invoice_request}", headers=keys.header("operator"))
    assert "Retry</button>" not in page.get_data(as_text=True)


def test_the_retry_form_under_a_session_needs_the_csrf_token(
    client: FlaskClient, keys: Keys, invoice_request: str, session_factory: sessionmaker[Session]
) -> None:
    # Given an operator signed in through the form
    assert sign_in(client, apiKey=keys.operator) == 302
    # When the Retry form is posted without the token, it is refused and nothing changes
    assert client.post(f"/requests/{invoice_request}/retry").status_code == 400
    with session_factory() as session:
        record = session.get(Request, invoice_request)
        assert record is not None
        assert record.status == "Faulted"
    # And with the page's token it works
    token = csrf_of(client, f"/requests/{invoice_request}")
    response = client.post(f"/requests/{invoice_request}/retry", data={"csrf_token": token})
    assert response.status_code == 302


def test_the_instance_page_has_a_retry_button_for_operators_on_a_faulted_instance(
    client: FlaskClient, keys: Keys, invoice_request: str
) -> None:
    instance_path = f"/instances/inst-{invoice_request}"
    operator_page = client.get(instance_path, headers=keys.header("operator"))
    assert f'action="{instance_path}/retry"' in operator_page.get_data(as_text=True)
    viewer_page = client.get(instance_path, headers=keys.header("viewer"))
    assert "Retry</button>" not in viewer_page.get_data(as_text=True)
    assert client.post(f"{instance_path}/retry", headers=keys.header("designer")).status_code == 403
    # The seeded instance kept no state to resume: the retry says so instead of pretending
    response = client.post(f"{instance_path}/retry", headers=keys.header("operator"))
    assert response.status_code == 302
    assert "no saved state" in urllib.parse.unquote_plus(response.headers["Location"])
