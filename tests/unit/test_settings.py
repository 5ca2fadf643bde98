"""Settings: defaults, parsing, unknown keys, and the docs that must agree with the code."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from broker.errors import ConfigError
from broker.setting_keys import KEYS
from broker.settings import Settings, UnknownKeyWarning

ROOT = Path(__file__).resolve().parents[2]


def test_every_key_has_a_settings_attribute_and_back() -> None:
    fields = {f.name for f in dataclasses.fields(Settings)} - {
        "callback_secret_set",
        "console_secret_set",
    }
    assert fields == {k.attr for k in KEYS}
    assert len({k.env for k in KEYS}) == len(KEYS)


def test_defaults_match_the_design() -> None:
    # Given an empty environment
    s = Settings.from_env({})
    # Then the contract's defaults hold
    assert s.database_url == "sqlite:///var/broker.db"
    assert s.queue_url == "filesystem://"
    assert s.lock_url == "file://var/locks"
    assert s.workflow_paths == ("workflows",)
    assert s.public_bind == "0.0.0.0:5001"
    assert s.internal_bind == "127.0.0.1:5080"
    assert s.max_body_bytes == 1048576
    assert s.distributed is False
    assert s.allow_local_locks is False
    assert s.max_outbox_delivery_attempts == 10
    assert s.bookmark_queue_max_delivery_attempts == 3
    assert s.bookmark_queue_ttl == 600
    assert s.dead_letter_ttl == 7 * 24 * 3600
    assert s.orphaned_outbox_retention == 24 * 3600


def test_values_are_parsed_to_their_types() -> None:
    s = Settings.from_env(
        {
            "BROKER_WORKFLOW_PATHS": "a:b/c:",
            "BROKER_DISTRIBUTED": "yes",
            "BROKER_MAX_BODY_BYTES": "2048",
            "BROKER_HTTP_ALLOWLIST": "api.example.com, *.internal:8443",
            "BROKER_FLOWCHART_MODE": "tokenbased",
        }
    )
    assert s.workflow_paths == ("a", "b/c")
    assert s.distributed is True
    assert s.max_body_bytes == 2048
    assert s.http_allowlist == ("api.example.com", "*.internal:8443")
    assert s.flowchart_mode == "TokenBased"


def test_an_invalid_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match="BROKER_MAX_BODY_BYTES"):
        Settings.from_env({"BROKER_MAX_BODY_BYTES": "lots"})


def test_unknown_broker_keys_warn_and_others_are_ignored() -> None:
    with pytest.warns(UnknownKeyWarning, match="BROKER_DATABSE_URL"):
        Settings.from_env({"BROKER_DATABSE_URL": "x", "PATH": "/bin"})


def test_callback_secret_unset_is_generated_once_and_empty_rejects(tmp_path: Path) -> None:
    # Given no configured secret
    s = Settings.from_env({"BROKER_VAR_DIR": str(tmp_path)})
    # When it is resolved twice
    first, second = s.resolved_callback_secret(), s.resolved_callback_secret()
    # Then one strong secret was generated and kept
    assert first == second
    assert len(first) >= 32
    assert (tmp_path / "callback-secret").stat().st_mode & 0o077 == 0
    # And an explicitly empty one stays empty (every callback is then rejected)
    assert Settings.from_env({"BROKER_CALLBACK_SECRET": ""}).resolved_callback_secret() == ""


def test_callback_secrets_are_current_then_previous_and_none_when_disabled() -> None:
    def live(**env: str) -> tuple[str, ...]:
        return Settings.from_env(env).callback_secrets()

    assert live(BROKER_CALLBACK_SECRET="new", BROKER_CALLBACK_SECRET_PREVIOUS="old") == (
        "new",
        "old",
    )
    assert live(BROKER_CALLBACK_SECRET="new") == ("new",)
    assert live(BROKER_CALLBACK_SECRET="new", BROKER_CALLBACK_SECRET_PREVIOUS="new") == ("new",)
    # An empty current secret disables callbacks, even during a rotation
    assert live(BROKER_CALLBACK_SECRET="", BROKER_CALLBACK_SECRET_PREVIOUS="old") == ()


def _env_example() -> dict[str, str]:
    found: dict[str, str] = {}
    text = (ROOT / "config" / "broker.env.example").read_text()
    for match in re.finditer(r"^#?\s*(BROKER_[A-Z0-9_]+)=(.*)$", text, re.MULTILINE):
        found[match.group(1)] = match.group(2).strip()
    return found


def _readme_table() -> dict[str, str]:
    found: dict[str, str] = {}
    text = (ROOT / "README.md").read_text()
    for match in re.finditer(r"^\|\s*`(BROKER_[A-Z0-9_]+)`\s*\|\s*([^|]*)\|", text, re.MULTILINE):
        default = match.group(2).strip()
        found[match.group(1)] = "" if default == "(empty)" else default.strip("`")
    return found


@pytest.mark.parametrize("source", [_env_example, _readme_table], ids=["env-example", "readme"])
def test_docs_list_every_key_with_the_code_default(source: object) -> None:
    # Given the keys and defaults documented in the file
    documented = source()  # type: ignore[operator]
    expected = {k.env: k.default for k in KEYS}
    # Then the docs and the code agree exactly, both ways
    assert sorted(set(expected) - set(documented)) == [], "keys missing from the docs"
    assert sorted(set(documented) - set(expected)) == [], "docs list keys the code does not know"
    wrong = {k: (documented[k], v) for k, v in expected.items() if documented[k] != v}
    assert wrong == {}, "documented defaults differ from the code (docs, code)"
