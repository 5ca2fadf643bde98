"""The API client against the real public app, served over mutual TLS by werkzeug in a thread.

``live_broker`` is shared with the CLI tests: a generated PKI, allowlist files, a migrated SQLite
database and ``create_public_app`` behind a TLS socket that requires a client certificate. The
app reads the peer certificate from the socket exactly as under gunicorn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ssl
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy.orm import Session, sessionmaker
from werkzeug.serving import make_server

from broker.cli.apiclient import UNREACHABLE, BrokerApi, default_endpoint, error_from, http_status
from broker.errors import (
    BadRequest,
    BrokerError,
    ConfigError,
    Conflict,
    Forbidden,
    NotFound,
    Unauthenticated,
)
from broker.settings import Settings
from broker.store import db
from broker.store.models import DeadLetter, WorkflowInstance, utcnow
from broker.wiring.web import create_public_app
from tests.support.ingress import INVOICE_KEYS, Pki, make_pki, settings_for, write_config
from tests.support.services import free_port

StartResponse = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class LiveBroker:
    pki: Pki
    settings: Settings
    session_factory: sessionmaker[Session]
    url: str

    def client(self, name: str = "ClientA") -> BrokerApi:
        return BrokerApi(
            self.url, cert=self.pki.pem(name), key=self.pki.key(name), ca=self.pki.ca, timeout=10
        )

    def options(self, name: str = "ClientA") -> list[str]:
        """The CLI's connection options for ``name``'s certificate."""
        return [
            "--url", self.url, "--cert", str(self.pki.pem(name)),
            "--key-file", str(self.pki.key(name)), "--ca", str(self.pki.ca),
        ]  # fmt: skip


def _peer_socket(app: Any) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    # gunicorn puts the SSL socket in environ["gunicorn.socket"]; werkzeug calls it
    # "werkzeug.socket". The app's middleware then reads the verified peer certificate from it.
    def wsgi(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        environ["gunicorn.socket"] = environ.get("werkzeug.socket")
        result: Iterable[bytes] = app(environ, start_response)
        return result

    return wsgi


@contextlib.contextmanager
def live_broker(root: Path) -> Iterator[LiveBroker]:
    """The public app on a free loopback port with mutual TLS; stopped on exit."""
    pki = make_pki(root / "certs")
    settings = settings_for(root / "var", pki, write_config(root / "config", pki))
    (root / "var").mkdir()
    db.upgrade(settings.database_url)
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.folder / "server.pem", pki.folder / "server.key")
    context.load_verify_locations(pki.ca)
    context.verify_mode = ssl.CERT_REQUIRED
    app = create_public_app(settings, session_factory=factory)
    port = free_port()
    server = make_server("127.0.0.1", port, _peer_socket(app), threaded=True, ssl_context=context)
    thread = threading.Thread(target=server.serve_forever, name="live-broker", daemon=True)
    thread.start()
    try:
        yield LiveBroker(pki, settings, factory, f"https://127.0.0.1:{port}")
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
        db.dispose_engines()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBroker]:
    with live_broker(tmp_path_factory.mktemp("live")) as broker:
        yield broker


@pytest.fixture
def api(live: LiveBroker) -> Iterator[BrokerApi]:
    with live.client() as client:
        yield client


def add_rows(live: LiveBroker, *rows: Any) -> None:
    with db.transaction(live.session_factory) as session:
        session.add_all(rows)


def bookmark_letter(**overrides: Any) -> DeadLetter:
    letter_id = str(uuid.uuid4())
    values: dict[str, Any] = {
        "id": letter_id, "kind": "bookmark", "reason": "Failed", "name": "Approve",
        "data": {"name": "Approve", "correlationId": letter_id}, "attempts": 3,
        "error": "no bookmark matched", "replayable": True, "created_at": utcnow(),
    }  # fmt: skip
    values.update(overrides)
    return DeadLetter(**values)


# Requests -----------------------------------------------------------------------------------------


def test_submit_then_get_round_trips_the_record(api: BrokerApi) -> None:
    # Given an allowed request type
    # When ClientA submits it
    submitted = api.submit("InvoiceProcess", INVOICE_KEYS, {"amount": 250})
    # Then the request is new and queued, and reads back with its keys
    assert submitted.created is True
    assert submitted.status == "Queued"
    record = api.get(submitted.correlation_id)
    assert record["keys"] == INVOICE_KEYS
    assert record["clientId"] == "ClientA"


def test_a_repeated_idempotency_key_answers_the_first_record(api: BrokerApi) -> None:
    key = str(uuid.uuid4())
    first = api.submit("OpenType", {"a": "1"}, idempotency_key=key)
    again = api.submit("OpenType", {"a": "1"}, idempotency_key=key)
    assert (first.created, again.created) == (True, False)
    assert again.correlation_id == first.correlation_id


def test_missing_keys_raise_bad_request_carrying_the_servers_body(api: BrokerApi) -> None:
    # When a required key is left out
    with pytest.raises(BadRequest) as caught:
        api.submit("InvoiceProcess", {"InvoiceNumber": "INV-1"})
    # Then the error carries the status and the body the server answered
    error = caught.value
    assert error.status == 400
    assert http_status(error) == 400
    assert error.code == "missing_keys"
    assert error.to_dict() == {
        "error": "Missing required keys", "code": "missing_keys", "keys": ["VendorCode"],
    }  # fmt: skip


def test_an_unknown_request_id_raises_not_found(api: BrokerApi) -> None:
    with pytest.raises(NotFound) as caught:
        api.get("no-such-request")
    assert caught.value.status == 404


def test_another_clients_record_is_forbidden(live: LiveBroker, api: BrokerApi) -> None:
    submitted = api.submit("OpenType", {})
    with live.client("ClientB") as other, pytest.raises(Forbidden):
        other.get(submitted.correlation_id)


def test_iter_requests_follows_the_cursor_across_pages(live: LiveBroker) -> None:
    # Given five requests of a client that has none yet
    with live.client("Admin") as admin:
        ids = [admin.submit("OpenType", {"n": str(i)}).correlation_id for i in range(5)]
        # When they are read two per page
        first = admin.list_requests(limit=2)
        seen = [r["correlationId"] for r in admin.iter_requests(page_size=2)]
    # Then every record comes back once, newest first, and the first page points on
    assert first.next is not None
    assert seen == list(reversed(ids))


def test_events_cancel_and_a_second_cancel_conflicts(api: BrokerApi) -> None:
    submitted = api.submit("OpenType", {})
    assert api.cancel(submitted.correlation_id)["status"] == "Cancelled"
    assert "RequestSubmitted" in [e["eventType"] for e in api.events(submitted.correlation_id)]
    with pytest.raises(Conflict) as caught:
        api.cancel(submitted.correlation_id)
    assert caught.value.status == 409


def test_send_event_answers_a_queue_item(api: BrokerApi) -> None:
    answer = api.send_event("Approved", "some-correlation", {"by": "ops"})
    assert answer["queueItemId"]


def test_request_types_lists_what_the_client_may_submit(api: BrokerApi) -> None:
    names = {t["requestType"] for t in api.request_types()}
    assert names == {"InvoiceProcess", "OpenType"}


# Admin --------------------------------------------------------------------------------------------


def test_admin_calls_without_the_scope_are_forbidden(api: BrokerApi) -> None:
    with pytest.raises(Forbidden) as caught:
        api.dead_letters("request")
    assert caught.value.status == 403


def test_bookmark_dead_letters_list_replay_and_delete(live: LiveBroker) -> None:
    # Given two bookmark dead letters
    first, second = bookmark_letter(), bookmark_letter()
    add_rows(live, first, second)
    with live.client("Admin") as admin:
        # When an operator lists, replays one twice and deletes the other
        listed = {x["id"] for x in admin.iter_dead_letters("bookmark", page_size=1)}
        replayed = admin.replay_dead_letter(first.id, "bookmark")
        with pytest.raises(Conflict):
            admin.replay_dead_letter(first.id, "bookmark")
        admin.delete_dead_letter(second.id)
        # Then both were listed, the first replayed once and the second is gone
        assert {first.id, second.id} <= listed
        assert replayed["replayed"] is True
        assert admin.dead_letter(first.id, "bookmark")["replayable"] is False
        with pytest.raises(NotFound):
            admin.dead_letter(second.id, "bookmark")


def test_request_dead_letters_are_listed_by_kind(live: LiveBroker) -> None:
    letter = bookmark_letter(kind="outbox", reason="Undeliverable", name="broker.run_request")
    add_rows(live, letter)
    with live.client("Admin") as admin:
        outbox_ids = {x["id"] for x in admin.dead_letters("outbox", page_size=500)["items"]}
        request_ids = {x["id"] for x in admin.dead_letters("request", page_size=500)["items"]}
    assert letter.id in outbox_ids
    assert letter.id not in request_ids


def test_an_unknown_dead_letter_kind_is_refused_before_any_call(api: BrokerApi) -> None:
    with pytest.raises(BadRequest):
        api.dead_letters("everything")


def test_instances_are_listed_read_and_missing_ones_not_found(live: LiveBroker) -> None:
    instance_id = str(uuid.uuid4())
    add_rows(live, WorkflowInstance(id=instance_id, definition_id="open-type",
                                    definition_version_id="v1", version=1))  # fmt: skip
    with live.client("Admin") as admin:
        listed = admin.instances(definition_id="open-type")
        assert instance_id in [i["id"] for i in listed["items"]]
        assert admin.instance(instance_id)["status"] == "Running"
        assert admin.instance_journal(instance_id) == []
        with pytest.raises(NotFound):
            admin.instance("no-such-instance")


def test_runtime_pause_and_resume(live: LiveBroker) -> None:
    with live.client("Admin") as admin:
        assert admin.pause()["paused"] is True
        assert admin.runtime_status()["paused"] is True
        assert admin.resume()["paused"] is False


# Failures without an answer -----------------------------------------------------------------------


def test_an_unreachable_broker_raises_with_status_zero(live: LiveBroker) -> None:
    client = BrokerApi(f"https://127.0.0.1:{free_port()}", cert=live.pki.pem("ClientA"),
                       key=live.pki.key("ClientA"), ca=live.pki.ca, timeout=2)  # fmt: skip
    with client, pytest.raises(BrokerError) as caught:
        client.get("anything")
    assert caught.value.status == UNREACHABLE
    assert http_status(caught.value) == UNREACHABLE
    assert "Cannot reach the broker" in caught.value.message


def test_a_certificate_the_broker_does_not_know_is_unauthenticated(live: LiveBroker) -> None:
    with live.client("Stranger") as stranger, pytest.raises(Unauthenticated):
        stranger.request_types()


def test_a_missing_certificate_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="client certificate") as caught:
        BrokerApi("https://localhost:5001", cert=tmp_path / "none.pem",
                  key=tmp_path / "none.key", ca=tmp_path / "ca.pem")  # fmt: skip
    assert http_status(caught.value) is None


def test_a_non_json_error_answer_keeps_its_status_and_text() -> None:
    # Given a proxy's HTML error page
    response = requests.Response()
    response.status_code = 502
    response._content = b"<html>Bad Gateway</html>"
    # When it is turned into an error
    error = error_from(response)
    # Then it is a plain broker error naming the status
    assert type(error) is BrokerError
    assert error.status == 502
    assert error.message == "HTTP 502: <html>Bad Gateway</html>"


def test_default_endpoint_uses_the_public_port_and_the_dev_client_files(
    settings: Settings,
) -> None:
    endpoint = default_endpoint(settings.replace(public_bind="0.0.0.0:6001"))
    folder = Path(settings.tls_client_ca).parent
    assert endpoint.url == "https://localhost:6001"
    assert endpoint.cert == str(folder / "DevClient.pem")
    assert endpoint.key == str(folder / "DevClient.key")
    assert endpoint.ca == settings.tls_client_ca


def test_default_endpoint_keeps_a_named_bind_host(settings: Settings) -> None:
    endpoint = default_endpoint(settings.replace(public_bind="broker.example.com:443"))
    assert endpoint.url == "https://broker.example.com:443"


def test_a_ca_bundle_in_the_environment_does_not_replace_the_given_ca(
    live: LiveBroker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given REQUESTS_CA_BUNDLE naming a CA that did not sign the broker (requests prefers it
    # over a session's own setting)
    other = live.pki.folder / "other" / "ca.pem"
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(other))
    monkeypatch.setenv("CURL_CA_BUNDLE", str(other))
    # When the client calls with its own CA, then the call verifies against that CA
    with live.client() as client:
        assert client.request_types()
