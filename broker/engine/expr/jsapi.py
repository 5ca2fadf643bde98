"""The JavaScript names a workflow script sees, as Elsa 3 offers them: one declarative list
(``HELPERS``) and the names made per workflow (``FAMILIES``)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from broker.engine.expr.jstypes import TYPES

__all__ = [
    "FAMILIES",
    "HELPERS",
    "Family",
    "Helper",
    "helpers_markdown",
    "is_valid_name",
    "pascalize",
    "typescript_declarations",
    "typescript_type",
]


@dataclasses.dataclass(frozen=True)
class Helper:
    """A name every script sees (``activity``: only scripts of that activity type)."""

    name: str
    declaration: str
    description: str
    source: str | None = None  # None: built per scope by the sandbox (``variables``, ``input``)
    activity: str | None = None
    #: ``function`` (a global function: writable, configurable, not enumerable, as Jint's
    #: SetValue of a delegate) or ``type`` (a .NET type of Elsa's registry: enumerable).
    kind: str = "function"


@dataclasses.dataclass(frozen=True)
class Family:
    """Names made per workflow item; ``{Name}`` is the item's name in PascalCase."""

    pattern: str
    declaration: str
    description: str
    per: str  # "variable", "input" or "output"


_GUID_SOURCE = "() => newGuidText()"
_SHORT_GUID_SOURCE = "() => base64Encode(randomBytes(16)).replace(/[/+=]/g, '')"

