"""Value conversion by Elsa/.NET type name (``Int32``, ``TimeSpan``, ``String[]``...), choosing
JSON-friendly values where .NET's differ (docs/design.md, section 1)."""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["convert", "format_timespan", "parse_timespan"]

# Collection generics whose single type argument is the element type.
_LIST_GENERICS = frozenset(
    {
        "list",
        "ilist",
        "icollection",
        "ienumerable",
        "ireadonlylist",
        "ireadonlycollection",
        "collection",
        "hashset",
        "iset",
        "immutablearray",
        "immutablelist",
    }
)
_DICT_NAMES = frozenset(
    {
        "dictionary",
        "idictionary",
        "ireadonlydictionary",
        "expandoobject",
        "jsonobject",
    }
)

_INT_RANGES: dict[str, tuple[int, int]] = {
    "byte": (0, 2**8 - 1),
    "sbyte": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "short": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "ushort": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "uint": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "long": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
    "ulong": (0, 2**64 - 1),
}
_INTEGER_TEXT = re.compile(r"[+-]?\d+")
# .NET's "c" format ("[-][d.]hh:mm[:ss[.fffffff]]") and its "g" format with days ("d:h:mm:ss").
_TIMESPAN_TEXTS = (
    re.compile(
        r"(?P<sign>-)?(?:(?P<days>\d+)\.)?(?P<hours>\d{1,2}):(?P<minutes>\d{1,2})"
        r"(?::(?P<seconds>\d{1,2})(?:\.(?P<fraction>\d{1,7}))?)?"
    ),
    re.compile(
        r"(?P<sign>-)?(?P<days>\d+):(?P<hours>\d{1,2}):(?P<minutes>\d{1,2})"
        r":(?P<seconds>\d{1,2})(?:\.(?P<fraction>\d{1,7}))?"
    ),
)
_ISO_DURATION = re.compile(
    r"(?P<sign>-)?P(?:(?P<weeks>\d+(?:\.\d+)?)W)?(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def convert(value: Any, type_name: str | None, *, is_array: bool = False) -> Any:
    """Convert ``value`` to the Elsa/.NET type ``type_name`` (docs/design.md, section 1).

    ``is_array`` marks a variable or input declared with ``isArray: true`` and a scalar
    ``type_name``: the value must then be a list (or JSON array text) of that type.
    """
    if value is None or not type_name:
        return value
    element, array = _parse_type_name(type_name)
    if array and element == "byte" and isinstance(value, str):
        # System.Text.Json writes a byte[] as base64 text; the state keeps it so (JSON)
        try:
            base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"{_preview(value)} is not base64 for type {type_name!r}") from exc
        return value
    if is_array or array:
        return _to_list(value, element, type_name)
    return _convert_scalar(value, element, type_name)


@functools.lru_cache(maxsize=1024)
def _parse_type_name(type_name: str) -> tuple[str, bool]:
    """Split a .NET type name into (lower-cased short element name, is a list); cached, as a
    workflow names few types and evaluates them on every activity."""
    name = type_name.strip()
    if name.endswith("[]"):
        return _parse_type_name(name[:-2])[0], True
    generic = re.fullmatch(r"([\w.]+)(?:`\d+)?\s*(?:\[\[(.+)\]\]|<(.+)>)(?:\s*,.*)?", name)
    if generic:
        outer = _short_name(generic.group(1))
        argument = generic.group(2) or generic.group(3) or ""
        if outer == "nullable":
            return _parse_type_name(_first_type_argument(argument))[0], False
        if outer in _LIST_GENERICS:
            return _parse_type_name(_first_type_argument(argument))[0], True
        return outer, False
    # Drop the assembly qualifier: "Elsa.Http.Models.HttpHeaders, Elsa.Http".
    name = name.split(",", 1)[0].strip()
    name = name.removesuffix("?")
    return _short_name(name), False


def _first_type_argument(argument: str) -> str:
    """The first type argument of ``[[A, Asm],[B, Asm]]`` or ``<A, B>`` contents."""
    depth = 0
    for index, char in enumerate(argument):
        if char in "[<":
            depth += 1
        elif char in "]>":
            depth -= 1
        elif char == "," and depth == 0:
            return argument[:index].strip().strip("[]")
    return argument.strip().strip("[]")


def _short_name(name: str) -> str:
    return name.rsplit(".", 1)[-1].split("`", 1)[0].lower()


def _to_list(value: Any, element: str, type_name: str) -> Any:
    items: Any = value
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            items = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a JSON array for type {type_name!r}") from exc
    elif isinstance(value, tuple | set | frozenset):
        items = list(value)
    if not isinstance(items, list):
        raise ValueError(f"{_preview(value)} is not an array for type {type_name!r}")
    return [None if item is None else _convert_scalar(item, element, type_name) for item in items]


