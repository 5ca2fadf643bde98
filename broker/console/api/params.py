"""What the Elsa API routes read: JSON bodies (through the broker's one bounded reader), and
query-string paging and version options (through its one number parser)."""

from __future__ import annotations

import dataclasses
from typing import Any

from flask import request

from broker.errors import BadRequest
from broker.registry.files import MAX_VERSION
from broker.safety.bounded import WORKFLOW_MAX_DEPTH, JsonLimits, parse_int
from broker.settings import Settings
from broker.web.context import services
from broker.web.inputs import body_limits, read_json

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
#: the highest page number (zero-based): a million pages of the largest size is past any table
MAX_PAGE = 1_000_000
#: the highest ``skip`` of a page given by offset
MAX_SKIP = MAX_PAGE * MAX_PAGE_SIZE
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


def definition_limits(settings: Settings, *, wrapped: bool = False) -> JsonLimits:
    """What a body carrying a workflow definition may hold: the definition's own nesting limit
    (one level more when it comes wrapped in an object, as a save's ``model``), any number of keys
    within the size."""
    depth = WORKFLOW_MAX_DEPTH + 1 if wrapped else WORKFLOW_MAX_DEPTH
    return JsonLimits(max_bytes=settings.max_body_bytes, max_depth=depth)


def json_body(*, definition: bool = False, wrapped: bool = False) -> Any:
    """The request body as JSON, read by the broker's bounded reader: a malformed, too large, too
    deep body, or one holding NaN, Infinity, an overflowing number, a lone surrogate or a NUL, is
    refused with a 4xx naming what is wrong, before anything acts on it."""
    settings = services().settings
    if not definition:
        return read_json(settings, body_limits(settings))
    limits = definition_limits(settings, wrapped=wrapped)
    try:
        return read_json(settings, limits)
    except BadRequest as exc:
        if wrapped and exc.details.get("limit") == limits.max_depth:
            # Said of the definition, not of the envelope that carries it one level down.
            raise BadRequest(
                f"JSON nesting exceeds {WORKFLOW_MAX_DEPTH} levels in the workflow definition",
                field="model",
                limit=WORKFLOW_MAX_DEPTH,
            ) from None
        raise


def body_object(*, definition: bool = False, wrapped: bool = False) -> dict[str, Any]:
    """The request body, which must be a JSON object (``json_body``)."""
    data = json_body(definition=definition, wrapped=wrapped)
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object", field="body")
    return data


def optional_body_object() -> dict[str, Any]:
    """The JSON object of a POST that may come without a body (then ``{}``); a GET has none."""
    if request.method != "POST" or not request.get_data(cache=True).strip():
        return {}
    return body_object()


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


def int_arg(name: str, default: int | None, *, low: int = 0, high: int) -> int | None:
    """A whole-number query parameter within ``[low, high]`` (the broker's one number parser)."""
    raw = arg(name)
    if raw is None:
        return default
    return parse_int(raw, name, low=low, high=high)


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
    page = int_arg("page", 0, high=MAX_PAGE)
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
        if not value.isascii() or not value.isdigit():
            raise BadRequest(
                f"'versionOptions' must be one of {', '.join(sorted(NAMED_VERSION_OPTIONS))} "
                f"or a version number, not {value!r}",
                field="versionOptions",
            )
        number = parse_int(value, "versionOptions", low=1, high=MAX_VERSION)
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
