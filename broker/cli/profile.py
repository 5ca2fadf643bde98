"""The ``broker`` command's client profile, written by ``broker run`` as a private file, read only
from where it is written and when no one else can have written it (docs/design.md, section 2)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.errors import ConfigError
from broker.safety.private_files import read_private, write_private
from broker.settings import Settings

FILE_NAME = "cli-profile.json"
#: where ``broker --profile FILE`` is kept for the commands below it (click's ``ctx.meta``)
CONTEXT_KEY = "broker.cli.profile"
VERSION = 1
#: keys never written into a profile: the CLI needs none of them
SECRET_MARKERS = ("SECRET", "PASSWORD", "TOKEN")


@dataclasses.dataclass(frozen=True)
class Profile:
    """The client settings one ``broker run`` used."""

    url: str
    cert: str
    key: str
    ca: str
    console_url: str | None = None
    console_key: str | None = None
    #: the ``BROKER_*`` keys the run was given (secrets left out)
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    path: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "url": self.url,
            "cert": self.cert,
            "key": self.key,
            "ca": self.ca,
            "consoleUrl": self.console_url,
            "consoleKey": self.console_key,
            "settings": dict(self.settings),
        }


def default_path(settings: Settings) -> Path:
    """``BROKER_PROFILE``, else ``cli-profile.json`` in the var folder."""
    return Path(settings.profile) if settings.profile else settings.var_path / FILE_NAME


def shareable(keys: Mapping[str, str]) -> dict[str, str]:
    """The keys a profile may hold: no secret, and not the profile's own location."""
    return {
        name: value
        for name, value in keys.items()
        if name != "BROKER_PROFILE" and not any(m in name for m in SECRET_MARKERS)
    }


def write(profile: Profile, path: Path) -> Path:
    """Write ``profile`` to ``path`` as a private file (``0600``, a fresh file renamed into place,
    never written through a link or into a file that was there): it may hold the console's
    development key."""
    path = path.absolute()
    return write_private(path, json.dumps(profile.to_dict(), indent=2) + "\n")


def read(path: Path) -> Profile:
    """The profile in ``path``; ``ConfigError`` naming the file and the field when it is not one,
    or when it is a link or someone else can write it (it says where the CLI connects)."""
    try:
        document = json.loads(read_private(path, "profile"))
    except FileNotFoundError as exc:
        raise ConfigError(f"profile {path} cannot be read: {exc.strerror}", path=str(path)) from exc
    except ValueError as exc:
        raise ConfigError(f"profile {path} is not JSON: {exc}", path=str(path)) from exc
    if not isinstance(document, dict):
        raise ConfigError(f"profile {path} must hold a JSON object", path=str(path))
    if document.get("version") != VERSION:
        raise ConfigError(
            f"profile {path}: field 'version' must be {VERSION}, got {document.get('version')!r}",
            path=str(path),
            field="version",
        )
    text: dict[str, str] = {}
    for name in ("url", "cert", "key", "ca"):
        value = document.get(name)
        if not isinstance(value, str) or not value:
            raise ConfigError(
                f"profile {path}: field {name!r} must be a non-empty string",
                path=str(path),
                field=name,
            )
        text[name] = value
    optional: dict[str, str | None] = {}
    for name in ("consoleUrl", "consoleKey"):
        value = document.get(name)
        if value is not None and not isinstance(value, str):
            raise ConfigError(
                f"profile {path}: field {name!r} must be a string or null",
                path=str(path),
                field=name,
            )
        optional[name] = value or None
    settings = document.get("settings", {})
    if not isinstance(settings, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in settings.items()
    ):
        raise ConfigError(
            f"profile {path}: field 'settings' must map names to strings",
            path=str(path),
            field="settings",
        )
    return Profile(
        **text,
        console_url=optional["consoleUrl"],
        console_key=optional["consoleKey"],
        settings=shareable(settings),
        path=path,
    )


def find(settings: Settings, chosen: str | Path | None = None) -> Profile | None:
    """The profile to use: ``chosen`` (``--profile``) or ``BROKER_PROFILE``, which must exist;
    else ``cli-profile.json`` in the var folder if ``broker run`` wrote one; else None.

    Only where ``broker run`` writes it (``default_path``): never a profile in some folder above,
    which anyone who can write there could have put in the CLI's way."""
    if chosen:
        return read(Path(chosen))
    if settings.profile:
        return read(Path(settings.profile))
    path = default_path(settings)
    if not path.exists() and not path.is_symlink():
        return None
    return read(path.absolute())


def apply(found: Profile | None) -> None:
    """Make the run's ``BROKER_*`` keys this process's defaults (its own environment wins)."""
    from broker.settings import given_keys, set_settings

    if found is not None and found.settings:
        set_settings(Settings.from_env({**found.settings, **given_keys()}))
