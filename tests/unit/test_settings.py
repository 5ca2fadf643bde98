"""Settings: defaults, parsing, unknown keys, and the docs that must agree with the code."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from urllib.parse import urlsplit

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


@pytest.mark.parametrize("value", ["0", "-1", "101", "many"])
def test_a_worker_death_limit_out_of_range_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match="BROKER_MAX_WORKER_DEATHS"):
        Settings.from_env({"BROKER_MAX_WORKER_DEATHS": value})


def test_a_worker_death_limit_at_or_above_the_delivery_attempts_is_refused() -> None:
    with pytest.raises(ConfigError, match="BROKER_MAX_WORKER_DEATHS=10 must be below"):
        Settings.from_env({"BROKER_MAX_WORKER_DEATHS": "10"})
    s = Settings.from_env(
        {"BROKER_MAX_WORKER_DEATHS": "10", "BROKER_MAX_OUTBOX_DELIVERY_ATTEMPTS": "11"}
    )
    assert s.max_worker_deaths == 10


def test_the_var_folder_moves_every_default_place_under_it(tmp_path: Path) -> None:
    # Given BROKER_VAR_DIR and no other place configured
    var = tmp_path / "state"
    s = Settings.from_env({"BROKER_VAR_DIR": str(var)})
    # Then the embedded database, locks, certificates, files and mail all live under it
    assert s.database_url == f"sqlite:///{var}/broker.db"
    assert s.lock_url == f"file://{var}/locks"
    assert (s.tls_cert, s.tls_key, s.tls_client_ca) == (
        f"{var}/certs/server.pem",
        f"{var}/certs/server.key",
        f"{var}/certs/ca.pem",
    )
    assert s.file_storage_url == f"file://{var}/files"
    assert s.smtp_url == f"file://{var}/mail"
    # And a place given explicitly stays where it was given
    given = Settings.from_env({"BROKER_VAR_DIR": str(var), "BROKER_LOCK_URL": "file://elsewhere"})
    assert given.lock_url == "file://elsewhere"
    assert given.database_url == f"sqlite:///{var}/broker.db"


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


# Placeholders (issue 34, finding 2) -------------------------------------------------------------

#: where the shipped files assign a secret: ``NAME=value`` (env files), ``NAME: value`` (YAML)
_ASSIGNMENT = re.compile(
    r"(?m)^\s*(?:#\s*)?(?:-\s*)?(?:--from-literal=)?"
    r"(BROKER_CONSOLE_SECRET|BROKER_CALLBACK_SECRET(?:_PREVIOUS)?|BROKER_DATABASE_URL|"
    r"FLOWER_PASSWORD|POSTGRES_PASSWORD|PGPASSWORD)[ \t]*[:=][ \t]*['\"]?([^'\"\s]+)"
)


def shipped_secret_values() -> list[tuple[str, str, str]]:
    """(file, setting, value) of every secret a file in config/ or deploy/ ships with a value."""
    found = []
    for folder in ("config", "deploy"):
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or path.suffix in (".json", ".py", ".png"):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for name, value in _ASSIGNMENT.findall(text):
                if "$" in value:
                    continue  # filled in from elsewhere (compose interpolation, a shell)
                if name.endswith("_URL") and not urlsplit(value).password:
                    continue  # a URL without a password holds no secret
                found.append((str(path.relative_to(ROOT)), name, value))
    return found


SHIPPED = shipped_secret_values()


def test_the_shipped_files_have_placeholders_to_check() -> None:
    # The scan finds the examples' placeholders: the trial overlay's console secret among them
    assert ("deploy/k8s/overlays/trial/secrets.yaml", "BROKER_CONSOLE_SECRET") in {
        (f, n) for f, n, _ in SHIPPED
    }
    assert len(SHIPPED) >= 6


@pytest.mark.parametrize(
    ("file", "name", "value"), SHIPPED, ids=[f"{f}:{n}" for f, n, _ in SHIPPED]
)
def test_every_shipped_placeholder_is_refused(file: str, name: str, value: str) -> None:
    # Given a secret exactly as a shipped file writes it (POSTGRES_PASSWORD: as libpq gets it)
    env_name = "PGPASSWORD" if name == "POSTGRES_PASSWORD" else name
    # When a process reads its settings, then the placeholder is refused, naming the setting
    with pytest.raises(ConfigError, match=env_name):
        Settings.from_env({env_name: value})


def test_the_trial_overlays_console_secret_cannot_sign_tokens(tmp_path: Path) -> None:
    # Given the console secret the trial overlay ships (long enough to pass a length check)
    (value,) = [v for f, n, v in SHIPPED if f.endswith("trial/secrets.yaml") and "CONSOLE" in n]
    assert len(value) >= 32
    # When a console is built on it (the settings given in code, bypassing the environment)
    from broker.store import db
    from broker.wiring.web import create_console_app as create_app

    settings = Settings.from_env(
        {
            "BROKER_VAR_DIR": str(tmp_path),
            "BROKER_DATABASE_URL": f"sqlite:///{tmp_path / 'broker.db'}",
            "BROKER_WORKFLOW_PATHS": str(ROOT / "workflows"),
            "BROKER_WATCH_WORKFLOWS": "false",
        }
    ).replace(console_secret=value)
    db.upgrade(settings.database_url)
    # Then it refuses to start: no token can ever be forged with the published value
    try:
        with pytest.raises(ConfigError, match="placeholder"):
            create_app(settings)
    finally:
        db.dispose_engines()


@pytest.mark.parametrize(
    "value",
    [
        "REPLACE",
        "replace-me",
        "CHANGE-ME-please-32-characters-long!!",
        "<your secret>",
        "placeholder",
    ],
)
def test_placeholders_are_refused_for_every_secret(value: str) -> None:
    for name in ("BROKER_CONSOLE_SECRET", "BROKER_CALLBACK_SECRET", "FLOWER_PASSWORD"):
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: value})
    with pytest.raises(ConfigError, match="BROKER_DATABASE_URL"):
        Settings.from_env({"BROKER_DATABASE_URL": f"postgresql+psycopg://broker:{value}@db/b"})


def test_real_secrets_and_urls_without_passwords_are_accepted() -> None:
    settings = Settings.from_env(
        {
            "BROKER_CONSOLE_SECRET": "q4Yc1mT0v9xJr2sLw8eZpN3aUk6bHdFg7iOyRtEs",
            "BROKER_CALLBACK_SECRET": "Zt5nQ2wE8rT1yU4iO7pA0sD3fG6hJ9kL",
            "BROKER_DATABASE_URL": "postgresql+psycopg://broker@db.internal:5432/broker",
        }
    )
    assert settings.console_secret.startswith("q4Yc")


def test_a_generated_secret_is_never_read_through_a_link_or_from_a_shared_file(
    tmp_path: Path,
) -> None:
    # Given a var folder where someone put a link in place of the console secret
    var = tmp_path / "var"
    var.mkdir()
    (tmp_path / "theirs").write_text("x" * 40)
    (var / "console-secret").symlink_to(tmp_path / "theirs")
    settings = Settings.from_env({"BROKER_VAR_DIR": str(var)})
    # Then it is refused, not used to sign tokens
    with pytest.raises(ConfigError, match="symbolic link"):
        settings.resolved_console_secret()
    # ... and a secret file others may write is refused too
    (var / "console-secret").unlink()
    (var / "console-secret").write_text("y" * 40)
    (var / "console-secret").chmod(0o666)
    with pytest.raises(ConfigError, match="written by other users"):
        settings.resolved_console_secret()
