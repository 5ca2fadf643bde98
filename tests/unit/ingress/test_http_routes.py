"""Matching a call's path to an HttpEndpoint's route template, as Elsa's route table does."""

from __future__ import annotations

from broker.ingress.http_routes import best_matches, match_route, request_size_limit


def test_a_template_gives_its_parameters_values_in_the_callers_case() -> None:
    # Given Elsa's lower-cased template, When a path matches, Then the values keep their case
    template = "test/users/{userid}/orders/{orderid}"
    assert match_route(template, "test/users/Jane/orders/O-1") == {
        "userid": "Jane",
        "orderid": "O-1",
    }
    # And literal segments match in any case, leading and trailing slashes aside
    assert match_route("/test/basic/", "TEST/Basic") == {}


def test_a_path_with_a_segment_too_many_or_too_few_or_another_literal_matches_nothing() -> None:
    template = "test/users/{userid}/orders/{orderid}"
    assert match_route(template, "test/users/123/orders") is None
    assert match_route(template, "test/users/123/invalid-path") is None
    assert match_route(template, "test/users/1/orders/2/more") is None
    assert match_route("test/basic", "test/other") is None


def test_optional_and_catch_all_parameters() -> None:
    assert match_route("files/{name?}", "files") == {}
    assert match_route("files/{name?}", "files/a.txt") == {"name": "a.txt"}
    assert match_route("docs/{*rest}", "docs/a/b/c") == {"rest": "a/b/c"}
    assert match_route("items/{id:int}", "items/7") == {"id": "7"}


def test_an_exact_path_wins_over_a_template() -> None:
    # Given a template and an exact path that both match, Then the exact one comes first
    found = best_matches([("template", "orders/{id}"), ("exact", "orders/new")], "orders/new")
    assert [item for item, _ in found] == ["exact", "template"]


def test_the_endpoints_request_size_limit_is_read_from_its_literal_input() -> None:
    document = {
        "root": {
            "id": "Sequence1",
            "type": "Elsa.Sequence",
            "activities": [
                {
                    "id": "HttpEndpoint1",
                    "type": "Elsa.HttpEndpoint",
                    "requestSizeLimit": {"expression": {"type": "Literal", "value": "8"}},
                },
                {"id": "Other", "type": "Elsa.HttpEndpoint"},
            ],
        }
    }
    assert request_size_limit(document, "HttpEndpoint1") == 8
    assert request_size_limit(document, "Other") is None
    assert request_size_limit(document, "missing") is None
