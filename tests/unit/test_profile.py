"""The client profile ``broker run`` writes and the ``broker`` command reads."""

from __future__ import annotations

import json
import os
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


def test_a_profile_in_a_parent_folder_is_never_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a var/cli-profile.json in a folder above the current one (anyone able to write there
    # could steer the CLI to their server and database)
    profile.write(sample(url="https://attacker.example:5001"), tmp_path / "var" / profile.FILE_NAME)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    # When the CLI looks for its profile, then it reads only where the broker writes it
    assert profile.find(Settings.from_env({})) is None


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_profile_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    # Given a profile that someone else could have written
    path = profile.write(sample(), tmp_path / "var" / profile.FILE_NAME)
    path.chmod(mode)
    # When it is read, then it is refused, naming the file and why
    with pytest.raises(ConfigError, match="can be written by other users"):
        profile.read(path)


def test_a_profile_owned_by_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a profile whose owner is not this user (nor root)
    path = profile.write(sample(), tmp_path / "var" / profile.FILE_NAME)
    if os.geteuid() == 0:
        os.chown(path, 4242, 4242)  # root may give it away
    else:
        me = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: me + 4242)  # or be someone else
    with pytest.raises(ConfigError, match="belongs to another user"):
        profile.read(path)


def test_a_profile_that_is_a_link_is_refused(tmp_path: Path) -> None:
    target = profile.write(sample(), tmp_path / "theirs.json")
    link = tmp_path / "var" / profile.FILE_NAME
    link.parent.mkdir()
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="symbolic link"):
        profile.find(Settings.from_env({"BROKER_VAR_DIR": str(tmp_path / "var")}))


def test_writing_a_profile_never_follows_a_link_and_always_leaves_0600(tmp_path: Path) -> None:
    # Given links where the profile and its scratch copy go, and a file they point at
    folder = tmp_path / "var"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("theirs")
    path = folder / profile.FILE_NAME
    path.symlink_to(elsewhere)
    (folder / f".{profile.FILE_NAME}.tmp").symlink_to(elsewhere)
    # When the profile is written
    profile.write(sample(), path)
    # Then it is a private file of its own, and the file the links point at is untouched
    assert not path.is_symlink()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert elsewhere.read_text() == "theirs"
    assert profile.read(path).url == "https://localhost:5001"


def test_rewriting_a_profile_left_0644_leaves_it_0600(tmp_path: Path) -> None:
    # Given a profile, and its scratch copy, left readable by everyone
    folder = tmp_path / "var"
    folder.mkdir()
    for stale in (folder / profile.FILE_NAME, folder / f".{profile.FILE_NAME}.tmp"):
        stale.write_text("{}")
        stale.chmod(0o644)
    # When the profile is written again, then only its owner can read it
    path = profile.write(sample(), folder / profile.FILE_NAME)
    assert oct(path.stat().st_mode & 0o777) == "0o600"


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
