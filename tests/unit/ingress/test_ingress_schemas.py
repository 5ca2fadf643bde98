"""Body limits and validation helpers."""

from __future__ import annotations

import pytest

from broker.errors import BadRequest
from broker.ingress.schemas import check_keys, parse_submission
from broker.safety.bounded import JsonLimits, check_shape


def test_depth_counts_nested_containers() -> None:
    check_shape({"a": [{"b": 1}]}, JsonLimits(None, 3, 10))
    with pytest.raises(BadRequest, match="nesting"):
        check_shape({"a": [{"b": []}]}, JsonLimits(None, 3, 10))


def test_key_count_is_over_the_whole_document() -> None:
    check_shape({"a": {"b": 1}, "c": 2}, JsonLimits(None, 5, 3))
    with pytest.raises(BadRequest, match="keys"):
        check_shape({"a": {"b": 1, "d": 2}, "c": 2}, JsonLimits(None, 5, 3))


def test_blank_required_key_counts_as_missing_and_extras_are_sorted() -> None:
    missing, unexpected = check_keys({"A": " ", "Z": "1", "B": "2"}, ("A", "B"), False)
    assert (missing, unexpected) == (["A"], ["Z"])
    assert check_keys({"Z": "1"}, (), True) == ([], [])


def test_key_names_compare_case_insensitively_as_elsa_broker() -> None:
    # Given required keys InvoiceNumber, VendorCode and keys sent in other cases
    keys = {"invoicenumber": "1", "VENDORCODE": "V"}
    # Then nothing is missing and nothing is unexpected
    assert check_keys(keys, ("InvoiceNumber", "VendorCode"), False) == ([], [])
    # And a blank value still counts missing whatever its case, an extra is named as sent
    assert check_keys(
        {"INVOICENUMBER": " ", "vendorCode": "V", "Other": "x"},
        ("InvoiceNumber", "VendorCode"),
        False,
    ) == (
        ["InvoiceNumber"],
        ["Other"],
    )
    # And a character whose upper case is longer matches only itself (ordinal comparison)
    assert check_keys({"STRASSE": "1"}, ("Straße",), True) == (["Straße"], [])


def test_submission_keys_default_to_empty_and_payload_null_is_absent() -> None:
    submission = parse_submission({"requestType": "T", "payload": None}, None)
    assert (submission.keys, submission.payload) == ({}, None)


@pytest.mark.parametrize("key", ["", " ", "x" * 201, "a\x00b"])
def test_bad_idempotency_keys_are_refused(key: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_submission({"requestType": "T"}, key)
    assert caught.value.details["field"] == "Idempotency-Key"


def test_body_hash_ignores_key_order_but_not_values() -> None:
    a = parse_submission({"requestType": "T", "keys": {"x": "1", "y": "2"}}, None)
    b = parse_submission({"requestType": "T", "keys": {"y": "2", "x": "1"}}, None)
    c = parse_submission({"requestType": "T", "keys": {"y": "2", "x": "3"}}, None)
    assert a.body_hash() == b.body_hash() != c.body_hash()
