"""Fuzzing the public listener as a client meets it: real gunicorn, real mutual TLS.

Schemathesis reads the OpenAPI document the listener serves and calls every operation in it with
generated data, valid (positive) and invalid (negative), over HTTPS presenting the Admin client's
certificate (every scope). No answer may be a 5xx; every answer must use a documented status,
content type and schema; invalid data must be refused with a 4xx. The listener runs with two
gunicorn workers on PostgreSQL (the stricter store) with its rate-limit buckets in Redis, so the
same server also shows that its processes share one bucket.

The number of generated calls is printed at the end of the module (``-s`` shows it).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
import schemathesis
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from broker.adapters.buckets import REDIS_PREFIX
from broker.store import db
from tests.e2e.test_openapi_schemathesis import _seed
from tests.support.ingress import Pki, environment, make_pki, write_config
from tests.support.services import REDIS_URL, free_port, require_service
from tests.support.stack import roles
from tests.support.stack.config import Ports
from tests.support.stack.roster import Stack

pytestmark = pytest.mark.slow

START_TIMEOUT = 60.0
#: generated calls per operation and mode: about 27 operations x 20 calls, a few seconds each
POSITIVE_EXAMPLES = 12
NEGATIVE_EXAMPLES = 8
#: ClientA's own event rate in the server's clients.json (shared by both gunicorn workers)
EVENT_RATE = 5

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

#: what counts as refusing invalid data
REFUSALS = ["400", "401", "403", "404", "405", "406", "409", "413", "414", "415", "422", "429"]

calls: dict[str, int] = {"positive": 0, "negative": 0}


class Listener:
    """The public listener under gunicorn, and a client session per certificate."""

    def __init__(self, pki: Pki, port: int, stack: Stack) -> None:
        self.pki = pki
        self.port = port
        self.stack = stack
        self.base_url = f"https://localhost:{port}"

    def session(self, name: str) -> requests.Session:
        session = requests.Session()
        # Only what is set here: no CA bundle or proxy from the environment.
        session.trust_env = False
        session.cert = (str(self.pki.pem(name)), str(self.pki.key(name)))
        session.verify = str(self.pki.ca)
        return session


def _start(root: Path, database_url: str, redis_url: str) -> Listener:
    pki = make_pki(root / "certs")
    config = write_config(root / "config", pki)
    clients = Path(config["BROKER_CLIENTS_FILE"])
    document = json.loads(clients.read_text())
    for entry in document["clients"]:
        if entry["clientId"] == "ClientA":
            entry["rateLimits"] = {"events": f"{EVENT_RATE}/hour"}
    clients.write_text(json.dumps(document))
    port = free_port()
    var = root / "var"
    var.mkdir()
    broker_env = environment(
        var,
        pki,
        config,
        BROKER_PUBLIC_BIND=f"127.0.0.1:{port}",
        BROKER_DATABASE_URL=database_url,
        BROKER_RATE_LIMIT_URL=redis_url,
    )
    db.upgrade(broker_env["BROKER_DATABASE_URL"])
    _seed(db.make_session_factory(db.make_engine(broker_env["BROKER_DATABASE_URL"])))
    db.dispose_engines()
    stack = Stack(root, broker_env, ports=Ports(public=port))
    stack.start("public", roles.listener("public", workers=2, threads=4))
    try:
        stack.wait_listening()
    except BaseException:
        stack.close()
        raise
    return Listener(pki, port, stack)


@pytest.fixture(scope="module")
def module_database(postgres_server: str) -> Iterator[str]:
    """A PostgreSQL database for the module's listener (PostgreSQL is the stricter store: it
    refuses what SQLite lets through, such as NUL in a text)."""
    name = f"broker_fuzz_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield postgres_server.rsplit("/", 1)[0] + f"/{name}"
        db.dispose_engines()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(scope="module")
def module_redis() -> str:
    """The Redis database of this test process (as ``redis_url`` picks it), its rate-limit
    buckets emptied."""
    require_service("Redis", "127.0.0.1", 6379)
    url = f"{REDIS_URL}/{1 + os.getpid() % 14}"
    client = redis.Redis.from_url(url)
    for key in client.scan_iter(f"{REDIS_PREFIX}*"):
        client.delete(key)
    return url


@pytest.fixture(scope="module")
def listener(
    tmp_path_factory: pytest.TempPathFactory, module_database: str, module_redis: str
) -> Iterator[Listener]:
    started = _start(tmp_path_factory.mktemp("fuzz-mtls"), module_database, module_redis)
    try:
        yield started
    finally:
        started.stack.close()
        print(
            f"\nmTLS fuzzing: {calls['positive']} positive and {calls['negative']} negative "
            "generated calls"
        )


@pytest.fixture(scope="module")
def admin(listener: Listener) -> requests.Session:
    return listener.session("Admin")


@pytest.fixture(scope="module")
def api_schema(listener: Listener, admin: requests.Session) -> Any:
    # The document the listener itself serves, fetched over mutual TLS.
    response = admin.get(f"{listener.base_url}/openapi.json", timeout=30)
    assert response.status_code == 200
    # A refusal by gunicorn itself (414, a request line over its limit) is a refusal too.
    config = schemathesis.Config.from_dict(
        {"checks": {"negative_data_rejection": {"expected-statuses": REFUSALS}}}
    )
    return schemathesis.openapi.from_dict(response.json(), config=config)


def _operations() -> list[tuple[str, str]]:
    from broker.ingress import openapi

    return [
        (path, method)
        for path, item in openapi.PATHS.items()
        for method in item
        if method != "parameters"
    ]


OPERATIONS = _operations()


def _restore(listener: Listener, admin: requests.Session, path: str) -> None:
    """Undo what would make the next operations answer 503 (a paused runtime)."""
    if path.endswith("/workflow-runtime/pause"):
        admin.post(f"{listener.base_url}/admin/workflow-runtime/resume", timeout=30)


def _fuzz(
    listener: Listener,
    admin: requests.Session,
    operation: Any,
    path: str,
    mode: GenerationMode,
    examples: int,
    *,
    caller: requests.Session | None = None,
    statuses: list[int] | None = None,
) -> None:
    """Call ``operation`` with ``examples`` generated cases as ``caller`` (Admin by default)."""
    checks = [*CHECKS, negative_data_rejection] if mode is GenerationMode.NEGATIVE else CHECKS
    session = caller or admin

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def call(case: Any) -> None:
        calls[mode.value] += 1
        try:
            response = case.call_and_validate(
                base_url=listener.base_url,
                session=session,
                checks=checks,
                timeout=30,
                verify=session.verify,
                cert=session.cert,
            )
            if statuses is not None:
                statuses.append(response.status_code)
        finally:
            _restore(listener, admin, path)

    call()


@pytest.mark.parametrize(
    ("path", "method"), OPERATIONS, ids=[f"{m.upper()} {p}" for p, m in OPERATIONS]
)
def test_every_operation_survives_generated_calls_over_mutual_tls(
    listener: Listener, admin: requests.Session, api_schema: Any, path: str, method: str
) -> None:
    # Given the documented operation, when schemathesis calls it over mTLS with valid data and
    # with invalid data, then no answer is a 5xx or strays from the document, and invalid data
    # is refused with a 4xx
    operation = api_schema[path][method]
    _fuzz(listener, admin, operation, path, GenerationMode.POSITIVE, POSITIVE_EXAMPLES)
    # (Unsatisfiable: nothing about this operation can be invalid, it has no input.)
    with contextlib.suppress(Unsatisfiable):
        _fuzz(listener, admin, operation, path, GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES)


ADMIN_OPERATIONS = [(p, m) for p, m in OPERATIONS if p.startswith("/admin/")]


@pytest.mark.parametrize(
    ("path", "method"), ADMIN_OPERATIONS, ids=[f"{m.upper()} {p}" for p, m in ADMIN_OPERATIONS]
)
def test_every_admin_operation_refuses_a_client_without_its_scope_as_documented(
    listener: Listener, admin: requests.Session, api_schema: Any, path: str, method: str
) -> None:
    # Given ClientA, allowlisted without any admin scope
    statuses: list[int] = []
    with listener.session("ClientA") as client:
        # When it calls the admin operation with generated valid data
        _fuzz(
            listener,
            admin,
            api_schema[path][method],
            path,
            GenerationMode.POSITIVE,
            3,
            caller=client,
            statuses=statuses,
        )
    # Then every answer is the documented 403, whatever the data (unless gunicorn refused an
    # overlong request line first, as documented too)
    assert 403 in statuses
    assert set(statuses) <= {403, 414}


def test_both_gunicorn_workers_share_a_clients_event_bucket(listener: Listener) -> None:
    # Given ClientA limited to 5 events an hour, and a listener with two worker processes
    # When ClientA sends 12 events, each on a new connection (so both workers answer some)
    answers = []
    for n in range(12):
        with listener.session("ClientA") as session:
            answers.append(
                session.post(
                    f"{listener.base_url}/events/approval",
                    json={"correlationId": f"c{n}"},
                    timeout=30,
                )
            )
    # Then exactly 5 were accepted, across both processes, and the rest got 429 + Retry-After
    statuses = [a.status_code for a in answers]
    assert statuses.count(202) == EVENT_RATE
    assert statuses.count(429) == 12 - EVENT_RATE
    refused = next(a for a in answers if a.status_code == 429)
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["limit"] == "events"
    # And ClientB's events still complete
    with listener.session("ClientB") as session:
        other = session.post(
            f"{listener.base_url}/events/approval", json={"correlationId": "b"}, timeout=30
        )
    assert other.status_code == 202


def test_a_request_line_over_gunicorns_limit_is_the_documented_414(
    listener: Listener, admin: requests.Session, api_schema: Any
) -> None:
    # Given a query string longer than gunicorn reads (found by the fuzzing above)
    case = api_schema["/requests"]["get"].Case(query={"requestType": "x" * 5000})
    # When it is sent, then gunicorn answers 414, as the document says it may
    response = case.call_and_validate(
        base_url=listener.base_url,
        session=admin,
        checks=CHECKS,
        timeout=30,
        verify=admin.verify,
        cert=admin.cert,
    )
    assert response.status_code == 414


def test_a_large_body_over_the_rate_gets_its_429_not_a_broken_connection(
    listener: Listener,
) -> None:
    # Given ClientA's event bucket emptied
    with listener.session("ClientA") as session:
        for n in range(EVENT_RATE + 1):
            session.post(
                f"{listener.base_url}/events/drain", json={"correlationId": f"d{n}"}, timeout=30
            )
        # When it sends an event with a body near the size limit (refused before it is read)
        body = {"correlationId": "big", "payload": {"blob": "x" * 900_000}}
        answers = [
            session.post(f"{listener.base_url}/events/approval", json=body, timeout=30)
            for _ in range(3)
        ]
    # Then each gets its 429, on a connection that stays usable
    assert [a.status_code for a in answers] == [429, 429, 429]
