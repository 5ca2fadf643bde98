"""Lenient readings of the activity inputs the interpreter itself relies on, so control flow never
depends on a conversion hint (a Literal ``"True"`` or ``"00:00:05"`` arriving unconverted)."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

_TIMESPAN = re.compile(
    r"^(?:(?P<days>\d+)\.)?(?P<hours>\d+):(?P<minutes>\d+)(?::(?P<seconds>\d+(?:\.\d+)?))?$"
)
_ISO_DURATION = re.compile(
    r"^P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def as_int(value: Any, default: int = 0) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return int(value)
    return int(float(value)) if isinstance(value, str) else int(value)


def as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def as_list(value: Any) -> list[Any]:
    """A list from a list, a JSON array text, a comma-separated text, or a single value."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            parsed = json.loads(text)
            return list(parsed) if isinstance(parsed, list) else [parsed]
        return [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(value, dict):
        return list(value.items())
    return [value]


def as_timedelta(value: Any) -> dt.timedelta:
    """``"00:00:05"``, ``"1.02:00:00"``, ``"PT5S"``, seconds as a number, or a timedelta."""
    if isinstance(value, dt.timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.timedelta(seconds=value)
    if isinstance(value, str):
        text = value.strip()
        match = _TIMESPAN.match(text) or _ISO_DURATION.match(text)
        if match:
            parts = {k: float(v) for k, v in match.groupdict().items() if v}
            return dt.timedelta(**parts)
        try:
            return dt.timedelta(seconds=float(text))
        except ValueError:
            pass
    raise ValueError(f"not a time span: {value!r}")


def as_datetime(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, str):
        moment = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    else:
        raise ValueError(f"not a date and time: {value!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def as_outcomes(value: Any) -> tuple[str, ...]:
    """Outcome names from a string, a JSON array text or a list."""
    if value is None:
        return ()
    if isinstance(value, str) and not value.strip().startswith("["):
        return (value,)
    return tuple(as_text(item) for item in as_list(value))
