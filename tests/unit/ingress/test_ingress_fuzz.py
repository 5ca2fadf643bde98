"""Property tests of the JSON intake: whatever a client sends, the answer is a documented 4xx or
a success, never a 500, and a refused body writes nothing.

Hypothesis generates bodies for ``POST /requests`` and ``POST /events/{name}``: arbitrary JSON
(strings with lone surrogates and NUL, numbers too large for a double, NaN and Infinity, deep and
wide nesting), arbitrary bytes, and arbitrary Content-Types. What JSON or the database cannot hold
faithfully (a lone surrogate, a NUL character, a number that is not finite) must be 400; a body
that is not JSON by its Content-Type must be 415. Every example is counted in ``TRIED``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from broker.ingress.auth import PEER_CERT
from broker.rates import UNLIMITED
from broker.settings import Settings
from broker.store import db
from broker.store.models import BookmarkQueueItem, OutboxRow, Request, RequestEvent
from broker.wiring.web import create_public_app
from tests.support.ingress import Pki, make_pki, settings_for, write_config

EXAMPLES = 150
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: examples tried, by test (printed at the end of the session with ``-s``)
TRIED: dict[str, int] = {}


class Raw:
    """A JSON token written as is (``1e400``, ``NaN``, ``-Infinity``)."""

    def __init__(self, text: str) -> None:
        self.text = text


def encode(value: Any) -> str:
    """JSON text of ``value``, escaping every non-ASCII character (so lone surrogates survive
    as ``\\ud800`` escapes) and writing ``Raw`` tokens verbatim."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{encode(str(k))}:{encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(encode(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=True)


def unstorable(value: Any) -> bool:
    """Whether the decoded document holds what must be refused: a lone surrogate or a NUL in a
    key or a string, or a number that is not finite."""
    if isinstance(value, Raw):
        number = float(value.text.replace("Infinity", "inf"))
        return not math.isfinite(number)
    if isinstance(value, str):
        return "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(unstorable(str(k)) or unstorable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(unstorable(v) for v in value)
    return False


#: any code point, surrogates included, with the troublesome ones often
CHARACTERS = st.one_of(
    st.characters(codec=None, categories=None),
    st.sampled_from(["\x00", "\ud800", "\udfff", "\ud83d", "\ufffe", "\u2028", '"', "\\"]),
)
TEXT = st.text(CHARACTERS, max_size=12)
NUMBERS = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [Raw(t) for t in ("1e400", "-1e400", "1e308", "4.9e-324", "NaN", "Infinity", "-Infinity")]
    ),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(TEXT, children, max_size=4)
    ),
    max_leaves=20,
)


def submission() -> st.SearchStrategy[dict[str, Any]]:
    """Bodies shaped like a submission, with any content in their fields."""
    return st.fixed_dictionaries(
        {"requestType": st.one_of(st.just("OpenType"), TEXT)},
        optional={
            "keys": st.one_of(st.dictionaries(TEXT, TEXT, max_size=3), VALUES),
            "payload": st.one_of(st.dictionaries(TEXT, VALUES, max_size=4), VALUES),
        },
    )


def stimulus() -> st.SearchStrategy[dict[str, Any]]:
    """Bodies shaped like an event, with any content in their fields."""
    return st.fixed_dictionaries(
        {"correlationId": st.one_of(st.just("c-1"), TEXT)},
        optional={"payload": st.one_of(st.dictionaries(TEXT, VALUES, max_size=4), VALUES)},
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("fuzz-pki"))


