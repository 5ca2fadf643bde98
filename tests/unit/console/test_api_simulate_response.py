"""``/elsa/api/simulate-response``: a status code per call from the caller's session."""

from __future__ import annotations

from collections.abc import Callable

from flask.testing import FlaskClient

from broker.console.api.simulate_response import Sessions

Client = Callable[[str | None], FlaskClient]
URL = "/elsa/api/simulate-response"


def test_a_session_answers_its_codes_in_order_then_starts_again(client_as: Client) -> None:
    viewer = client_as("viewer")
    # Given the default codes, When one session calls four times, Then 429, 503, 200, 429
    codes = [viewer.get(f"{URL}?sessionId=s").status_code for _ in range(4)]
    assert codes == [429, 503, 200, 429]
    answer = viewer.get(f"{URL}?sessionId=other&codes=[418]")
    assert (answer.status_code, answer.get_json()) == (418, {"message": "I'm a Teapot"})


def test_bad_codes_and_no_credentials_are_refused(client_as: Client) -> None:
    viewer = client_as("viewer")
    for query in ("codes=nope", "codes={}", "codes=[]", "codes=[99]", "codes=[true]"):
        assert viewer.get(f"{URL}?{query}").status_code == 400, query
    assert client_as(None).get(URL).status_code == 401


def test_sessions_are_bounded_and_expire() -> None:
    # Given room for one open session and a clock the test moves
    now = [0.0]
    store = Sessions(capacity=1, ttl=10, clock=lambda: now[0])
    assert store.next_index("a", 2) == 0
    # Then a second session is refused until the first expires
    assert store.next_index("b", 2) is None
    now[0] = 11
    assert store.next_index("b", 2) == 0
    # And a session's last code ends it (a shorter list never reads past its end)
    assert store.next_index("b", 1) == 0
    assert store.next_index("b", 2) == 0
