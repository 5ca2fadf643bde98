"""Conversion of values by Elsa/.NET type name."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from broker.engine.model.convert import convert, format_timespan, parse_timespan

LIST_OF_INT = "System.Collections.Generic.List`1[[System.Int32, System.Private.CoreLib]]"
FLOW_JOIN_MODE = "Elsa.Workflows.Core.Activities.Flowchart.Models.FlowJoinMode, Elsa.Workflows.Core"


@pytest.mark.parametrize(
    ("value", "type_name", "expected"),
    [
        # Strings
        ("Hello", "String", "Hello"),
        (4, "String", "4"),
        (2.5, "System.String", "2.5"),
        (3.0, "String", "3"),
        (True, "String", "True"),
        ({"a": [1]}, "String", '{"a":[1]}'),
        ("", "String", ""),
        # Integers
        ("4", "Int32", 4),
        (" -7 ", "System.Int64", -7),
        (5.0, "Int32", 5),
        ("7", "Int32?", 7),
        ("200", "System.Nullable`1[[System.Int32, System.Private.CoreLib]]", 200),
        ("", "Int32", None),
        # Floating point
        ("2.5", "Double", 2.5),
        (3, "Decimal", 3.0),
        ("1e3", "Single", 1000.0),
        # Booleans
        ("True", "Boolean", True),
        ("false", "Boolean", False),
        (" TRUE ", "System.Boolean", True),
        (0, "Boolean", False),
        (True, "Boolean", True),
        # Objects and JSON
        ('{"a": 1}', "Object", {"a": 1}),
        ('["GET"]', "Object", ["GET"]),
        ("plain text", "Object", "plain text"),
        ("[not json", "Object", "[not json"),
        ('{"a": 1}', "ExpandoObject", {"a": 1}),
        ('{"a": 1}', "IDictionary<String, Object>", {"a": 1}),
        ("42", "JsonElement", 42),
        ("words", "JsonElement", "words"),
        ({"already": "parsed"}, "Object", {"already": "parsed"}),
        # Arrays
        ('["a", "b"]', "String[]", ["a", "b"]),
        ('[1, "2"]', LIST_OF_INT, [1, 2]),
        ('["One","Two","Three"]', "Object[]", ["One", "Two", "Three"]),
        (("x", "y"), "List<String>", ["x", "y"]),
        ([1, None], "Int32[]", [1, None]),
        # Time spans (seconds)
        ("00:00:05", "TimeSpan", 5.0),
        ("00:01:00", "System.TimeSpan", 60.0),
        ("1.02:03:04.5", "TimeSpan", 93784.5),
        ("PT1M30S", "TimeSpan", 90.0),
        (5, "TimeSpan", 5.0),
        (datetime.timedelta(minutes=2), "TimeSpan", 120.0),
        # Dates, GUIDs, characters
        (
            "2024-05-01T10:00:00Z",
            "DateTimeOffset",
            datetime.datetime(2024, 5, 1, 10, tzinfo=datetime.UTC),
        ),
        ("2024-05-01T10:00:00", "DateTime", datetime.datetime(2024, 5, 1, 10)),
        ("2024-05-01", "DateOnly", datetime.date(2024, 5, 1)),
        ("6F9619FF-8B86-D011-B42D-00C04FC964FF", "Guid", "6f9619ff-8b86-d011-b42d-00c04fc964ff"),
        ("x", "Char", "x"),
        # Enum-like strings and unknown types pass through
        ("WaitAll", FLOW_JOIN_MODE, "WaitAll"),
        ("Timer", "Elsa.Scheduling.Models.DelayBlockingStrategy, Elsa.Scheduling", "Timer"),
        ({"Content-Type": "x"}, "Elsa.Http.Models.HttpHeaders, Elsa.Http", {"Content-Type": "x"}),
        ("OK", "System.Net.HttpStatusCode, System.Net.Primitives", "OK"),
        # No type name, no value
        ("4", None, "4"),
        ("4", "", "4"),
        (None, "Int32", None),
    ],
)
def test_values_convert_to_the_named_type(value: Any, type_name: str, expected: Any) -> None:
    assert convert(value, type_name) == expected


def test_converted_types_are_exact() -> None:
    # Given conversions where equality would hide the type (True == 1, 5.0 == 5)
    # Then the Python types are the .NET type's counterparts
    assert type(convert("1", "Int32")) is int
    assert type(convert("1", "Double")) is float
    assert type(convert("true", "Boolean")) is bool
    assert type(convert("00:00:01", "TimeSpan")) is float


def test_is_array_flag_converts_each_element() -> None:
    assert convert('["1", "2"]', "Int32", is_array=True) == [1, 2]


@pytest.mark.parametrize(
    ("value", "type_name", "message"),
    [
        ("x", "Int32", "not an integer"),
        ("1.5", "Int32", "not an integer"),
        (1.5, "Int64", "not a whole number"),
        (2**40, "Int32", "out of range"),
        (-1, "Byte", "out of range"),
        (True, "Int32", "boolean"),
        ("yes", "Boolean", "true or false"),
        ("NaN", "Double", "finite"),
        ("[1, 2]", "ExpandoObject", "JSON object"),
        ("soon", "TimeSpan", "time span"),
        ("25:00:00", "TimeSpan", "out of range"),
        ("tomorrow", "DateTime", "'DateTime'"),
        ("not-a-guid", "Guid", "'Guid'"),
        ("ab", "Char", "single character"),
        ("a,b", "String[]", "JSON array"),
        ({"a": 1}, "String[]", "not an array"),
    ],
)
def test_bad_values_raise_value_error_naming_value_and_type(
    value: Any, type_name: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        convert(value, type_name)
    assert type_name in str(caught.value) or "time span" in str(caught.value)


@pytest.mark.parametrize("seconds", [0.0, 5.0, 59.5, 3600.0, 93784.25, -90.0])
def test_timespan_text_round_trips(seconds: float) -> None:
    assert parse_timespan(format_timespan(seconds)) == pytest.approx(seconds)


def test_timespan_text_uses_the_dotnet_constant_format() -> None:
    assert format_timespan(5) == "00:00:05"
    assert format_timespan(93784.5) == "1.02:03:04.5000000"
    assert convert(datetime.timedelta(seconds=65), "String") == "00:01:05"
