"""The client allowlist and request-type rules: files, normalization, database overrides."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from broker.clients.entries import (
    ApiClient,
    RequestTypeRule,
    normalize_fingerprint,
    normalize_thumbprint,
)
from broker.clients.registry import ClientRegistry
from broker.errors import ClientFileError, ConfigError, StoreUnavailable
from broker.settings import Settings
from broker.store import models
from broker.store.db import make_engine, make_session_factory
from tests.support.services import PROJECT_ROOT

SHA1_A = hashlib.sha1(b"cert A").hexdigest().upper()  # noqa: S324 - a thumbprint, as elsa-broker
SHA256_A = hashlib.sha256(b"cert A").hexdigest().upper()
SHA1_B = hashlib.sha1(b"cert B").hexdigest().upper()  # noqa: S324
SHA256_B = hashlib.sha256(b"cert B").hexdigest().upper()


def colons(hex_text: str) -> str:
    return ":".join(hex_text[i : i + 2] for i in range(0, len(hex_text), 2))


def write_json(path: Path, document: Any) -> Path:
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    clients = write_json(
        tmp_path / "clients.json",
        {
            "clients": [
                {
                    "clientId": "ClientA",
                    "thumbprint": colons(SHA1_A.lower()),
                    "description": "first",
                    "scopes": ["read:dead-letters"],
                },
                {"ClientId": "ClientB", "Thumbprint": SHA1_B, "FingerprintSha256": SHA256_B},
            ]
        },
    )
    rules = write_json(
        tmp_path / "requestTypes.json",
        {
            "requestTypes": [
                {
                    "clientId": "ClientA",
                    "requestType": "InvoiceProcess",
                    "requiredKeys": ["InvoiceNumber", "VendorCode"],
                    "allowAdditionalKeys": False,
                },
                {"clientId": "clienta", "requestType": "Ping", "allowAdditionalKeys": True},
            ]
        },
    )
    return clients, rules


def registry_for(
    settings: Settings,
    clients: Path,
    rules: Path,
    factory: sessionmaker[Session] | None = None,
) -> ClientRegistry:
    return ClientRegistry(
        settings.replace(clients_file=str(clients), request_types_file=str(rules)), factory
    )


# Normalization -----------------------------------------------------------------------------------


def test_thumbprints_are_normalized_to_upper_hex_without_colons() -> None:
    # Given a thumbprint in lower case with colons, then it reads as upper hex without colons
    assert normalize_thumbprint(colons(SHA1_A.lower())) == SHA1_A
    assert normalize_fingerprint(f" {colons(SHA256_A)} ") == SHA256_A


@pytest.mark.parametrize("text", ["", "XYZ", SHA1_A[:-2], SHA256_A])
def test_a_text_that_is_no_sha1_thumbprint_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="thumbprint") as refused:
        normalize_thumbprint(text)
    assert str(refused.value) == f"{text!r} is not a SHA-1 thumbprint (40 hex digits)"


@pytest.mark.parametrize("text", ["", "XYZ", SHA256_A[:-2], SHA1_A])
def test_a_text_that_is_no_sha256_fingerprint_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="fingerprint") as refused:
        normalize_fingerprint(text)
    assert str(refused.value) == f"{text!r} is not a SHA-256 fingerprint (64 hex digits)"


# Files -------------------------------------------------------------------------------------------


def test_clients_and_rules_are_read_case_insensitively(
    settings: Settings, files: tuple[Path, Path]
) -> None:
    # Given the files (one entry spelled with .NET-style capitalized keys)
    registry = registry_for(settings, *files)

    # When clients and rules are looked up in other spellings
    client = registry.get("CLIENTA")
    other = registry.get("clientb")
    rule = registry.rule_for("clientA", "invoiceprocess")

    # Then they are found, normalized, with the file's spelling kept
    assert client == ApiClient("ClientA", SHA1_A, None, "first", frozenset({"read:dead-letters"}))
    assert other is not None
    assert other.fingerprint_sha256 == SHA256_B
    assert rule == RequestTypeRule(
        "ClientA", "InvoiceProcess", ("InvoiceNumber", "VendorCode"), False
    )
    assert [r.request_type for r in registry.rules_for("CLIENTA")] == ["InvoiceProcess", "Ping"]
    assert registry.rules_for("ClientB") == []
    assert registry.rule_for("ClientB", "InvoiceProcess") is None


def test_clients_authenticate_by_sha1_thumbprint_or_sha256_fingerprint(
    settings: Settings, files: tuple[Path, Path]
) -> None:
    # Given client A listed by thumbprint and client B by thumbprint and fingerprint
    registry = registry_for(settings, *files)

    # When certificates are presented
    by_sha1 = registry.authenticate(sha1_thumbprint=SHA1_A.lower(), sha256_fingerprint=SHA256_A)
    by_sha256 = registry.authenticate(sha1_thumbprint="00" * 20, sha256_fingerprint=SHA256_B)
    stranger = registry.authenticate(sha1_thumbprint="11" * 20, sha256_fingerprint="22" * 32)
    mismatch = registry.authenticate(sha1_thumbprint=SHA1_B, sha256_fingerprint="33" * 32)

    # Then A is known by SHA-1, B by SHA-256; a stranger is not, and a SHA-1 match whose
    # client lists another SHA-256 fingerprint is refused
    assert by_sha1 is not None
    assert by_sha1.client_id == "ClientA"
    assert by_sha256 is not None
    assert by_sha256.client_id == "ClientB"
    assert stranger is None
    assert mismatch is None


def test_the_shipped_files_let_the_dev_client_submit_its_request_types(settings: Settings) -> None:
    # Given the files in config/
    registry = registry_for(
        settings,
        PROJECT_ROOT / "config" / "clients.json",
        PROJECT_ROOT / "config" / "requestTypes.json",
    )

    # When the dev client's rules are read, then InvoiceProcess is allowed (and nothing else)
    invoice = registry.rule_for("DevClient", "InvoiceProcess")
    assert invoice is not None
    assert invoice.required_keys == ("InvoiceNumber", "VendorCode")
    assert registry.rule_for("devclient", "BenchFiveSteps") is None


def test_a_missing_file_contributes_nothing(settings: Settings, tmp_path: Path) -> None:
    registry = registry_for(settings, tmp_path / "none.json", tmp_path / "none2.json")
    assert registry.clients() == []
    assert registry.rules_for("ClientA") == []


def test_a_changed_file_is_picked_up_without_an_explicit_load(
    settings: Settings, files: tuple[Path, Path]
) -> None:
    # Given a registry that has served a lookup
    clients, rules = files
    registry = registry_for(settings, clients, rules)
    assert registry.get("ClientC") is None

    # When the clients file gains an entry (its modification time changes)
    document = json.loads(clients.read_text())
    document["clients"].append({"clientId": "ClientC", "thumbprint": "AB" * 20})
    write_json(clients, document)
    stat = clients.stat()
    os.utime(clients, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))

    # Then the next lookup sees it
    assert registry.get("clientc") is not None


A, B = {"clientId": "X", "thumbprint": SHA1_A}, {"clientId": "x", "thumbprint": SHA1_B}
CLIENT_ERRORS: list[tuple[Any, str, str | None]] = [
    ("{not json", "malformed JSON", None),
    ([], "must hold a JSON object", None),
    ({"clients": {}}, "clients must be a list", None),
    ({"clients": [1]}, "entry 0: an entry must be a JSON object", None),
    ({"clients": [{"thumbprint": SHA1_A}]}, "entry 0: clientId must be", None),
    ({"clients": [{**A, "thumbprint": "nothex"}]}, "not a SHA-1 thumbprint", "X"),
    ({"clients": [{"clientId": "X"}]}, "a thumbprint or a fingerprintSha256 is required", "X"),
    ({"clients": [{**A, "scopes": "all"}]}, "scopes must be a list", "X"),
    ({"clients": [A, B]}, "entry 1 (clientId 'x'): the clientId appears twice", "x"),
    (
        {"clients": [A, {"clientId": "Y", "thumbprint": SHA1_A.lower()}]},
        "is already listed for 'X'",
        "Y",
    ),
]


@pytest.mark.parametrize(("content", "reason", "client_id"), CLIENT_ERRORS)
def test_a_malformed_clients_file_names_the_file_and_the_entry(
    settings: Settings,
    files: tuple[Path, Path],
    content: Any,
    reason: str,
    client_id: str | None,
) -> None:
    # Given a malformed clients file
    clients, rules = files
    write_json(clients, content)

    # When the registry loads, then the error names the file, the entry and the reason
    with pytest.raises(ClientFileError) as info:
        registry_for(settings, clients, rules).load()
    assert str(clients) in info.value.message
    assert reason in info.value.message
    if client_id is not None:
        assert f"(clientId {client_id!r})" in info.value.message


RULE_ERRORS = [
    ('{"requestTypes": [{"clientId": "A"}]}', "entry 0 (clientId 'A'): requestType must be"),
    (
        '{"requestTypes": [{"clientId": "A", "requestType": "T", "requiredKeys": "K"}]}',
        "requiredKeys must be a list",
    ),
    (
        '{"requestTypes": [{"clientId": "A", "requestType": "T", "allowAdditionalKeys": "yes"}]}',
        "allowAdditionalKeys must be true or false",
    ),
    (
        '{"requestTypes": [{"clientId": "A", "requestType": "T"}, '
        '{"clientId": "a", "requestType": "t"}]}',
        "entry 1 (clientId 'a'): request type 't' appears",
    ),
]


@pytest.mark.parametrize(("content", "reason"), RULE_ERRORS)
def test_a_malformed_request_types_file_names_the_file_and_the_entry(
    settings: Settings, files: tuple[Path, Path], content: str, reason: str
) -> None:
    clients, rules = files
    write_json(rules, content)
    with pytest.raises(ClientFileError) as info:
        registry_for(settings, clients, rules).load()
    assert str(rules) in info.value.message
    assert reason in info.value.message


# Database overrides ------------------------------------------------------------------------------


def test_database_rows_override_file_entries(
    settings: Settings, files: tuple[Path, Path], factory: sessionmaker[Session]
) -> None:
    # Given the files, and database rows for ClientA (a new certificate) and one of its rules
    registry = registry_for(settings, *files, factory=factory)
    registry.register_client(
        ApiClient("clientA", None, SHA256_A, "from the database", frozenset({"admin"}))
    )
    registry.register_rule(RequestTypeRule("CLIENTA", "invoiceProcess", ("InvoiceNumber",), True))

    # When a fresh registry reads files and database
    fresh = registry_for(settings, *files, factory=factory)
    client = fresh.get("ClientA")
    rule = fresh.rule_for("ClientA", "InvoiceProcess")

    # Then the rows win, the other file entries stay, and the old thumbprint no longer works
    assert client == ApiClient("clientA", None, SHA256_A, "from the database", frozenset({"admin"}))
    assert rule == RequestTypeRule("CLIENTA", "invoiceProcess", ("InvoiceNumber",), True)
    assert fresh.rule_for("ClientA", "Ping") is not None
    assert fresh.authenticate(sha1_thumbprint=SHA1_A, sha256_fingerprint="44" * 32) is None
    found = fresh.authenticate(sha1_thumbprint="55" * 20, sha256_fingerprint=SHA256_A.lower())
    assert found == client


def test_registering_again_updates_the_row(
    settings: Settings, files: tuple[Path, Path], factory: sessionmaker[Session]
) -> None:
    # Given a client registered once
    registry = registry_for(settings, *files, factory=factory)
    registry.register_client(ApiClient("DevClient", SHA1_A, None, "one", frozenset()))

    # When it is registered again with another certificate
    registry.register_client(ApiClient("DevClient", SHA1_B, None, "two", frozenset({"s"})))

    # Then there is one row and the registry serves the new certificate at once
    with factory() as session:
        rows = session.query(models.Client).all()
    assert [(r.client_key, r.thumbprint) for r in rows] == [("devclient", SHA1_B)]
    found = registry.authenticate(sha1_thumbprint=SHA1_B, sha256_fingerprint="")
    assert found is not None
    assert found.description == "two"


def test_an_entry_error_carries_the_file_the_entry_and_the_reason_as_fields(
    settings: Settings, files: tuple[Path, Path]
) -> None:
    clients, rules = files
    write_json(clients, {"clients": [A, {"clientId": "Y", "scopes": "all", **B}]})
    with pytest.raises(ClientFileError) as info:
        registry_for(settings, clients, rules).load()
    assert info.value.details == {
        "file": str(clients),
        "entry": 1,
        "reason": "scopes must be a list of non-empty strings",
    }


def test_registering_a_rule_again_updates_its_row_and_enables_it(
    settings: Settings, files: tuple[Path, Path], factory: sessionmaker[Session]
) -> None:
    # Given a disabled rule row
    with factory() as session, session.begin():
        session.add(
            models.RequestTypeRule(
                client_key="clienta", request_type_key="ping", client_id="ClientA",
                request_type="Ping", required_keys=[], allow_additional_keys=True, enabled=False,
            )
        )  # fmt: skip
    registry = registry_for(settings, *files, factory=factory)
    assert registry.rule_for("ClientA", "Ping") is None
    # When it is registered again with other keys
    registry.register_rule(RequestTypeRule("ClientA", "Ping", ("Id",), False))
    # Then the one row is enabled and holds the new keys
    assert registry.rule_for("ClientA", "ping") == RequestTypeRule(
        "ClientA", "Ping", ("Id",), False
    )
    with factory() as session:
        rows = session.query(models.RequestTypeRule).all()
        assert [(r.request_type_key, r.enabled, r.required_keys) for r in rows] == [
            ("ping", True, ["Id"])
        ]


def test_registering_a_certificate_another_client_has_is_refused_naming_the_client(
    settings: Settings, files: tuple[Path, Path], factory: sessionmaker[Session]
) -> None:
    registry = registry_for(settings, *files, factory=factory)
    registry.register_client(ApiClient("ClientX", SHA1_B, None, "", frozenset()))
    with pytest.raises(ConfigError) as info:
        registry.register_client(ApiClient("ClientY", SHA1_B, None, "", frozenset()))
    assert info.value.message == "client 'ClientY': another client already has this certificate"


def test_registering_without_a_database_is_a_config_error(
    settings: Settings, files: tuple[Path, Path]
) -> None:
    registry = registry_for(settings, *files)
    with pytest.raises(ConfigError) as info:
        registry.register_rule(RequestTypeRule("ClientA", "Ping", (), True))
    assert info.value.message == "registering clients needs a database (no session factory given)"


def test_registering_on_an_unmigrated_database_names_what_could_not_be_registered(
    settings: Settings, files: tuple[Path, Path], tmp_path: Path
) -> None:
    factory = make_session_factory(make_engine(f"sqlite:///{tmp_path / 'empty.db'}"))
    registry = registry_for(settings, *files, factory=factory)
    with pytest.raises(StoreUnavailable, match="could not register rule 'Ping'"):
        registry.register_rule(RequestTypeRule("ClientA", "Ping", (), True))
    with pytest.raises(StoreUnavailable, match="could not register client 'ClientZ'"):
        registry.register_client(ApiClient("ClientZ", SHA1_B, None, "", frozenset()))


def test_the_rules_of_a_client_are_listed_by_request_type_ignoring_case(
    settings: Settings, tmp_path: Path
) -> None:
    clients = write_json(
        tmp_path / "clients.json", {"clients": [{"clientId": "A", "thumbprint": SHA1_A}]}
    )
    rules = write_json(
        tmp_path / "requestTypes.json",
        {"requestTypes": [{"clientId": "A", "requestType": t} for t in ("Ab", "a_b", "AA")]},
    )
    registry = registry_for(settings, clients, rules)
    # In lower case: "_" sorts before every letter (upper-cased, it would sort after them)
    assert [r.request_type for r in registry.rules_for("a")] == ["a_b", "AA", "Ab"]


def test_a_disabled_row_withdraws_a_file_entry_and_the_rows_after_it_still_apply(
    settings: Settings, files: tuple[Path, Path], factory: sessionmaker[Session]
) -> None:
    # Given a disabled database row for ClientA, then (read after it) an enabled one for ClientB
    with factory() as session, session.begin():
        session.add(
            models.Client(
                client_key="clienta", client_id="ClientA", thumbprint=SHA1_A, enabled=False
            )
        )
    with factory() as session, session.begin():
        session.add(
            models.Client(
                client_key="clientb",
                client_id="ClientB",
                fingerprint_sha256=SHA256_A,
                description="from the database",
                scopes=["admin"],
            )
        )

    # When the registry loads, then ClientA is not allowed in, and ClientB is the row's
    registry = registry_for(settings, *files, factory=factory)
    assert registry.get("ClientA") is None
    assert registry.authenticate(sha1_thumbprint=SHA1_A, sha256_fingerprint="") is None
    assert registry.get("ClientB") == ApiClient(
        "ClientB", None, SHA256_A, "from the database", frozenset({"admin"})
    )


def test_an_enabled_row_that_cannot_be_built_refuses_its_client_loudly(
    settings: Settings,
    files: tuple[Path, Path],
    factory: sessionmaker[Session],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given ClientA in clients.json, and an enabled database row replacing it whose thumbprint
    # was mistyped (a database edit bypasses the registration's checks)
    with factory() as session, session.begin():
        session.add(models.Client(client_key="clienta", client_id="ClientA", thumbprint="NOT-HEX"))
    registry = registry_for(settings, *files, factory=factory)
    # When the registry loads
    with caplog.at_level(logging.ERROR, logger="broker.clients.registry"):
        registry.load()
        registry.load()
    # Then ClientA is refused: neither the broken row nor the file entry it replaces admits it
    assert registry.get("ClientA") is None
    assert registry.authenticate(sha1_thumbprint=SHA1_A, sha256_fingerprint="") is None
    # ... the problem is listed with the client and the reason
    (problem,) = registry.problems
    assert problem.client_id == "ClientA"
    assert "thumbprint" in problem.reason.lower()
    # ... and logged once as an error naming the client and the reason, not at every reload
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "ClientA" in errors[0].getMessage()
    assert problem.reason in errors[0].getMessage()


def test_a_registry_that_cannot_read_its_database_answers_503_naming_the_allowlist(
    settings: Settings, files: tuple[Path, Path], tmp_path: Path
) -> None:
    # Given a registry on a database without its tables
    factory = make_session_factory(make_engine(f"sqlite:///{tmp_path / 'empty.db'}"))
    registry = registry_for(settings, *files, factory=factory)
    # When a certificate is looked up, then the client is told the allowlist could not be read
    with pytest.raises(StoreUnavailable) as unavailable:
        registry.authenticate(sha1_thumbprint=SHA1_A, sha256_fingerprint="")
    assert (unavailable.value.status, unavailable.value.to_dict()) == (
        503,
        {
            "error": "could not read the client allowlist from the database",
            "code": "store_unavailable",
        },
    )


# Webhooks ----------------------------------------------------------------------------------------

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def test_webhooks_and_the_callback_flag_are_read_from_a_client_entry(tmp_path: Path) -> None:
    from broker.clients.entries import WebhookConfig, read_clients_file

    path = write_json(
        tmp_path / "clients.json",
        {
            "clients": [
                {
                    "clientId": "ClientA",
                    "thumbprint": SHA1_A,
                    "Webhooks": [
                        {"url": "https://hooks.example.com/a", "secret": SECRET},
                        {
                            "URL": "https://hooks.example.com/b",
                            "events": ["request.processing", "request.completed"],
                            "secret": [SECRET, SECRET],
                        },
                        {"url": "https://hooks.example.com/c", "secret": [SECRET]},
                    ],
                    "allowCallbackUrl": True,
                    "callbackSecret": SECRET,
                },
                {"clientId": "ClientB", "thumbprint": SHA1_B},
            ]
        },
    )
    clients = read_clients_file(path)
    a, b = clients["clienta"], clients["clientb"]
    assert a.webhooks == (
        WebhookConfig(
            "https://hooks.example.com/a",
            ("request.completed", "request.faulted", "request.cancelled"),
            (SECRET,),
        ),
        WebhookConfig(
            "https://hooks.example.com/b",
            ("request.completed", "request.processing"),
            (SECRET, SECRET),
        ),
        WebhookConfig(
            "https://hooks.example.com/c",
            ("request.completed", "request.faulted", "request.cancelled"),
            (SECRET,),
        ),
    )
    assert a.allow_callback_url
    assert a.callback_secret == SECRET
    # The defaults: no webhooks, no callbackUrl
    assert b.webhooks == ()
    assert not b.allow_callback_url
    assert b.callback_secret is None


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"webhooks": {"url": "https://x"}}, "webhooks must be a list"),
        ({"webhooks": ["https://x"]}, "webhooks[0] must be an object with url, events and secret"),
        ({"webhooks": [{"url": "https://x", "a": 1, "b": 2}]}, "unknown field(s) a, b"),
        ({"webhooks": [{"url": "ftp://x"}]}, "webhooks[0].url must be an http"),
        ({"webhooks": [{"url": "https://x", "events": ["request.done"]}]}, "unknown event"),
        ({"webhooks": [{"url": "https://x", "events": []}]}, "webhooks[0].events"),
        ({"webhooks": [{"url": "https://x", "secret": "plain"}]}, "whsec_"),
        ({"webhooks": [{"url": "https://x", "secret": [SECRET] * 3}]}, "list of two"),
        ({"webhooks": [{"url": "https://x", "retries": 3}]}, "unknown field(s) retries"),
        ({"allowCallbackUrl": "yes"}, "allowCallbackUrl must be true or false"),
        ({"allowCallbackUrl": True}, "needs a callbackSecret"),
        ({"callbackSecret": "nope"}, "callbackSecret must be"),
    ],
)
def test_a_malformed_webhook_entry_names_the_client_and_the_field(
    tmp_path: Path, fields: dict[str, Any], reason: str
) -> None:
    from broker.clients.entries import read_clients_file

    entry = {"clientId": "ClientA", "thumbprint": SHA1_A, **fields}
    path = write_json(tmp_path / "clients.json", {"clients": [entry]})
    with pytest.raises(ClientFileError) as refused:
        read_clients_file(path)
    assert "ClientA" in str(refused.value)
    assert reason in str(refused.value)


def test_a_database_row_keeps_the_webhook_settings_of_the_file_entry_it_overrides(
    settings: Settings, tmp_path: Path, factory: sessionmaker[Session]
) -> None:
    from broker.clients.entries import read_clients_file

    # Given a file entry for ClientA with its webhooks and its callbackUrl allowed
    clients = write_json(
        tmp_path / "clients.json",
        {
            "clients": [
                {
                    "clientId": "ClientA",
                    "thumbprint": SHA1_A,
                    "webhooks": [{"url": "https://hooks.example.com/a"}],
                    "allowCallbackUrl": True,
                    "callbackSecret": SECRET,
                }
            ]
        },
    )
    rules = write_json(tmp_path / "requestTypes.json", {"requestTypes": []})
    from_file = read_clients_file(clients)["clienta"]
    assert [w.url for w in from_file.webhooks] == ["https://hooks.example.com/a"]
    registry = registry_for(settings, clients, rules, factory=factory)

    # When rows are registered for ClientA (another certificate) and for ClientC (no file entry)
    registry.register_client(ApiClient("ClientA", SHA1_B, None, None, frozenset({"x"})))
    registry.register_client(ApiClient("ClientC", None, SHA256_B, "row only", frozenset()))

    # Then ClientA has the row's certificate and scopes and the file's webhook settings
    assert registry.get("ClientA") == ApiClient(
        "ClientA",
        SHA1_B,
        None,
        None,
        frozenset({"x"}),
        webhooks=from_file.webhooks,
        allow_callback_url=True,
        callback_secret=SECRET,
    )
    # And ClientC has no webhooks and may name no callbackUrl
    assert registry.get("ClientC") == ApiClient(
        "ClientC",
        None,
        SHA256_B,
        "row only",
        frozenset(),
        webhooks=(),
        allow_callback_url=False,
        callback_secret=None,
    )


THUMB = "a" * 40
SCOPES_REASON = "scopes must be a list of non-empty strings"

ENTRY_REASONS = [
    ({"clientId": "A"}, "a thumbprint or a fingerprintSha256 is required"),
    ({"clientId": "A", "thumbprint": THUMB, "description": 5}, "description must be a string"),
    ({"clientId": "A", "thumbprint": THUMB, "scopes": [" "]}, SCOPES_REASON),
    ({"clientId": "A", "thumbprint": THUMB, "scopes": [5]}, SCOPES_REASON),
    ({"clientId": "A", "thumbprint": 5}, "thumbprint must be a non-empty string"),
    ({"clientId": "A", "fingerprintSha256": 5}, "fingerprintSha256 must be a non-empty string"),
]


@pytest.mark.parametrize(("entry", "reason"), ENTRY_REASONS)
def test_a_client_entry_is_refused_with_its_exact_reason(
    tmp_path: Path, entry: dict[str, Any], reason: str
) -> None:
    from broker.clients.entries import read_clients_file

    path = write_json(tmp_path / "clients.json", {"clients": [entry]})
    with pytest.raises(ClientFileError) as info:
        read_clients_file(path)
    assert info.value.details["reason"] == reason


RULE_REASONS = [
    ({"clientId": 5}, "clientId must be a non-empty string"),
    ({"requiredKeys": [""]}, "requiredKeys must be a list of non-empty strings"),
    ({"requiredKeys": [5]}, "requiredKeys must be a list of non-empty strings"),
    ({"allowAdditionalKeys": "yes"}, "allowAdditionalKeys must be true or false"),
]


@pytest.mark.parametrize(("fields", "reason"), RULE_REASONS)
def test_a_rule_is_refused_with_its_exact_reason(
    tmp_path: Path, fields: dict[str, Any], reason: str
) -> None:
    from broker.clients.entries import read_request_types_file

    rule = {"clientId": "A", "requestType": "T", **fields}
    path = write_json(tmp_path / "requestTypes.json", {"requestTypes": [rule]})
    with pytest.raises(ClientFileError) as info:
        read_request_types_file(path)
    assert info.value.details["reason"] == reason


def test_a_rule_without_allow_additional_keys_allows_none(tmp_path: Path) -> None:
    from broker.clients.entries import read_request_types_file

    rule = {"clientId": "A", "requestType": "T", "requiredKeys": ["K"]}
    path = write_json(tmp_path / "requestTypes.json", {"requestTypes": [rule]})
    assert read_request_types_file(path)["a", "t"].allow_additional_keys is False


def test_a_disabled_rule_row_of_no_file_rule_leaves_the_rule_rows_after_it(
    settings: Settings, files: tuple[Path, Path], factory: sessionmaker[Session]
) -> None:
    # Given a disabled rule row with no file rule to withdraw, then (read after it) an enabled one
    for type_key, enabled in (("nowhere", False), ("pong", True)):
        with factory() as session, session.begin():
            session.add(
                models.RequestTypeRule(
                    client_key="clienta", request_type_key=type_key, client_id="ClientA",
                    request_type=type_key.title(), required_keys=["Id"],
                    allow_additional_keys=False, enabled=enabled,
                )
            )  # fmt: skip
    # When the registry loads, then the disabled row withdraws nothing and the next row applies
    registry = registry_for(settings, *files, factory=factory)
    assert registry.rule_for("ClientA", "Nowhere") is None
    assert registry.rule_for("ClientA", "Pong") == RequestTypeRule(
        "ClientA", "Pong", ("Id",), False
    )