HELPERS: tuple[Helper, ...] = (
    # Variables, input, outputs
    Helper(
        "variables",
        "declare var variables: WorkflowVariables;",
        "the workflow's variables by name: `variables.Total` reads, `variables.Total = 1` writes",
    ),
    Helper(
        "input",
        "declare var input: { readonly [name: string]: any };",
        "the workflow's input by name (`input.payload`), read-only",
    ),
    Helper(
        "args",
        "declare var args: { readonly [name: string]: any };",
        "an expression's arguments (none in the broker: an empty object); not in RunJavaScript",
    ),
    Helper(
        "getVariable",
        "declare function getVariable(name: string): any;",
        "a variable in scope by name",
        "(name) => readVariable(String(name))",
    ),
    Helper(
        "setVariable",
        "declare function setVariable(name: string, value: any): void;",
        "sets a variable in scope (created on the workflow when none has that name)",
        "(name, value) => { writeVariable(String(name), value); }",
    ),
    Helper(
        "getInput",
        "declare function getInput(name: string): any;",
        "a workflow input by name (null when absent)",
        "(name) => readInput(String(name))",
    ),
    Helper(
        "getOutputFrom",
        "declare function getOutputFrom(activityIdOrName: string, outputName?: string): any;",
        "an output of an earlier activity, by its id or name (its result when no output is named)",
        "(activity, output) => readOutput(String(activity),"
        " output === undefined || output === null ? null : String(output))",
    ),
    Helper(
        "getLastResult",
        "declare function getLastResult(): any;",
        "the result of the activity that ran last in this step",
        "() => readLast()",
    ),
    # The workflow instance
    Helper(
        "getWorkflowInstanceId",
        "declare function getWorkflowInstanceId(): string;",
        "the workflow instance's id",
        "() => active().data.w",
    ),
    Helper(
        "getCorrelationId",
        "declare function getCorrelationId(): string;",
        "the instance's correlation id (a request's id unless changed)",
        "() => readState('correlationId')",
    ),
    Helper(
        "setCorrelationId",
        "declare function setCorrelationId(value: string): void;",
        "changes the instance's correlation id, as the Correlate activity does",
        "(value) => { writeState('correlationId', value === undefined || value === null"
        " ? null : String(value)); }",
    ),
    Helper(
        "getWorkflowDefinitionId",
        "declare function getWorkflowDefinitionId(): string;",
        "the workflow definition's id",
        "() => readState('definitionId')",
    ),
    Helper(
        "getWorkflowDefinitionVersionId",
        "declare function getWorkflowDefinitionVersionId(): string;",
        "the id of the workflow definition's version",
        "() => readState('definitionVersionId')",
    ),
    Helper(
        "getWorkflowDefinitionVersion",
        "declare function getWorkflowDefinitionVersion(): number;",
        "the workflow definition's version number",
        "() => readState('version')",
    ),
    Helper(
        "getWorkflowInstanceName",
        "declare function getWorkflowInstanceName(): string;",
        "the instance's name",
        "() => readState('name')",
    ),
    Helper(
        "setWorkflowInstanceName",
        "declare function setWorkflowInstanceName(value: string): void;",
        "renames the instance, as the SetName activity does",
        "(value) => { writeState('name', value === undefined || value === null"
        " ? null : String(value)); }",
    ),
    # RunJavaScript
    Helper(
        "setOutcome",
        "declare function setOutcome(name: string): void;",
        "the outcome (port) the activity completes with, instead of Done",
        "(name) => { setOutcomes([String(name)]); }",
        activity="Elsa.RunJavaScript",
    ),
    Helper(
        "setOutcomes",
        "declare function setOutcomes(names: string[]): void;",
        "several outcomes (ports) at once",
        "(names) => { setOutcomes(Array.from(names, String)); }",
        activity="Elsa.RunJavaScript",
    ),
    # Text, JSON, GUIDs, bytes
    Helper(
        "isNullOrWhiteSpace",
        "declare function isNullOrWhiteSpace(value: string): boolean;",
        "true for null, undefined, empty or blank text",
        "(value) => value === null || value === undefined || String(value).trim() === ''",
    ),
    Helper(
        "isNullOrEmpty",
        "declare function isNullOrEmpty(value: string): boolean;",
        "true for null, undefined or empty text",
        "(value) => value === null || value === undefined || String(value) === ''",
    ),
    Helper(
        "toJson",
        "declare function toJson(value: any): string;",
        "the value as JSON text",
        "(value) => JSON.stringify(value)",
    ),
    Helper(
        "parseGuid",
        "declare function parseGuid(value: string): Guid;",
        "a Guid parsed from any of .NET's formats (`parseGuid(text).toString()` is its text)",
        "(text) => Guid.Parse(text)",
    ),
    Helper(
        "newGuid",
        "declare function newGuid(): Guid;",
        "a new random Guid (`newGuid().toString()` is its text)",
        "() => Guid.NewGuid()",
    ),
    Helper(
        "newGuidString",
        "declare function newGuidString(): string;",
        "a new random GUID as text",
        _GUID_SOURCE,
    ),
    Helper(
        "newShortGuid",
        "declare function newShortGuid(): string;",
        "a new random GUID as base64 without `/`, `+` and `=` (22 characters at most)",
        _SHORT_GUID_SOURCE,
    ),
    Helper(
        "getGuidString",
        "declare function getGuidString(): string;",
        "deprecated name of newGuidString",
        _GUID_SOURCE,
    ),
    Helper(
        "getShortGuid",
        "declare function getShortGuid(): string;",
        "deprecated name of newShortGuid",
        _SHORT_GUID_SOURCE,
    ),
    Helper(
        "stringToBase64",
        "declare function stringToBase64(value: string): string;",
        "the UTF-8 bytes of the text, base64-encoded",
        "(value) => base64Encode(utf8Encode(String(value)))",
    ),
    Helper(
        "stringFromBase64",
        "declare function stringFromBase64(value: string): string;",
        "the text whose UTF-8 bytes the base64 holds",
        "(value) => utf8Decode(base64Decode(String(value)))",
    ),
    Helper(
        "bytesToString",
        "declare function bytesToString(value: number[]): string;",
        "UTF-8 bytes decoded to text",
        "(value) => utf8Decode(Array.from(value, Number))",
    ),
    Helper(
        "bytesFromString",
        "declare function bytesFromString(value: string): number[];",
        "the text's UTF-8 bytes",
        "(value) => utf8Encode(String(value))",
    ),
    Helper(
        "bytesToBase64",
        "declare function bytesToBase64(value: number[]): string;",
        "bytes, base64-encoded",
        "(value) => base64Encode(Array.from(value, Number))",
    ),
    Helper(
        "bytesFromBase64",
        "declare function bytesFromBase64(value: string): number[];",
        "the bytes a base64 text holds",
        "(value) => base64Decode(String(value))",
    ),
    Helper(
        "streamToBytes",
        "declare function streamToBytes(value: number[] | string): number[];",
        "a stream's content as bytes (no .NET streams here: bytes pass, text gives its UTF-8)",
        "(value) => typeof value === 'string' ? utf8Encode(value) : Array.from(value, Number)",
    ),
    Helper(
        "streamToBase64",
        "declare function streamToBase64(value: number[] | string): string;",
        "a stream's content, base64-encoded (bytes, or the UTF-8 of a text)",
        "(value) => base64Encode(typeof value === 'string' ? utf8Encode(value)"
        " : Array.from(value, Number))",
    ),
    # .NET types (broker.engine.expr.jstypes)
    *(
        Helper(name, declaration, description, name, kind="type")
        for name, declaration, description in TYPES
    ),
)