@pytest.fixture(scope="module")
def fuzz_settings(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Settings:
    root = tmp_path_factory.mktemp("fuzz")
    found = settings_for(root / "var", pki, write_config(root / "config", pki))
    # The intake is under test here, not the rate limits.
    return found.replace(rate_limit_submissions=UNLIMITED, rate_limit_events=UNLIMITED)


@pytest.fixture(scope="module")
def factory(fuzz_settings: Settings) -> Iterator[sessionmaker[Session]]:
    db.upgrade(fuzz_settings.database_url)
    yield db.make_session_factory(db.make_engine(fuzz_settings.database_url))
    db.dispose_engines()


@pytest.fixture(scope="module")
def client_a(fuzz_settings: Settings, factory: sessionmaker[Session], pki: Pki) -> FlaskClient:
    app = create_public_app(fuzz_settings, session_factory=factory)
    client = app.test_client()
    client.environ_base[PEER_CERT] = pki.der("ClientA")  # type: ignore[assignment]
    return client


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    total = sum(TRIED.values())
    print(f"\nJSON intake fuzzing: {total} bodies ({TRIED})")


def rows(factory: sessionmaker[Session]) -> tuple[int, ...]:
    with factory() as session:
        return tuple(
            int(session.scalar(select(func.count()).select_from(model)) or 0)
            for model in (Request, RequestEvent, OutboxRow, BookmarkQueueItem)
        )


def check_answer(
    name: str,
    factory: sessionmaker[Session],
    client: FlaskClient,
    path: str,
    body: bytes,
    content_type: str = "application/json",
) -> Any:
    """POST ``body``; the answer must be a success or a JSON 4xx, and a 4xx writes nothing."""
    TRIED[name] = TRIED.get(name, 0) + 1
    before = rows(factory)
    response = client.post(path, data=body, headers={"Content-Type": content_type})
    assert response.status_code in {200, 202, 400, 409, 413, 415}, response.get_data(as_text=True)
    assert response.is_json
    assert response.json is not None
    if response.status_code >= 400:
        assert response.json["error"]
        assert response.json["code"]
        assert rows(factory) == before, "a refused body wrote something"
    return response


@FUZZ
@given(document=st.one_of(submission(), VALUES))
def test_any_json_submission_is_answered_without_a_server_error(
    factory: sessionmaker[Session], client_a: FlaskClient, document: Any
) -> None:
    # Given any JSON document as a submission body
    # When it is posted, then the answer is documented; and content JSON cannot hold is a 400
    response = check_answer("submission", factory, client_a, "/requests", encode(document).encode())
    if unstorable(document):
        assert response.status_code == 400, response.json


@FUZZ
@given(document=st.one_of(stimulus(), VALUES))
def test_any_json_event_is_answered_without_a_server_error(
    factory: sessionmaker[Session], client_a: FlaskClient, document: Any
) -> None:
    response = check_answer(
        "event", factory, client_a, "/events/approval", encode(document).encode()
    )
    if unstorable(document):
        assert response.status_code == 400, response.json


@FUZZ
@given(body=st.binary(max_size=200), path=st.sampled_from(["/requests", "/events/approval"]))
def test_any_bytes_are_answered_without_a_server_error(
    factory: sessionmaker[Session], client_a: FlaskClient, body: bytes, path: str
) -> None:
    check_answer("bytes", factory, client_a, path, body)


MEDIA_TYPES = st.one_of(
    st.sampled_from(
        [
            "text/plain",
            "text/json",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "application/json-seq",
            "application/xml",
            "json",
            "application/octet-stream",
        ]
    ),
    st.from_regex(r"\A[a-z]{1,10}/[a-z0-9.+-]{1,15}\Z").filter(
        lambda t: t != "application/json" and not t.endswith("+json")
    ),
)


@FUZZ
@given(content_type=MEDIA_TYPES, path=st.sampled_from(["/requests", "/events/approval"]))
def test_a_body_that_is_not_json_by_its_content_type_is_415(
    factory: sessionmaker[Session], client_a: FlaskClient, content_type: str, path: str
) -> None:
    # Given a valid JSON body sent under a media type that is not JSON
    body = json.dumps({"requestType": "OpenType", "correlationId": "c-1"}).encode()
    # When it is posted, then it is refused as 415 and nothing is written
    response = check_answer("media type", factory, client_a, path, body, content_type)
    assert response.status_code == 415, (content_type, response.json)


@pytest.mark.parametrize(
    "body",
    [
        b'{"requestType": "OpenType", "payload": {"s": "\\ud800"}}',
        b'{"requestType": "OpenType", "payload": {"\\udfff": 1}}',
        b'{"requestType": "OpenType", "payload": {"s": "a\\u0000b"}}',
        b'{"requestType": "OpenType", "payload": {"n": 1e400}}',
        b'{"requestType": "OpenType", "payload": {"n": -1e400}}',
        b'{"requestType": "OpenType", "payload": {"n": NaN}}',
        b'{"requestType": "OpenType", "payload": {"n": [Infinity]}}',
    ],
    ids=["lone-high", "lone-low-key", "nul", "1e400", "-1e400", "nan", "infinity"],
)
def test_the_malformed_inputs_of_the_review_are_400_and_write_nothing(
    factory: sessionmaker[Session], client_a: FlaskClient, body: bytes
) -> None:
    response = check_answer("review inputs", factory, client_a, "/requests", body)
    assert response.status_code == 400
