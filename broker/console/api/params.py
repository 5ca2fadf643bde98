"""Query-string parsing shared by the Elsa API routes: paging and version options."""

from __future__ import annotations

import dataclasses

from flask import request

from broker.errors import BadRequest

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
NAMED_VERSION_OPTIONS = frozenset(
    {
        "AllVersions",
        "Draft",
        "Latest",
        "Published",
        "LatestOrPublished",
        "LatestAndPublished",
    }
)


def arg(name: str) -> str | None:
    """A query parameter by case-insensitive name; blank counts as absent."""
    lowered = name.lower()
    for key, value in request.args.items(multi=True):
        if key.lower() == lowered and value.strip():
            return value.strip()
    return None


def args(name: str) -> list[str]:
    """Every value of a repeated query parameter (case-insensitive name)."""
    lowered = name.lower()
    return [v for k, v in request.args.items(multi=True) if k.lower() == lowered and v.strip()]


def int_arg(name: str, default: int | None, *, low: int = 0, high: int | None = None) -> int | None:
    raw = arg(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"'{name}' must be an integer, not {raw!r}") from None
    if value < low or (high is not None and value > high):
        upper = f" and {high}" if high is not None else ""
        raise BadRequest(f"'{name}' must be between {low}{upper}")
    return value


def bool_arg(name: str, default: bool = False) -> bool:
    raw = arg(name)
    if raw is None:
        return default
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise BadRequest(f"'{name}' must be true or false, not {raw!r}")


@dataclasses.dataclass(frozen=True)
class PageArgs:
    page: int  # zero-based, as Elsa pages
    page_size: int

    @property
    def offset(self) -> int:
        return self.page * self.page_size


def page_args() -> PageArgs:
    page = int_arg("page", 0)
    size = int_arg("pageSize", DEFAULT_PAGE_SIZE, low=1, high=MAX_PAGE_SIZE)
    assert page is not None
    assert size is not None
    return PageArgs(page, size)


@dataclasses.dataclass(frozen=True)
class VersionOptions:
    """Which versions of a definition a query means (Elsa's ``VersionOptions``)."""

    name: str  # one of NAMED_VERSION_OPTIONS, or "Specific"
    version: int | None = None

    @classmethod
    def parse(cls, raw: str | None, default: str = "Latest") -> VersionOptions:
        value = (raw or default).strip()
        if value in NAMED_VERSION_OPTIONS:
            return cls(value)
        if value == "All":
            return cls("AllVersions")
        try:
            number = int(value)
        except ValueError:
            raise BadRequest(
                f"'versionOptions' must be one of {', '.join(sorted(NAMED_VERSION_OPTIONS))} "
                f"or a version number, not {value!r}"
            ) from None
        if number < 1:
            raise BadRequest("'versionOptions' must be a version number of 1 or more")
        return cls("Specific", number)

    def matches(self, *, version: int, is_latest: bool, is_published: bool) -> bool:
        if self.name == "Specific":
            return version == self.version
        if self.name == "Latest":
            return is_latest
        if self.name == "Published":
            return is_published
        if self.name == "Draft":
            return not is_published
        if self.name == "LatestAndPublished":
            return is_latest and is_published
        return True  # AllVersions; LatestOrPublished is resolved per definition by the caller
