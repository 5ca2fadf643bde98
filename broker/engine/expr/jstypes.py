"""The .NET types of Elsa's JavaScript type registry, as the broker's sandbox offers them
(``broker/engine/expr/dotnet.js`` implements them): name, TypeScript declaration, description."""

from __future__ import annotations

__all__ = ["TYPES"]

#: Elsa registers DateTime, DateTimeOffset, TimeSpan, Guid, Random and LogPersistenceMode
#: (ConfigureEngineWithCommonTypes), and its variable types whose names are identifiers
#: (ConfigureEngineWithWorkflowVariableTypes: Decimal, ExpandoObject, JsonElement, JsonNode,
#: JsonObject, Stream).
TYPES: tuple[tuple[str, str, str], ...] = (
    (
        "DateTime",
        "declare class DateTime { static readonly Now: DateTime; static readonly UtcNow:"
        " DateTime; static readonly Today: DateTime; static Parse(text: string): DateTime;"
        " readonly Year: number; readonly Month: number; readonly Day: number; readonly Hour:"
        " number; readonly Minute: number; readonly Second: number; readonly Millisecond:"
        " number; readonly DayOfWeek: string; readonly DayOfYear: number; readonly Date:"
        " DateTime; readonly TimeOfDay: TimeSpan; AddYears(n: number): DateTime; AddMonths(n:"
        " number): DateTime; AddDays(n: number): DateTime; AddHours(n: number): DateTime;"
        " AddMinutes(n: number): DateTime; AddSeconds(n: number): DateTime; AddMilliseconds(n:"
        " number): DateTime; Add(span: TimeSpan): DateTime; Subtract(other: DateTime |"
        " TimeSpan): any; CompareTo(other: DateTime): number; ToUniversalTime(): DateTime;"
        " ToString(format?: string): string; }",
        ".NET's DateTime in UTC: `DateTime.UtcNow.AddDays(1).ToString('yyyy-MM-dd')`",
    ),
    (
        "DateTimeOffset",
        "declare class DateTimeOffset extends DateTime { static readonly Now: DateTimeOffset;"
        " static readonly UtcNow: DateTimeOffset; static Parse(text: string): DateTimeOffset;"
        " readonly Offset: TimeSpan; readonly UtcDateTime: DateTime; }",
        ".NET's DateTimeOffset, at offset zero",
    ),
    (
        "TimeSpan",
        "declare class TimeSpan { static readonly Zero: TimeSpan; static FromDays(n: number):"
        " TimeSpan; static FromHours(n: number): TimeSpan; static FromMinutes(n: number):"
        " TimeSpan; static FromSeconds(n: number): TimeSpan; static FromMilliseconds(n:"
        " number): TimeSpan; static Parse(text: string): TimeSpan; readonly Days: number;"
        " readonly Hours: number; readonly Minutes: number; readonly Seconds: number; readonly"
        " Milliseconds: number; readonly TotalDays: number; readonly TotalHours: number;"
        " readonly TotalMinutes: number; readonly TotalSeconds: number; readonly"
        " TotalMilliseconds: number; Add(other: TimeSpan): TimeSpan; Subtract(other: TimeSpan):"
        " TimeSpan; Negate(): TimeSpan; Duration(): TimeSpan; ToString(): string; }",
        ".NET's TimeSpan: `TimeSpan.FromHours(2).TotalMinutes`",
    ),
    (
        "Guid",
        "declare class Guid { static readonly Empty: Guid; static NewGuid(): Guid; static"
        " Parse(text: string): Guid; constructor(text?: string | number[]); ToString(format?:"
        " string): string; ToByteArray(): number[]; Equals(other: any): boolean;"
        " CompareTo(other: Guid | string): number; }",
        ".NET's Guid: `Guid.NewGuid().ToString()`, `'' + Guid.Empty`; crosses back as its text",
    ),
    (
        "Random",
        "declare class Random { static readonly Shared: Random; constructor(seed?: number);"
        " Next(maxOrMin?: number, max?: number): number; NextInt64(maxOrMin?: number, max?:"
        " number): number; NextDouble(): number; NextSingle(): number; }",
        ".NET's Random: `new Random().Next(1, 7)` (a seed repeats a sequence, not .NET's)",
    ),
    (
        "LogPersistenceMode",
        "declare class LogPersistenceMode { static readonly Inherit: string; static readonly"
        " Include: string; static readonly Exclude: string; }",
        "Elsa's LogPersistenceMode enum, its members as their names (`LogPersistenceMode.Include`)",
    ),
    (
        "Decimal",
        "declare class Decimal { static readonly Zero: number; static readonly One: number;"
        " static readonly MinusOne: number; static readonly MaxValue: number; static readonly"
        " MinValue: number; static Parse(text: string): number; static Round(value: number,"
        " decimals?: number, mode?: number | string): number; static Floor(value: number):"
        " number; static Ceiling(value: number): number; static Truncate(value: number):"
        " number; static Negate(value: number): number; static Add(a: number, b: number):"
        " number; static Subtract(a: number, b: number): number; static Multiply(a: number, b:"
        " number): number; static Divide(a: number, b: number): number; static Remainder(a:"
        " number, b: number): number; static Compare(a: number, b: number): number; static"
        " ToDouble(value: number): number; static ToInt32(value: number): number; static"
        " ToInt64(value: number): number; }",
        ".NET's Decimal over numbers: `Decimal.Round(2.345, 2)` rounds half to even, as .NET",
    ),
    (
        "ExpandoObject",
        "declare class ExpandoObject { [name: string]: any; }",
        "an object to fill (`new ExpandoObject()`); crosses back as a JSON object",
    ),
    (
        "JsonNode",
        "declare class JsonNode { static Parse(text: string): any; }",
        "System.Text.Json's JsonNode: `JsonNode.Parse(text)` gives the parsed value",
    ),
    (
        "JsonObject",
        "declare class JsonObject { constructor(entries?: any); [name: string]: any; }",
        "System.Text.Json's JsonObject: an object to fill",
    ),
    (
        "JsonElement",
        "declare class JsonElement {}",
        "System.Text.Json's JsonElement (variables of that type arrive as their JSON value)",
    ),
    (
        "Stream",
        "declare class Stream {}",
        ".NET's Stream, abstract (stream variables arrive as bytes)",
    ),
)
