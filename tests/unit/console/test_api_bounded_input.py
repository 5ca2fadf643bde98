"""The console reads every body and number through the broker's bounded reader and parser
(issue 34, findings 1, 4 and 5): a definition nesting 950 or 200,000 levels deep is refused on
publish and import; a body too deep, with a lone surrogate, a NUL, NaN or 1e400 is a 400 with a
message on every write endpoint, never a 500; out-of-range numbers and superscript digits are a
400 naming the parameter; and a request refused for any of it changes nothing. On SQLite and
PostgreSQL (which cannot even compare a text holding a NUL, nor hold a number past 64 bits)
where the database could tell."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.registry import WorkflowRegistry
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import WorkflowDraft, WorkflowInstance
from tests.support.workflows import DEEP_SHAPES, deep_definition_text
from tests.unit.console.conftest import Keys

API = "/elsa/api"
JSON = "application/json"

#: bodies the bounded reader refuses, as a client sends them (raw JSON text)
BAD_BODIES = {
    "200k-deep": "[" * 200_000 + "]" * 200_000,
    "lone-surrogate": '{"definitionIds": ["\\ud800"], "model": {"name": "\\udfff"}}',
    "nul": '{"definitionIds": ["a\\u0000b"], "ids": ["a\\u0000b"], "model": {"name": "a\\u0000"}}',
    "nan": '{"definitionIds": ["x"], "page": NaN, "model": {"name": NaN}}',
    "1e400": '{"definitionIds": ["x"], "page": 1e400, "model": {"name": 1e400}}',
}

#: every console route that reads a JSON body: (method, path, role that may call it)
WRITE_ENDPOINTS = [
    ("POST", "/workflow-definitions", "designer"),
    ("POST", "/workflow-definitions/import", "designer"),
    ("PUT", "/workflow-definitions/invoice-process/import", "designer"),
    ("POST", "/bulk-actions/publish/workflow-definitions/by-definition-ids", "designer"),
    ("POST", "/bulk-actions/retract/workflow-definitions/by-definition-ids", "designer"),
    ("POST", "/bulk-actions/delete/workflow-definitions/by-definition-id", "designer"),
    ("POST", "/bulk-actions/delete/workflow-definitions/by-id", "designer"),
    ("POST", "/bulk-actions/export/workflow-definitions", "viewer"),
    ("POST", "/bulk-actions/cancel/workflow-instances", "operator"),
    ("POST", "/bulk-actions/delete/workflow-instances/by-id", "operator"),
    ("POST", "/workflow-instances", "viewer"),
    ("POST", "/workflow-instances/inst-1/journal", "viewer"),
    ("POST", "/activity-executions/report", "viewer"),
    ("POST", "/scripting/javascript/type-definitions/invoice-process", "viewer"),
    ("POST", "/tests/activities", "designer"),
    ("POST", "/workflow-definitions/invoice-process/execute", "operator"),
    ("POST", "/workflow-definitions/invoice-process/dispatch", "operator"),
    ("POST", "/alterations/run", "operator"),
    ("POST", "/alterations/submit", "operator"),
    ("POST", "/alterations/dry-run", "operator"),
    ("POST", "/alterations/workflows/retry", "operator"),
    ("POST", "/identity/login", "viewer"),
]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """Run a test on both databases (it asks for this fixture)."""
    return str(request.param)


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    if "backend" not in request.fixturenames or request.getfixturevalue("backend") == "sqlite":
        return settings
    return settings.replace(database_url=request.getfixturevalue("migrated_postgres_url"))


@pytest.fixture
def running(session_factory: sessionmaker[Session]) -> str:
    """A running workflow instance, as an operator's bulk cancel finds it."""
    with transaction(session_factory) as session:
        session.add(
            WorkflowInstance(
                id="running-1",
                definition_id="invoice-process",
                definition_version_id="v1",
                version=1,
                status="Running",
                sub_status="Suspended",
                created_at=dt.datetime.now(dt.UTC),
                updated_at=dt.datetime.now(dt.UTC),
            )
        )
    return "running-1"


