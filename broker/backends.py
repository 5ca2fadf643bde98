"""Backends chosen from one scheme table per port, with one URL parser for all of them (the way
Celery's ``BACKEND_ALIASES`` and ``by_url`` do): schemes are case-insensitive everywhere."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TypeVar

from broker.errors import ConfigError

T = TypeVar("T")
C = TypeVar("C")


@dataclasses.dataclass(frozen=True)
class BackendUrl:
    """A backend URL as the ports read it: ``postgresql+psycopg://u@h/db`` has the scheme
    ``postgresql+psycopg``, the family ``postgresql`` and the location ``u@h/db``."""

    setting: str
    scheme: str
    location: str

    @property
    def family(self) -> str:
        """The scheme without a driver suffix (``postgresql+psycopg`` → ``postgresql``)."""
        return self.scheme.split("+", 1)[0]

    @property
    def url(self) -> str:
        """The URL with its scheme in lower case (redis-py and libpq accept no other)."""
        return f"{self.scheme}://{self.location}"

    @property
    def plain_url(self) -> str:
        """The URL under its family's scheme, for clients that know no driver suffix (libpq)."""
        return f"{self.family}://{self.location}"

    def folder(self, example: str) -> str:
        """The folder of a ``file://DIR`` URL; ``ConfigError`` when it names none."""
        if not self.location:
            raise ConfigError(
                f"{self.setting} {self.scheme}:// needs a folder, e.g. {example}",
                field=self.setting,
            )
        return self.location


def parse_backend_url(setting: str, url: str) -> BackendUrl:
    """``url`` (the value of ``setting``) split into its lower-cased scheme and the rest."""
    text = url.strip()
    scheme, sep, location = text.partition("://")
    if not sep or not scheme:
        raise ConfigError(
            f"{setting}={text!r} is not a URL: expected <scheme>://...", field=setting
        )
    return BackendUrl(setting, scheme.lower(), location)


def scheme_family(url: str) -> str:
    """The lower-cased scheme family of ``url`` (``""`` for text that is no URL)."""
    scheme, sep, _ = url.strip().partition("://")
    return scheme.lower().split("+", 1)[0] if sep else ""


def by_url(
    setting: str,
    url: str,
    aliases: Mapping[str, Callable[[BackendUrl, C], T]],
    context: C,
) -> T:
    """The backend that ``aliases`` (scheme, or scheme family, → factory) names for ``url``, made
    with ``context``; a scheme it does not list is a ``ConfigError`` naming the setting and the
    schemes it supports."""
    parsed = parse_backend_url(setting, url)
    factory = aliases.get(parsed.scheme) or aliases.get(parsed.family)
    if factory is None:
        names = [f"{name}://" for name in aliases]
        choices = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
        raise ConfigError(
            f"{setting} scheme {parsed.scheme!r} is not supported ({choices})", field=setting
        )
    return factory(parsed, context)
