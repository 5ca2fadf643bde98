"""Reading Elsa's workflow-instance list request (``ListWorkflowInstancesRequest``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from broker.console.api.params import args
from broker.errors import BadRequest
from broker.registry.files import MAX_VERSION
from broker.runtime.admin import instance_queries as queries
from broker.safety.bounded import parse_int

#: Elsa's ``TimestampFilterOperator``, in the enum's order (a number is its index)
OPERATORS = ("Is", "IsNot", "LessThan", "GreaterThan", "LessThanOrEqual", "GreaterThanOrEqual")
COLUMNS = {"createdat": "created", "updatedat": "updated", "finishedat": "finished"}


def values(body: dict[str, Any], name: str) -> list[str]:
    """A filter given in the JSON body (POST) or the query string (GET), single or repeated."""
    found: list[str] = []
    for key, value in body.items():
        if key.lower() == name.lower():
            items = value if isinstance(value, list) else [value]
            found.extend(str(v) for v in items if v is not None and v != "")
    return found or args(name)


def one(body: dict[str, Any], name: str) -> str | None:
    found = values(body, name)
    return found[0] if found else None


def number(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    """A whole number from the body or the query string, within ``[low, high]`` (the broker's
    one number parser: ASCII digits only)."""
    found = next((v for k, v in body.items() if k.lower() == name.lower()), None)
    raw = found if found is not None and found != "" else one({}, name)
    if raw is None:
        return None
    return parse_int(raw, name, low=low, high=high)


def flag(body: dict[str, Any], name: str) -> bool | None:
    raw = one(body, name)
    if raw is None:
        return None
    if raw.lower() not in ("true", "false"):
        raise BadRequest(f"'{name}' must be true or false, not {raw!r}")
    return raw.lower() == "true"


def timestamp_filters(body: dict[str, Any]) -> list[queries.TimestampFilter]:
    raw = next((v for k, v in body.items() if k.lower() == "timestampfilters"), None) or []
    if not isinstance(raw, list):
        raise BadRequest("'timestampFilters' must be a list")
    found = []
    for index, item in enumerate(raw):
        where = f"timestampFilters[{index}]"
        if not isinstance(item, dict):
            raise BadRequest(f"'{where}' must be an object")
        fields = {k.lower(): v for k, v in item.items()}
        column = COLUMNS.get(str(fields.get("column") or "").lower())
        if column is None:
            raise BadRequest(f"'{where}.column' must be CreatedAt, UpdatedAt or FinishedAt")
        operator = fields.get("operator", 0)
        if isinstance(operator, int) and not isinstance(operator, bool):
            operator = OPERATORS[operator] if 0 <= operator < len(OPERATORS) else None
        if operator not in OPERATORS:
            raise BadRequest(f"'{where}.operator' must be one of {', '.join(OPERATORS)}")
        try:
            stamp = dt.datetime.fromisoformat(str(fields.get("timestamp")))
        except ValueError:
            raise BadRequest(f"'{where}.timestamp' must be an ISO 8601 time") from None
        found.append(queries.TimestampFilter(column, str(operator), stamp))
    return found


def instance_filter(body: dict[str, Any]) -> queries.InstanceFilter:
    version = number(body, "version", 1, MAX_VERSION)
    return queries.InstanceFilter(
        statuses=values(body, "status") + values(body, "statuses"),
        sub_statuses=values(body, "subStatus") + values(body, "subStatuses"),
        definition_ids=values(body, "definitionId") + values(body, "definitionIds"),
        correlation_id=one(body, "correlationId"),
        version=version,
        search=one(body, "searchTerm"),
        has_incidents=flag(body, "hasIncidents"),
        # The broker has no system workflows: asking only for them finds nothing.
        system_only=flag(body, "isSystem") is True,
        timestamps=timestamp_filters(body),
    )
