"""The operator audit (issue 34, finding 7): grants, key management, bulk actions, replays and
pauses are recorded with who, what and when, and never the values; operators list them on the
console's page and on ``/elsa/api``, other roles may not."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.cli.console import console as console_command
from broker.settings import Settings, set_settings
from broker.store import db
from broker.store.models import WorkflowInstance
from tests.unit.console.conftest import Keys

AUDIT = "/elsa/api/audit/operator-actions"


def audit(client: FlaskClient, keys: Keys, **query: str) -> list[dict[str, Any]]:
    answer = client.get(AUDIT, query_string=query, headers=keys.header("operator"))
    assert answer.status_code == 200, answer.get_json()
    body = answer.get_json()
    assert set(body) == {"items", "totalCount", "page", "pageSize"}
    items: list[dict[str, Any]] = body["items"]
    return items


def csrf_of(client: FlaskClient, keys: Keys, path: str) -> str:
    page = client.get(path, headers=keys.header("operator")).get_data(as_text=True)
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    return found.group(1) if found else ""


def test_a_grant_from_the_page_is_in_the_audit_with_who_what_and_when(
    client: FlaskClient, keys: Keys
) -> None:
    # When an operator grants a client the page's request type
    form = {"clientId": "ExampleClient", "requestType": "InvoiceProcess", "requiredKeys": "A B"}
    posted = client.post(
        "/workflows/invoice-process/request-type/grants", data=form, headers=keys.header("operator")
    )
    assert posted.status_code == 302
    # Then the audit lists it: the operator's key, the action, the client and type, a time
    (entry,) = audit(client, keys, action="grant")
    assert entry["actor"] == "console:operator"
    assert entry["role"] == "operator"
    assert entry["action"] == "grant.create"
    assert entry["target"] == "ExampleClient: InvoiceProcess"
    assert entry["summary"]["requiredKeys"] == ["A", "B"]
    assert dt.datetime.fromisoformat(entry["at"]) <= dt.datetime.now(dt.UTC)


def test_bulk_actions_replays_and_pauses_are_in_the_audit(
    client: FlaskClient, keys: Keys, session_factory: sessionmaker[Session]
) -> None:
    # Given a running instance
    now = dt.datetime.now(dt.UTC)
    with db.transaction(session_factory) as session:
        session.add(
            WorkflowInstance(
                id="run-1",
                definition_id="invoice-process",
                definition_version_id="v1",
                version=1,
                status="Running",
                sub_status="Suspended",
                created_at=now,
                updated_at=now,
            )
        )
    operator = keys.header("operator")
    # When an operator cancels it in bulk, pauses and resumes the runtime
    cancelled = client.post(
        "/elsa/api/bulk-actions/cancel/workflow-instances",
        json={"ids": ["run-1", "gone"]},
        headers=operator,
    )
    assert cancelled.get_json() == {"cancelled": 1}
    assert client.post("/elsa/api/workflow-runtime/pause", headers=operator).status_code == 200
    assert client.post("/elsa/api/workflow-runtime/resume", headers=operator).status_code == 200
    # Then each is in the audit, newest first
    actions = [(e["action"], e["target"]) for e in audit(client, keys)]
    assert actions == [
        ("runtime.resume", "workflow runtime"),
        ("runtime.pause", "workflow runtime"),
        ("bulk.cancel-instances", "run-1, gone"),
    ]


def test_only_operators_list_the_audit(client: FlaskClient, keys: Keys) -> None:
    for role in ("viewer", "designer"):
        assert client.get(AUDIT, headers=keys.header(role)).status_code == 403
        assert client.get("/audit", headers=keys.header(role)).status_code == 403
    assert client.get(AUDIT).status_code == 401


def test_the_audit_page_shows_the_actions(client: FlaskClient, keys: Keys) -> None:
    client.post("/elsa/api/workflow-runtime/pause", headers=keys.header("operator"))
    page = client.get("/audit", headers=keys.header("operator"))
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "runtime.pause" in text
    assert "console:operator" in text


@pytest.fixture
def runner(console_settings: Settings) -> Iterator[CliRunner]:
    set_settings(console_settings)
    yield CliRunner()
    set_settings(None)


def test_key_and_user_management_from_the_command_line_is_in_the_audit(
    runner: CliRunner, client: FlaskClient, keys: Keys
) -> None:
    # When an operator creates and revokes a key, adds and removes a user, from the shell
    made = runner.invoke(console_command, ["keys", "create", "robot", "--role", "viewer", "--json"])
    assert made.exit_code == 0, made.output
    key = json.loads(made.stdout)["key"]
    assert runner.invoke(console_command, ["keys", "revoke", "robot"]).exit_code == 0
    added = runner.invoke(
        console_command,
        ["users", "add", "carol", "--role", "designer", "--password", "a long pass phrase"],
    )
    assert added.exit_code == 0, added.output
    assert runner.invoke(console_command, ["users", "remove", "carol"]).exit_code == 0
    # Then each is in the audit, by the shell's user, never with the key or the password
    entries = audit(client, keys)
    assert [(e["action"], e["target"]) for e in entries] == [
        ("user.remove", "carol"),
        ("user.add", "carol"),
        ("key.revoke", "robot"),
        ("key.create", "robot"),
    ]
    assert all(e["actor"].startswith("cli:") for e in entries)
    text = json.dumps(entries)
    assert key not in text
    assert "a long pass phrase" not in text
