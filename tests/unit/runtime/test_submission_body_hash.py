"""The idempotency body hash: which fields it covers, and its canonical form (it is stored with
each request, so a change of form would make every stored Idempotency-Key conflict)."""

from __future__ import annotations

import hashlib
import json

from broker.runtime.requests.submission import Submission

BODY = Submission("InvoiceProcess", {"b": "2", "a": "ü"}, {"z": 1, "y": [1, "é"]})


def test_the_hash_is_sha256_of_the_canonical_json_of_the_body() -> None:
    # Canonical: sorted keys, no spaces, UTF-8 as is (not \\u escapes)
    canonical = (
        '{"keys":{"a":"ü","b":"2"},"payload":{"y":[1,"é"],"z":1},"requestType":"InvoiceProcess"}'
    )
    assert BODY.body_hash() == hashlib.sha256(canonical.encode()).hexdigest()
    assert BODY.body_hash() == "5cd7e023703c6d1d9962b8eeb1553d22a347d2762d29767cddfc77357a438871"


def test_the_order_of_keys_in_the_body_does_not_matter() -> None:
    reordered = Submission("InvoiceProcess", {"a": "ü", "b": "2"}, {"y": [1, "é"], "z": 1})
    assert reordered.body_hash() == BODY.body_hash()


def test_every_field_of_the_body_is_covered_but_not_the_key_itself() -> None:
    variants = [
        Submission("OtherType", BODY.keys, BODY.payload),
        Submission(BODY.request_type, {**BODY.keys, "b": "3"}, BODY.payload),
        Submission(BODY.request_type, BODY.keys, {"z": 2}),
        Submission(BODY.request_type, BODY.keys, None),
        Submission(BODY.request_type, BODY.keys, BODY.payload, callback_url="https://h.test/x"),
    ]
    hashes = {v.body_hash() for v in variants} | {BODY.body_hash()}
    assert len(hashes) == len(variants) + 1
    # The Idempotency-Key names the body; it is not part of it
    keyed = Submission(BODY.request_type, BODY.keys, BODY.payload, idempotency_key="k-1")
    assert keyed.body_hash() == BODY.body_hash()
    # A callback URL is hashed as the body field it is
    with_callback = variants[-1].body_hash()
    expected = json.dumps(
        {
            "requestType": "InvoiceProcess",
            "keys": dict(BODY.keys),
            "payload": BODY.payload,
            "callbackUrl": "https://h.test/x",
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert with_callback == hashlib.sha256(expected.encode()).hexdigest()
