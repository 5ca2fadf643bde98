"""The client profile ``broker run`` writes and the ``broker`` command reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.cli import profile
from broker.errors import ConfigError
from broker.settings import Settings


def sample(**changes: object) -> profile.Profile:
    values: dict[str, object] = {
        "url": "https://localhost:5001",
        "cert": "/x/DevClient.pem",
        "key": "/x/DevClient.key",
        "ca": "/x/ca.pem",
        "console_url": "http://127.0.0.1:5090",
        "console_key": "bk_dev",
        "settings": {"BROKER_PUBLIC_BIND": "127.0.0.1:5001"},
    }
    values.update(changes)
    return profile.Profile(**values)  # type: ignore[arg-type]


def test_a_written_profile_reads_back_and_only_its_owner_can_read_it(tmp_path: Path) -> None:
    path = profile.write(sample(), tmp_path / "var" / profile.FILE_NAME)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert profile.read(path) == sample(path=path)


def test_secrets_never_go_into_a_profile() -> None:
    kept = profile.shareable({
        "BROKER_CALLBACK_SECRET": "s", "BROKER_CONSOLE_SECRET": "s",
        "BROKER_PROFILE": "elsewhere.json", "BROKER_DATABASE_URL": "sqlite:///var/b.db",
    })  # fmt: skip
    assert kept == {"BROKER_DATABASE_URL": "sqlite:///var/b.db"}


def test_the_var_folder_profile_is_found_else_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings.from_env({})
    assert profile.find(settings) is None
    profile.write(sample(), tmp_path / "var" / profile.FILE_NAME)
    found = profile.find(settings)
    assert found is not None
    assert found.url == "https://localhost:5001"
    # And from a subfolder of that folder too
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert profile.find(settings) is not None


def test_a_chosen_profile_must_exist(tmp_path: Path) -> None:
    settings = Settings.from_env({"BROKER_PROFILE": str(tmp_path / "none.json")})
    with pytest.raises(ConfigError, match=r"none\.json"):
        profile.find(settings)
    with pytest.raises(ConfigError, match=r"other\.json"):
        profile.find(Settings.from_env({}), tmp_path / "other.json")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"version": 9}, "version"),
        ({"url": ""}, "url"),
        ({"cert": 3}, "cert"),
        ({"consoleKey": ["x"]}, "consoleKey"),
        ({"settings": {"BROKER_X": 1}}, "settings"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_field(
    tmp_path: Path, change: dict[str, object], field: str
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**sample().to_dict(), **change}))
    with pytest.raises(ConfigError, match=field) as raised:
        profile.read(path)
    assert raised.value.details["field"] == field


def test_the_runs_keys_are_defaults_under_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from broker import settings as settings_module

    monkeypatch.setenv("BROKER_INTERNAL_BIND", "127.0.0.1:7000")
    found = sample(settings={"BROKER_PUBLIC_BIND": "127.0.0.1:6001",
                             "BROKER_INTERNAL_BIND": "127.0.0.1:6002"})  # fmt: skip
    try:
        profile.apply(found)
        current = settings_module.get_settings()
        assert current.public_bind == "127.0.0.1:6001"
        assert current.internal_bind == "127.0.0.1:7000"
    finally:
        settings_module.set_settings(None)