FAMILIES: tuple[Family, ...] = (
    Family(
        "get{Name}",
        "declare function get{Name}(): {type};",
        "reads the variable (also by its name as written, and as a global `{name}`)",
        "variable",
    ),
    Family(
        "set{Name}",
        "declare function set{Name}(value: {type}): void;",
        "writes the variable",
        "variable",
    ),
    Family("get{Name}", "declare function get{Name}(): any;", "reads the workflow input", "input"),
    Family(
        "get{Output}From{Activity}",
        "declare function get{Output}From{Activity}(): any;",
        "reads an output of an earlier activity by its name (else id): `getResultFromHttpCall()`;"
        " also `getOutputFrom{Activity}()` for its result",
        "output",
    ),
)

_PASCAL = re.compile(r"(?:^|_| +)(.)")


def pascalize(name: str) -> str:
    """Humanizer's ``Pascalize`` (what Elsa names accessors with): the first letter and each
    letter after ``_`` or spaces upper-cased, the separators dropped."""
    return _PASCAL.sub(lambda match: match.group(1).upper(), name)


def is_valid_name(name: str) -> bool:
    """Elsa's ``IsValidVariableName``: letters and digits only (accessors exist for those)."""
    return bool(name) and all(char.isalnum() for char in name)


_TYPES = {
    "object": "any",
    "expandoobject": "any",
    "string": "string",
    "char": "string",
    "guid": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "int16": "number",
    "int32": "number",
    "int64": "number",
    "short": "number",
    "int": "number",
    "long": "number",
    "decimal": "number",
    "single": "number",
    "float": "number",
    "double": "number",
    "byte": "number",
    "byte[]": "number[]",
    "datetime": "string",
    "datetimeoffset": "string",
    "dateonly": "string",
    "timeonly": "string",
    "timespan": "string",
}


def typescript_type(type_name: str | None) -> str:
    """The TypeScript type of an Elsa variable type name (``Int32`` -> ``number``)."""
    if not type_name:
        return "any"
    text = type_name.strip()
    text = text.split(",", 1)[0].rsplit(".", 1)[-1]  # System.Int32, mscorlib -> Int32
    if text.endswith("[]") and text.lower() != "byte[]":
        return f"{typescript_type(text[:-2])}[]"
    return _TYPES.get(text.lower(), "any")


def typescript_declarations(
    variable_names_and_types: Iterable[tuple[str, str | None]],
    *,
    activity_type: str | None = None,
) -> str:
    """The TypeScript declarations of what a script sees, for Elsa Studio's script editor:
    every helper (those of ``activity_type`` included), each variable's getter and setter, and
    the ``WorkflowVariables`` class that ``variables`` is typed with."""
    variables = [
        (name, typescript_type(type_name))
        for name, type_name in variable_names_and_types
        if is_valid_name(name)
    ]
    lines = [
        helper.declaration
        for helper in HELPERS
        if helper.activity is None or helper.activity == activity_type
    ]
    for name, type_ in variables:
        for family in FAMILIES:
            if family.per == "variable":
                lines.append(family.declaration.format(Name=pascalize(name), type=type_))
    lines.append("declare class WorkflowVariables {")
    lines += [f"{name}: {type_};" for name, type_ in variables]
    lines.append("}")
    return "\n".join(lines) + "\n"


def helpers_markdown() -> str:
    """The helper list of ``workflows/README.md`` (between its ``helpers`` markers)."""
    lines = []
    for helper in HELPERS:
        only = f" ({helper.activity.removeprefix('Elsa.')} only)" if helper.activity else ""
        lines.append(f"- `{helper.name}`{only}: {helper.description}")
    lines.append("")
    lines.append("Per workflow (`{Name}` in PascalCase, as Elsa names them):")
    lines.append("")
    for family in FAMILIES:
        lines.append(f"- `{family.pattern}` per {family.per}: {family.description}")
    return "\n".join(lines) + "\n"
