"""Fuzzing the console's API as each role meets it (issue 34), the way the ingress is fuzzed.

Schemathesis reads the OpenAPI document the console serves (``/elsa/api/openapi.json``, made from
the routes themselves) and calls every operation with generated data, as a viewer, a designer and
an operator (API keys), in process through the whole console app, on PostgreSQL (the stricter
store: it refuses what SQLite lets through, a NUL in a text, a number past 64 bits). Hypothesis
then builds workflow definitions (valid, nearly valid, deep, odd) and publishes and imports them.
Nothing may answer 5xx; a definition that is accepted must load in the registry and parse for the
worker, one that is refused must change nothing. The summary line (calls, bodies, 5xx) is printed
at the end of the run (``tests/e2e/conftest.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core import NotSet
from sqlalchemy.orm import Session, sessionmaker

from broker.console.api import runs
from broker.registry import WorkflowRegistry
from broker.runtime.definitions import RegistryLookup
from broker.settings import Settings
from broker.store import credentials, db
from broker.store.models import DeadLetter, WorkflowInstance
from broker.wiring.web import create_console_app as create_app
from tests.e2e.conftest import record_summary
from tests.support.console import fake_assets, seed_invoice_request
from tests.support.doubles import RecordingPublisher
from tests.support.services import PROJECT_ROOT, postgres_database
from tests.support.workflows import deep_definition_text

ROLES = ("viewer", "designer", "operator")
#: generated calls of each operation, with valid and with invalid data, as the role it needs (82
#: operations; a few milliseconds each, in process); as a higher role, a few; as a lower one, one
#: (its refusal does not depend on the data)
POSITIVE_EXAMPLES = 10
NEGATIVE_EXAMPLES = 4
HIGHER_ROLE_EXAMPLES = 2
LOWER_ROLE_EXAMPLES = 1
#: generated definitions, each published and imported
DEFINITIONS = 150


@dataclasses.dataclass
class Tally:
    calls: int = 0
    bodies: int = 0
    answered_2xx: int = 0
    answered_4xx: int = 0
    server_errors: list[str] = dataclasses.field(default_factory=list)
    definitions: int = 0
    accepted: int = 0


tally = Tally()


@dataclasses.dataclass(frozen=True)
class Console:
    app: Flask
    keys: dict[str, str]
    registry: WorkflowRegistry
    factory: sessionmaker[Session]
    folder: Path

    def header(self, role: str) -> dict[str, str]:
        return {"Authorization": f"ApiKey {self.keys[role]}"}

    def client(self) -> FlaskClient:
        return self.app.test_client()


def _seed(factory: sessionmaker[Session], registry: WorkflowRegistry) -> None:
    """Records for the success paths: a faulted request of the shipped invoice workflow with its
    journal and dead letter, a running instance, a bookmark dead letter."""
    published = registry.for_request_type("InvoiceProcess")
    assert published is not None
    seed_invoice_request(factory, published)
    with db.transaction(factory) as session:
        session.add(
            WorkflowInstance(
                id="running-1",
                definition_id=published.definition_id,
                definition_version_id=published.version_id,
                version=published.version,
                status="Running",
                sub_status="Suspended",
            )
        )
        session.add(
            DeadLetter(
                id="bookmark-1",
                kind="bookmark",
                reason="Failed",
                instance_id="running-1",
                name="Approved",
                error="failed",
                attempts=3,
                data={"name": "Approved"},
            )
        )


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    root = tmp_path_factory.mktemp("console-fuzz")
    folder = root / "workflows"
    shutil.copytree(PROJECT_ROOT / "workflows", folder)
    patch = pytest.MonkeyPatch()
    # A Run waits for a worker to save the first step; none runs here.
    patch.setattr(runs, "EXECUTE_WAIT_SECONDS", 0.0)
    with postgres_database("broker_console_fuzz", migrated=True) as url:
        base = Settings.from_env(
            {
                "BROKER_VAR_DIR": str(root / "var"),
                "BROKER_DATABASE_URL": url,
                "BROKER_QUEUE_URL": "filesystem://",
                "BROKER_LOCK_URL": f"file://{root / 'var' / 'locks'}",
                "BROKER_WORKFLOW_PATHS": str(folder),
                "BROKER_WATCH_WORKFLOWS": "false",
                "BROKER_CONSOLE_ASSETS_DIR": str(root / "assets"),
                "BROKER_CLIENTS_FILE": str(PROJECT_ROOT / "config" / "clients.json"),
                "BROKER_REQUEST_TYPES_FILE": str(PROJECT_ROOT / "config" / "requestTypes.json"),
            }
        )
        fake_assets(base)
        factory = db.make_session_factory(db.make_engine(url))
        registry = WorkflowRegistry(base, factory)
        registry.load()
        with db.transaction(factory) as session:
            keys = {role: credentials.create_key(session, f"fuzz-{role}", role) for role in ROLES}
        _seed(factory, registry)
        app = create_app(
            base, session_factory=factory, registry=registry, publisher=RecordingPublisher()
        )
        try:
            yield Console(app, keys, registry, factory, folder)
        finally:
            patch.undo()
            db.dispose_engines()
            record_summary(
                "console API fuzz: "
                f"calls={tally.calls} bodies={tally.bodies} 5xx={len(tally.server_errors)} "
                f"(2xx={tally.answered_2xx} 4xx={tally.answered_4xx}) "
                f"definitions={tally.definitions} accepted={tally.accepted}"
            )


@pytest.fixture(scope="module")
def api_schema(console: Console) -> Any:
    return schemathesis.openapi.from_wsgi(
        "/elsa/api/openapi.json", console.app, headers=console.header("viewer")
    )


def _operations() -> dict[str, str | None]:
    """Every operation of the document (``METHOD /path``) and the role it needs."""
    from broker.console.api import blueprint, openapi
    from broker.console.identity import bp

    app = Flask("operations")
    app.register_blueprint(blueprint)
    app.register_blueprint(bp)
    return {
        f"{method.upper()} {path}": operation["x-required-role"]
        for path, item in openapi.document(app)["paths"].items()
        for method, operation in item.items()
    }


OPERATIONS = _operations()


def _restore(console: Console, path: str) -> None:
    """Undo what would make the next calls answer 503 (a paused runtime refuses new work)."""
    if path.endswith("/workflow-runtime/pause"):
        console.client().post(
            "/elsa/api/workflow-runtime/resume", headers=console.header("operator")
        )


def _fuzz(
    console: Console, operation: Any, path: str, role: str, mode: GenerationMode, examples: int
) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def call(case: Any) -> None:
        tally.calls += 1
        if case.body is not None and not isinstance(case.body, NotSet):
            tally.bodies += 1
        try:
            response = case.call(headers=console.header(role))
            tally.answered_2xx += response.status_code < 300
            tally.answered_4xx += 400 <= response.status_code < 500
            if response.status_code >= 500:
                where = f"{role} {case.method} {case.formatted_path}"
                tally.server_errors.append(where)
                raise AssertionError(
                    f"{where} answered {response.status_code}: {response.text[:500]}"
                )
        finally:
            _restore(console, path)

    call()


@pytest.mark.parametrize("role", ROLES)
def test_no_operation_answers_5xx_to_generated_calls(
    console: Console, api_schema: Any, role: str
) -> None:
    # Given every operation of the document the console serves, and a principal of this role
    # When schemathesis calls each with generated data
    for operation_id, needed in OPERATIONS.items():
        method, path = operation_id.split(" ", 1)
        operation = api_schema[path][method.lower()]
        if needed is not None and ROLES.index(needed) > ROLES.index(role):
            _fuzz(console, operation, path, role, GenerationMode.POSITIVE, LOWER_ROLE_EXAMPLES)
            continue
        if needed is not None and needed != role:
            _fuzz(console, operation, path, role, GenerationMode.POSITIVE, HIGHER_ROLE_EXAMPLES)
            continue
        _fuzz(console, operation, path, role, GenerationMode.POSITIVE, POSITIVE_EXAMPLES)
        # (Unsatisfiable: nothing about this operation can be invalid, it has no input.)
        with contextlib.suppress(Unsatisfiable):
            _fuzz(console, operation, path, role, GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES)
    # Then no answer was a 5xx (each would have failed the call above, naming it)
    assert tally.server_errors == []


def test_the_document_names_every_route_and_its_role(console: Console, api_schema: Any) -> None:
    document = (
        console.client().get("/elsa/api/openapi.json", headers=console.header("viewer")).get_json()
    )
    roles = {
        f"{m.upper()} {p}": op["x-required-role"]
        for p, item in document["paths"].items()
        for m, op in item.items()
    }
    assert roles["POST /elsa/api/alterations/run"] == "operator"
    assert roles["POST /elsa/api/workflow-definitions"] == "designer"
    assert roles["GET /elsa/api/workflow-definitions"] == "viewer"
    assert roles["GET /elsa/api/audit/operator-actions"] == "operator"
    assert len(roles) == len(OPERATIONS)
    # ... and a caller without a key may not read it
    assert console.client().get("/elsa/api/openapi.json").status_code == 401


# Definitions ----------------------------------------------------------------------------------

#: activity types: Elsa's (valid), aliases, and some the broker does not know
ACTIVITY_TYPES = [
    "Elsa.WriteLine",
    "Elsa.SetVariable",
    "Elsa.Sequence",
    "Elsa.Flowchart",
    "Elsa.If",
    "Elsa.Event",
    "Elsa.Delay",
    "Elsa.SendHttpRequest",
    "Elsa.HttpEndpoint",
    "Elsa.Fork",
    "Elsa.Finish",
    "Elsa.Nope",
    "NotAnActivity",
    "",
]
_names = st.text(alphabet=string.ascii_letters + string.digits + "-_. ", min_size=1, max_size=24)
_odd_text = st.text(max_size=40)
_scalars = st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | _odd_text
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=12,
)
_expressions = st.fixed_dictionaries(
    {
        "typeName": st.sampled_from(["String", "Object", "Int32", "Nope"]),
        "expression": st.fixed_dictionaries(
            {
                "type": st.sampled_from(["Literal", "Object", "Json", "JavaScript", "Nope"]),
                "value": _values,
            }
        ),
    }
)


def _activities(depth: int) -> st.SearchStrategy[dict[str, Any]]:
    leaf = st.fixed_dictionaries(
        {"id": _names, "type": st.sampled_from(ACTIVITY_TYPES), "version": st.integers(0, 3)},
        optional={"text": _expressions, "name": _odd_text, "customProperties": _values},
    )
    if depth == 0:
        return leaf
    container = st.fixed_dictionaries(
        {
            "id": _names,
            "type": st.sampled_from(["Elsa.Sequence", "Elsa.Flowchart", "Elsa.Fork"]),
            "activities": st.lists(_activities(depth - 1), max_size=3),
        },
        optional={
            "connections": st.lists(
                st.fixed_dictionaries(
                    {
                        "source": st.fixed_dictionaries({"activity": _names, "port": _names}),
                        "target": st.fixed_dictionaries({"activity": _names, "port": _names}),
                    }
                ),
                max_size=2,
            )
        },
    )
    return leaf | container


_definitions = st.fixed_dictionaries(
    {
        "definitionId": _names,
        "name": _odd_text,
        "root": _activities(3),
    },
    optional={
        "isPublished": st.booleans(),
        "version": st.integers(-1, 10**20),
        "variables": st.lists(
            st.fixed_dictionaries({"id": _names, "name": _names, "typeName": _names}), max_size=2
        ),
        "customProperties": st.fixed_dictionaries(
            {}, optional={"requestType": _names, "queue": _odd_text, "executor": _names}
        ),
        "options": st.dictionaries(_names, _values, max_size=2),
    },
)
#: a few definitions as text: deeper than any limit, malformed, with NaN and the like
_texts = st.sampled_from(
    [
        deep_definition_text(950, definition_id="fuzz-deep"),
        deep_definition_text(70, "activities", definition_id="fuzz-deeper"),
        '{"definitionId": "fuzz-nan", "root": {"type": "Elsa.Sequence", "x": NaN}}',
        '{"definitionId": "fuzz-big", "root": {"type": "Elsa.Sequence", "x": 1e400}}',
        '{"definitionId": "fuzz-nul\\u0000", "root": {"type": "Elsa.Sequence"}}',
        '{"definitionId": "fuzz-lone\\ud800", "root": {"type": "Elsa.Sequence"}}',
        '{"definitionId": "fuzz-cut", "root": ',
    ]
)


def _check_loads(console: Console, definition_id: str) -> None:
    """An accepted publish: the registry still serves everything, the definition among it, and
    the worker can parse what was stored."""
    registry = console.registry
    assert registry.for_request_type("InvoiceProcess") is not None
    published = registry.get_definition(definition_id)
    assert published is not None, [p.reason for p in registry.problems]
    RegistryLookup(registry).parse(published)


@given(data=st.data())
@settings(
    max_examples=DEFINITIONS,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def _publish_and_import(console: Console, data: st.DataObject) -> None:
    designer = console.header("designer")
    client = console.client()
    document = data.draw(_definitions | _texts)
    text = document if isinstance(document, str) else json.dumps(document, allow_nan=True)
    for path, body in (
        ("/elsa/api/workflow-definitions", f'{{"model": {text}, "publish": true}}'),
        ("/elsa/api/workflow-definitions/import", text),
    ):
        tally.definitions += 1
        files_before = sorted(p.name for p in console.folder.rglob("*.json"))
        response = client.post(path, data=body, content_type="application/json", headers=designer)
        assert response.status_code < 500, (path, response.status_code, response.get_data()[:500])
        if response.status_code < 300:
            tally.accepted += 1
            model = response.get_json()
            model = model.get("workflowDefinition", model)
            if model.get("isPublished"):
                _check_loads(console, model["definitionId"])
        else:
            assert sorted(p.name for p in console.folder.rglob("*.json")) == files_before


def test_generated_definitions_publish_and_import_without_a_5xx(console: Console) -> None:
    # Given definitions of every shape (valid, nearly valid, deep, malformed)
    # When each is published and imported by a designer
    _publish_and_import(console)
    # Then none answered 5xx, what was accepted loads, what was refused changed nothing
    assert tally.accepted > 0
