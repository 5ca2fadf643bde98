"""A workflow's request type for authors: the designer's page shows it and who may submit it, a
designer sets it into the draft, an operator grants it from the page or ``broker request-types``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.cli.grants import request_types
from broker.clients.registry import ClientRegistry
from broker.runtime.admin import drafts
from broker.settings import Settings, set_settings
from broker.store import db
from tests.unit.console.conftest import Keys

PAGE = "/workflows/invoice-process"
CLIENT = "ExampleClient"  # in config/clients.json, with no rule for InvoiceProcess


def test_the_designer_page_shows_the_request_type_and_its_clients(
    client: FlaskClient, keys: Keys
) -> None:
    page = client.get(PAGE, headers=keys.header("viewer")).get_data(as_text=True)
    assert "data-request-type>InvoiceProcess<" in page
    assert "Set request type" not in page  # a viewer changes nothing
    designer = client.get(PAGE, headers=keys.header("designer")).get_data(as_text=True)
    assert "Set request type" in designer
    assert 'name="clientId"' not in designer  # granting is the operator's
    assert 'name="clientId"' in client.get(PAGE, headers=keys.header("operator")).get_data(
        as_text=True
    )


def test_a_designer_sets_the_request_type_into_the_draft(
    client: FlaskClient, keys: Keys, session_factory: sessionmaker[Session]
) -> None:
    response = client.post(
        f"{PAGE}/request-type",
        data={"requestType": "InvoiceRenamed"},
        headers=keys.header("designer"),
    )
    assert response.status_code == 302
    assert "message=" in response.headers["Location"]
    with session_factory() as session:
        draft = drafts.draft(session, "invoice-process")
    assert draft is not None
    assert draft.document["customProperties"]["requestType"] == "InvoiceRenamed"
    # the page says the published version still serves the old type until a publish
    page = client.get(PAGE, headers=keys.header("viewer")).get_data(as_text=True)
    assert "the published version serves InvoiceProcess" in page


def test_a_bad_request_type_is_refused_and_changes_nothing(
    client: FlaskClient, keys: Keys, session_factory: sessionmaker[Session]
) -> None:
    response = client.post(
        f"{PAGE}/request-type", data={"requestType": "no spaces"}, headers=keys.header("designer")
    )
    assert response.status_code == 302
    assert "error=" in response.headers["Location"]
    assert "requestType" in client.get(
        response.headers["Location"], headers=keys.header("viewer")
    ).get_data(as_text=True)
    with session_factory() as session:
        assert drafts.draft(session, "invoice-process") is None


def test_an_operator_grants_a_client_the_type(
    client: FlaskClient,
    keys: Keys,
    console_settings: Settings,
    session_factory: sessionmaker[Session],
) -> None:
    form = {"clientId": CLIENT, "requestType": "InvoiceProcess", "requiredKeys": "InvoiceNumber"}
    refused = client.post(f"{PAGE}/request-type/grants", data=form, headers=keys.header("designer"))
    assert refused.status_code == 403
    clients = ClientRegistry(console_settings, session_factory)
    assert clients.rule_for(CLIENT, "InvoiceProcess") is None
    granted = client.post(f"{PAGE}/request-type/grants", data=form, headers=keys.header("operator"))
    assert granted.status_code == 302
    rule = ClientRegistry(console_settings, session_factory).rule_for(CLIENT, "invoiceprocess")
    assert rule is not None
    assert rule.required_keys == ("InvoiceNumber",)
    assert rule.allow_additional_keys is False
    page = client.get(PAGE, headers=keys.header("viewer")).get_data(as_text=True)
    assert f"<td>{CLIENT}</td>" in page


def test_granting_an_unknown_client_is_refused(
    client: FlaskClient,
    keys: Keys,
    console_settings: Settings,
    session_factory: sessionmaker[Session],
) -> None:
    form = {"clientId": "Nobody", "requestType": "InvoiceProcess"}
    response = client.post(
        f"{PAGE}/request-type/grants", data=form, headers=keys.header("operator")
    )
    assert "error=" in response.headers["Location"]
    assert (
        ClientRegistry(console_settings, session_factory).rule_for("Nobody", "InvoiceProcess")
        is None
    )


def test_the_grant_form_grants_only_the_type_of_its_page(
    client: FlaskClient,
    keys: Keys,
    console_settings: Settings,
    session_factory: sessionmaker[Session],
) -> None:
    # Given the grant form of invoice-process's page, posted with another request type
    form = {"clientId": CLIENT, "requestType": "SomeOtherType"}
    # When an operator sends it
    response = client.post(
        f"{PAGE}/request-type/grants", data=form, headers=keys.header("operator")
    )
    # Then it is refused, naming the page's own type, and no rule exists for the other one
    assert response.status_code == 302
    assert "error=" in response.headers["Location"]
    assert "InvoiceProcess" in response.headers["Location"]
    clients = ClientRegistry(console_settings, session_factory)
    assert clients.rule_for(CLIENT, "SomeOtherType") is None
    assert clients.rule_for(CLIENT, "InvoiceProcess") is None


@pytest.fixture
def runner(settings: Settings) -> Iterator[CliRunner]:
    set_settings(settings)
    yield CliRunner()
    set_settings(None)
    db.dispose_engines()


def test_the_cli_grants_and_lists_a_rule(runner: CliRunner, settings: Settings) -> None:
    result = runner.invoke(
        request_types, ["grant", CLIENT, "InvoiceProcess", "--key", "InvoiceNumber", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["clientId"] == CLIENT
    listed = runner.invoke(request_types, ["list", "--type", "InvoiceProcess", "--json"])
    assert CLIENT in [r["clientId"] for r in json.loads(listed.stdout)["items"]]
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    assert ClientRegistry(settings, factory).rule_for(CLIENT, "InvoiceProcess") is not None


def test_the_cli_refuses_an_unknown_client_or_a_bad_key(runner: CliRunner) -> None:
    unknown = runner.invoke(request_types, ["grant", "Nobody", "InvoiceProcess"])
    assert unknown.exit_code == 3
    assert "Unknown client" in unknown.output
    bad = runner.invoke(request_types, ["grant", CLIENT, "InvoiceProcess", "--key", "a b"])
    assert bad.exit_code == 1