def _convert_scalar(value: Any, name: str, type_name: str) -> Any:
    converter = _CONVERTERS.get(name)
    if converter is None:
        return value
    if name not in _TEXT_TYPES and isinstance(value, str) and not value.strip():
        return None
    try:
        return converter(value, name)
    except (TypeError, OverflowError) as exc:
        raise ValueError(f"cannot convert {_preview(value)} to {type_name!r}: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"cannot convert {_preview(value)} to {type_name!r}: {exc}") from exc


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# Scalar converters: each receives a non-None value and the short type name. ---------------------


def _to_string(value: Any, _name: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return format_timespan(value.total_seconds())
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def _to_char(value: Any, _name: str) -> str:
    if not isinstance(value, str) or len(value) != 1:
        raise ValueError("expected a single character")
    return value


def _to_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():
            raise ValueError("not a whole number")
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if not _INTEGER_TEXT.fullmatch(text):
            raise ValueError("not an integer")
        number = int(text)
    else:
        raise ValueError("not a number")
    low, high = _INT_RANGES[name]
    if not low <= number <= high:
        raise ValueError(f"out of range [{low}, {high}]")
    return number


def _to_float(value: Any, _name: str) -> float:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        number = float(value.strip())
    else:
        raise ValueError("not a number")
    if not math.isfinite(number):
        raise ValueError("not a finite number")
    return number


def _to_bool(value: Any, _name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "false"):
            return text == "true"
    raise ValueError("expected true or false")


def _to_object(value: Any, _name: str) -> Any:
    # "Object" is the catch-all type: only text that looks like JSON is parsed, so a plain
    # string literal stays a string.
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _to_json_value(value: Any, _name: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _to_dict(value: Any, _name: str) -> dict[str, Any]:
    parsed = json.loads(value) if isinstance(value, str) else value
    if not isinstance(parsed, Mapping):
        raise ValueError("expected a JSON object")
    return dict(parsed)


def _to_json_array(value: Any, _name: str) -> list[Any]:
    parsed = json.loads(value) if isinstance(value, str) else value
    if not isinstance(parsed, list | tuple):
        raise ValueError("expected a JSON array")
    return list(parsed)


def _to_timespan(value: Any, _name: str) -> float:
    return parse_timespan(value)


def _to_datetime(value: Any, name: str) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        result = value
    elif isinstance(value, datetime.date):
        result = datetime.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        result = datetime.datetime.fromisoformat(value.strip())
    else:
        raise ValueError("expected an ISO-8601 date and time")
    if name == "datetimeoffset" and result.tzinfo is None:
        # A DateTimeOffset always has an offset; an offset-less text is read as UTC.
        result = result.replace(tzinfo=datetime.UTC)
    return result


def _to_date(value: Any, _name: str) -> datetime.date:
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        return datetime.date.fromisoformat(value.strip())
    raise ValueError("expected an ISO-8601 date")


def _to_guid(value: Any, _name: str) -> str:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str):
        return str(uuid.UUID(value.strip()))
    raise ValueError("expected a GUID")


_TEXT_TYPES = frozenset({"string", "char", "object", "jsonelement", "jsonnode"})

_CONVERTERS: dict[str, Callable[[Any, str], Any]] = {
    "string": _to_string,
    "char": _to_char,
    **dict.fromkeys(_INT_RANGES, _to_int),
    **dict.fromkeys(("double", "single", "float", "decimal"), _to_float),
    **dict.fromkeys(("boolean", "bool"), _to_bool),
    "object": _to_object,
    **dict.fromkeys(("jsonelement", "jsonnode"), _to_json_value),
    **dict.fromkeys(_DICT_NAMES, _to_dict),
    "jsonarray": _to_json_array,
    "timespan": _to_timespan,
    **dict.fromkeys(("datetime", "datetimeoffset"), _to_datetime),
    "dateonly": _to_date,
    "guid": _to_guid,
}


# TimeSpan ----------------------------------------------------------------------------------------


def parse_timespan(value: Any) -> float:
    """Seconds from a TimeSpan value: a number of seconds, "[-][d.]hh:mm[:ss[.fffffff]]",
    an ISO-8601 duration ("PT5S") or a ``timedelta``. Raises ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a time span")
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, int | float):
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ValueError(f"{value!r} is not a finite time span")
        return seconds
    if not isinstance(value, str):
        raise ValueError(f"{_preview(value)} is not a time span")
    text = value.strip()
    try:
        return _to_float(text, "double")
    except ValueError:
        pass
    for pattern in _TIMESPAN_TEXTS:
        match = pattern.fullmatch(text)
        if match:
            return _clock_seconds(match, value)
    match = _ISO_DURATION.fullmatch(text)
    if match and any(match[unit] for unit in ("weeks", "days", "hours", "minutes", "seconds")):
        factors = {"weeks": 604800, "days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}
        total = sum(float(match[unit] or 0) * factor for unit, factor in factors.items())
        return -total if match["sign"] else total
    raise ValueError(f"{value!r} is not a time span (expected seconds, 'hh:mm:ss' or 'PT..S')")


def _clock_seconds(match: re.Match[str], value: str) -> float:
    hours, minutes = int(match["hours"]), int(match["minutes"])
    seconds = int(match["seconds"] or 0)
    if hours > 23 or minutes > 59 or seconds > 59:
        raise ValueError(f"{value!r} is not a time span: a field is out of range")
    total = (
        int(match["days"] or 0) * 86400
        + hours * 3600
        + minutes * 60
        + seconds
        + int((match["fraction"] or "0").ljust(7, "0")) / 10**7
    )
    return -total if match["sign"] else total


def format_timespan(seconds: float) -> str:
    """.NET's constant TimeSpan format: "[-][d.]hh:mm:ss[.fffffff]"."""
    sign = "-" if seconds < 0 else ""
    ticks = round(abs(seconds) * 10**7)
    whole, fraction = divmod(ticks, 10**7)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{sign}{f'{days}.' if days else ''}{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{text}.{fraction:07d}" if fraction else text