def call(client: FlaskClient, keys: Keys, role: str, method: str, path: str, body: str) -> object:
    return client.open(
        API + path, method=method, data=body, content_type=JSON, headers=keys.header(role)
    )


def message_of(response: object) -> str:
    body = response.get_json()  # type: ignore[attr-defined]
    errors = (body.get("errors") or {}).get("generalErrors") if isinstance(body, dict) else None
    return " ".join(errors) if errors else str(body.get("error") if body else "")


def drafts(session_factory: sessionmaker[Session]) -> list[str]:
    with transaction(session_factory, write=False) as session:
        return [d.definition_id for d in session.query(WorkflowDraft).all()]


@pytest.mark.parametrize("shape", DEEP_SHAPES)
@pytest.mark.parametrize("depth", [950, 200_000])
@pytest.mark.parametrize("how", ["publish", "import"])
def test_a_deep_definition_is_refused_on_publish_and_import_and_changes_nothing(
    client: FlaskClient,
    keys: Keys,
    registry: WorkflowRegistry,
    workflow_dir: Path,
    session_factory: sessionmaker[Session],
    console_settings: Settings,
    how: str,
    depth: int,
    shape: str,
) -> None:
    # Given a designer and a definition nesting far too deep
    definition = deep_definition_text(depth, shape)
    if how == "publish":
        path, body = "/workflow-definitions", f'{{"model": {definition}, "publish": true}}'
    else:
        path, body = "/workflow-definitions/import", definition
    files_before = sorted(p.name for p in workflow_dir.rglob("*.json"))
    # When it is published or imported
    response = call(client, keys, "designer", "POST", path, body)
    # Then it is refused with a message naming the nesting (or, 200,000 Sequences being some
    # 8 MB, the size), and nothing was stored or written
    if len(body) > console_settings.max_body_bytes:
        assert response.status_code == 413, response.get_data(as_text=True)[:300]  # type: ignore[attr-defined]
        assert "exceeds" in message_of(response)
    else:
        assert response.status_code == 400, response.get_data(as_text=True)[:300]  # type: ignore[attr-defined]
        assert "nesting exceeds" in message_of(response)
    assert drafts(session_factory) == []
    assert sorted(p.name for p in workflow_dir.rglob("*.json")) == files_before
    # ... and every other type is still served
    assert registry.for_request_type("InvoiceProcess") is not None


@pytest.mark.parametrize("body", BAD_BODIES, ids=list(BAD_BODIES))
@pytest.mark.parametrize(
    ("method", "path", "role"), WRITE_ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in WRITE_ENDPOINTS]
)
def test_a_malformed_body_is_a_400_with_a_message_on_every_write_endpoint(
    client: FlaskClient,
    keys: Keys,
    session_factory: sessionmaker[Session],
    method: str,
    path: str,
    role: str,
    body: str,
) -> None:
    # When a body the bounded reader refuses is sent to a route that reads one
    response = call(client, keys, role, method, path, BAD_BODIES[body])
    # Then the answer is a 400 saying what is wrong, and nothing was stored
    assert response.status_code == 400, response.get_data(as_text=True)[:300]  # type: ignore[attr-defined]
    assert message_of(response)
    assert drafts(session_factory) == []


def test_a_bulk_cancel_refused_for_one_id_cancels_none(
    backend: str,
    client: FlaskClient,
    keys: Keys,
    running: str,
    session_factory: sessionmaker[Session],
) -> None:
    # Given a running instance, and a bulk cancel naming it and an id holding a NUL
    body = f'{{"ids": ["{running}", "a\\u0000b"]}}'
    # When the operator sends it
    response = call(
        client, keys, "operator", "POST", "/bulk-actions/cancel/workflow-instances", body
    )
    # Then the whole request is refused, and the running instance was not cancelled
    assert response.status_code == 400, response.get_json()  # type: ignore[attr-defined]
    assert "NUL" in message_of(response)
    with transaction(session_factory, write=False) as session:
        instance = session.get(WorkflowInstance, running)
        assert instance is not None
        assert instance.status == "Running"


BAD_NUMBERS = [
    ("GET", "/workflow-definitions?page=1000000000000000000&pageSize=10", "page"),
    ("GET", "/workflow-definitions?page=%C2%B2&pageSize=10", "page"),
    ("GET", "/workflow-definitions?page=0&pageSize=%C2%B2", "pageSize"),
    ("GET", "/workflow-instances?page=1000000000000000000", "page"),
    ("GET", "/workflow-instances?page=%C2%B2", "page"),
    ("GET", "/workflow-instances?version=100000000000000000000", "version"),
    ("GET", "/workflow-instances/inst-1/journal?skip=10000000000000000000", "skip"),
    ("GET", "/workflow-instances/inst-1/journal?take=%C2%B3", "take"),
    (
        "GET",
        "/workflow-definitions/by-definition-id/invoice-process?versionOptions=100000000000000000000",
        "versionOptions",
    ),
    ("GET", "/workflow-definitions/by-definition-id/invoice-process?versionOptions=%C2%B2", None),
    ("DELETE", "/workflow-definitions/invoice-process/version/100000000000000000000", "version"),
    ("POST", "/workflow-definitions/invoice-process/revert/100000000000000000000", "version"),
    ("POST", "/workflow-definitions/invoice-process/revert/%C2%B2", "version"),
    ("GET", "/bookmark-queue/dead-letters?page=1000000000000000000", "page"),
]


@pytest.mark.parametrize(
    ("method", "path", "name"), BAD_NUMBERS, ids=[p for _, p, _ in BAD_NUMBERS]
)
def test_an_out_of_range_or_non_ascii_number_is_a_400_naming_it(
    backend: str, client: FlaskClient, keys: Keys, method: str, path: str, name: str | None
) -> None:
    # When a number beyond its range, or written with superscript digits, is sent
    response = client.open(API + path, method=method, headers=keys.header("operator"))
    # Then the answer is a 400 naming the parameter
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert f"'{name or 'versionOptions'}'" in message_of(response)


@pytest.mark.parametrize(
    ("body", "name"),
    [
        ('{"page": 1000000000000000000}', "page"),
        ('{"page": "\\u00b2"}', "page"),
        ('{"pageSize": 2.5}', "pageSize"),
        ('{"version": 100000000000000000000}', "version"),
    ],
)
def test_an_out_of_range_number_in_a_list_body_is_a_400(
    client: FlaskClient, keys: Keys, body: str, name: str
) -> None:
    response = call(client, keys, "viewer", "POST", "/workflow-instances", body)
    assert response.status_code == 400, response.get_data(as_text=True)[:300]  # type: ignore[attr-defined]
    assert f"'{name}'" in message_of(response)


def test_the_dead_letter_page_refuses_superscript_page_numbers(
    client: FlaskClient, keys: Keys
) -> None:
    response = client.get("/dead-letters?page=%C2%B2", headers=keys.header("viewer"))
    assert response.status_code == 400
    assert "page" in response.get_data(as_text=True)


def test_a_refused_workflow_file_is_named_on_the_console(
    client: FlaskClient, keys: Keys, registry: WorkflowRegistry, workflow_dir: Path
) -> None:
    # Given a definition 950 levels deep saved into the console's workflow folder
    (workflow_dir / "deep.json").write_text(deep_definition_text(950), encoding="utf-8")
    registry.load()
    # When a viewer looks at the definitions
    problems = client.get(f"{API}/workflow-definitions/problems", headers=keys.header("viewer"))
    page = client.get("/workflows", headers=keys.header("viewer")).get_data(as_text=True)
    # Then the file is named with the reason (within its folder, not where it is on the server)
    assert problems.status_code == 200
    (item,) = problems.get_json()["items"]
    assert item["file"] == "deep.json"
    assert "nesting exceeds 64 levels" in item["reason"]
    assert "deep.json" in page
    assert "nesting exceeds 64 levels" in page
    assert str(workflow_dir) not in page
    # ... and every other definition is still listed
    listed = client.get(f"{API}/workflow-definitions", headers=keys.header("viewer")).get_json()
    assert "invoice-process" in {i["definitionId"] for i in listed["items"]}
