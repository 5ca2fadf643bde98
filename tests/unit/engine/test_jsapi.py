"""Elsa's JavaScript helpers (``broker.engine.expr.jsapi.HELPERS``): each one, as the sandbox
installs it, its TypeScript declaration, and the list in workflows/README.md."""

from __future__ import annotations

import base64
import re
import uuid
from typing import Any

import pytest

from broker.engine.expr.javascript import evaluate_javascript, run_script
from broker.engine.expr.jsapi import (
    HELPERS,
    helpers_markdown,
    is_valid_name,
    pascalize,
    typescript_declarations,
    typescript_type,
)
from broker.errors import ExpressionError
from tests.support.services import PROJECT_ROOT
from tests.unit.engine.dict_scope import DictScope


def run(code: str, scope: DictScope | None = None) -> Any:
    return evaluate_javascript(code, scope if scope is not None else DictScope())


# The list itself -------------------------------------------------------------------------------


def test_every_helper_is_installed_under_its_name() -> None:
    # Given every helper of the list / When a script asks for each by name
    names = [h.name for h in HELPERS if h.activity is None]
    kinds = run("[" + ", ".join(f"typeof {name}" for name in names) + "]")
    # Then each exists (functions, the date/time classes, the variables/input objects)
    assert dict(zip(names, kinds, strict=True)) == {
        name: "object" if name in ("variables", "input", "args") else "function" for name in names
    }


def test_activity_helpers_exist_only_in_that_activitys_scripts() -> None:
    assert run("typeof setOutcome") == "undefined"
    ran = run_script("typeof setOutcome", DictScope(), activity_type="Elsa.RunJavaScript")
    assert ran.result == "function"


def test_helper_names_are_unique_and_each_has_a_declaration_and_a_description() -> None:
    names = [h.name for h in HELPERS]
    assert len(names) == len(set(names))
    for helper in HELPERS:
        assert helper.description
        assert re.match(
            rf"declare (function|var|class) {re.escape(helper.name)}\b", helper.declaration
        )


def test_workflows_readme_lists_every_helper() -> None:
    # Given the helper list of workflows/README.md, between its markers
    text = (PROJECT_ROOT / "workflows" / "README.md").read_text()
    listed = text.split("<!-- helpers:start -->\n", 1)[1].split("<!-- helpers:end -->", 1)[0]
    # Then it is the list generated from HELPERS and FAMILIES (regenerate it with
    # broker.engine.expr.jsapi.helpers_markdown() after changing them)
    assert listed == helpers_markdown()
    for helper in HELPERS:
        assert f"- `{helper.name}`" in listed


# Variables, input, outputs ----------------------------------------------------------------------


def test_variables_object_reads_and_writes_variables() -> None:
    # Given two variables
    scope = DictScope(variables={"Total": 2, "Items": [1]})
    # When a script reads one, writes the other and adds a new one through `variables`
    result = run(
        "variables.Items.push(variables.Total); variables.Total = variables.Total * 10;"
        " variables.Fresh = 'new'; [variables.Total, Object.keys(variables).sort()]",
        scope,
    )
    # Then the script saw the new values, and the writes reached the scope once it succeeded
    assert result == [20, ["Items", "Total"]]
    assert scope.variables == {"Total": 20, "Items": [1, 2], "Fresh": "new"}


def test_variables_object_cannot_keep_state_between_evaluations() -> None:
    scope = DictScope(variables={"Total": 2})
    with pytest.raises(ExpressionError, match="TypeError"):
        run("Object.defineProperty(variables, 'x', { value: 1 })", scope)
    with pytest.raises(ExpressionError, match="TypeError"):
        run("Object.freeze(variables)", scope)
    assert run("variables.Total", scope) == 2


def test_input_object_reads_the_workflow_input_and_is_read_only() -> None:
    scope = DictScope(inputs={"payload": {"amount": 5}})
    assert run("input.payload.amount + getInput('payload').amount", scope) == 10
    assert run("input.missing === undefined", scope) is True
    # an assignment is ignored (sloppy mode, as Jint runs scripts)
    assert run("input.payload = 1; input.payload.amount", scope) == 5


def test_output_accessors_are_named_after_the_output_and_the_activity() -> None:
    # Given outputs of an activity named "http_call" (Elsa pascalizes both names)
    scope = DictScope(outputs={"http_call": {"result": {"ok": True}, "statusCode": 200}})
    # When read through get<Output>From<Activity>() and getOutputFrom()
    result = run(
        "[getResultFromHttpCall(), getStatusCodeFromHttpCall(), getOutputFrom('http_call'),"
        " getOutputFrom('http_call', 'StatusCode'), getOutputFromHttpCall()]",
        scope,
    )
    # Then each names the right value
    assert result == [{"ok": True}, 200, {"ok": True}, 200, {"ok": True}]


def test_get_output_from_accepts_the_activity_id_too() -> None:
    scope = DictScope(outputs={"Lookup": {"result": 7}}, activity_ids={"act-12": "Lookup"})
    assert run("getOutputFrom('act-12') + getOutputFrom('Lookup')", scope) == 14
    assert run("getOutputFrom('nowhere')", scope) is None


def test_get_last_result_reads_the_last_result() -> None:
    assert run("getLastResult().n + 1", DictScope(last={"n": 41})) == 42


# The workflow instance --------------------------------------------------------------------------


def test_workflow_definition_and_instance_getters() -> None:
    result = run(
        "[getWorkflowDefinitionId(), getWorkflowDefinitionVersionId(),"
        " getWorkflowDefinitionVersion(), getWorkflowInstanceName(), getWorkflowInstanceId()]"
    )
    assert result == ["orders", "orders-v3", 3, "Orders", "instance-1"]


def test_set_correlation_id_and_instance_name_are_written_back_on_success() -> None:
    # Given a scope / When a script changes the correlation id and the name, and reads them back
    scope = DictScope()
    result = run(
        "setCorrelationId('order-9'); setWorkflowInstanceName('Order 9');"
        " [getCorrelationId(), getWorkflowInstanceName()]",
        scope,
    )
    # Then it sees its own writes, and they reach the instance after it succeeds
    assert result == ["order-9", "Order 9"]
    assert scope.correlation_id == "order-9"
    assert scope.info["name"] == "Order 9"


def test_a_failing_script_changes_neither_correlation_id_nor_name() -> None:
    scope = DictScope()
    with pytest.raises(ExpressionError):
        run("setCorrelationId('x'); setWorkflowInstanceName('y'); throw new Error('no')", scope)
    assert scope.correlation_id == "request-1"
    assert scope.info["name"] == "Orders"


def test_set_outcomes_choose_the_ports_of_run_javascript() -> None:
    one = run_script("setOutcome('Approved'); 1", DictScope(), activity_type="Elsa.RunJavaScript")
    many = run_script("setOutcomes(['A', 'B'])", DictScope(), activity_type="Elsa.RunJavaScript")
    none = run_script("2", DictScope(), activity_type="Elsa.RunJavaScript")
    assert (one.result, one.outcomes) == (1, ("Approved",))
    assert many.outcomes == ("A", "B")
    assert none.outcomes is None


# Text, GUIDs, bytes -----------------------------------------------------------------------------


def test_guid_helpers() -> None:
    # Given Elsa's GUID functions: newGuid and parseGuid give a Guid (an object whose text is
    # the GUID, as Jint wraps .NET's Guid), the others text
    guid, text, legacy = run("[newGuid().toString(), newGuidString(), getGuidString()]")
    for value in (guid, text, legacy):
        assert uuid.UUID(value).version == 4
        assert value == str(uuid.UUID(value))
    assert run("[typeof newGuid(), typeof newGuidString(), newGuid().length]") == [
        "object",
        "string",
        None,
    ]
    # a Guid result crosses back as its text
    assert uuid.UUID(run("newGuid()")).version == 4
    short = run("newShortGuid()")
    # Elsa's form: base64 of the 16 bytes without its padding, `/` and `+` (each of the 22
    # characters is one of those two with odds 1/32, so fewer than 10 remain ~never)
    assert re.fullmatch(r"[A-Za-z0-9]{10,22}", short)
    assert run("newGuid().toString() !== newGuid().toString()") is True
    assert run("parseGuid('{6F9619FF-8B86-D011-B42D-00CF4FC964FF}').toString()") == (
        "6f9619ff-8b86-d011-b42d-00cf4fc964ff"
    )
    with pytest.raises(ExpressionError, match="Unrecognized Guid format"):
        run("parseGuid('nope')")


@pytest.mark.parametrize("text", ["", "hello", "Grüße, 世界 🎉"])
def test_base64_and_byte_helpers_round_trip_utf8(text: str) -> None:
    encoded = base64.b64encode(text.encode()).decode()
    assert run(f"stringToBase64({text!r})") == encoded
    assert run(f"stringFromBase64({encoded!r})") == text
    assert run(f"bytesFromString({text!r})") == list(text.encode())
    assert run(f"bytesToString({list(text.encode())!r})") == text
    assert run(f"bytesToBase64(bytesFromBase64({encoded!r}))") == encoded


def test_text_and_json_helpers() -> None:
    assert run("[isNullOrWhiteSpace(' '), isNullOrWhiteSpace('a'), isNullOrEmpty('')]") == [
        True,
        False,
        True,
    ]
    assert run("toJson({a: [1, 'x']})") == '{"a":[1,"x"]}'


# Dates and times --------------------------------------------------------------------------------


def test_date_time_now_is_the_engines_clock() -> None:
    # Given the engine's clock at 2026-03-14T15:09:26.535Z (a redone step sees the same time)
    assert run("DateTime.UtcNow.ToString()") == "2026-03-14T15:09:26.535Z"
    assert run("DateTime.Now.Year * 100 + DateTime.Now.Month") == 202603
    assert run("DateTime.Today") == "2026-03-14T00:00:00.000Z"
    assert run("DateTimeOffset.UtcNow.ToString()") == "2026-03-14T15:09:26.535+00:00"


def test_date_time_arithmetic_and_formats() -> None:
    assert run("DateTime.UtcNow.AddDays(1).ToString('yyyy-MM-dd HH:mm:ss')") == (
        "2026-03-15 15:09:26"
    )
    assert run("DateTime.Parse('2024-01-31').AddMonths(1).ToString('yyyy-MM-dd')") == ("2024-02-29")
    assert run("DateTime.Parse('2026-03-14T10:00:00').DayOfWeek") == "Saturday"
    assert run("DateTime.UtcNow.Subtract(DateTime.Parse('2026-03-14')).TotalHours > 15") is True
    assert run("DateTime.UtcNow > DateTime.Parse('2020-01-01')") is True
    assert run("DateTime.Parse('2026-01-05T08:07:06Z').ToString(\"dddd d MMM yy, h:mm tt\")") == (
        "Monday 5 Jan 26, 8:07 AM"
    )


def test_time_spans_cross_as_dotnet_text() -> None:
    assert run("TimeSpan.FromHours(26.5)") == "1.02:30:00"
    assert run("TimeSpan.FromMinutes(90).TotalHours") == 1.5
    assert run("TimeSpan.Parse('01:02:03').TotalSeconds") == 3723
    assert run("DateTime.Parse('2026-01-01').Add(TimeSpan.FromMinutes(5)).Minute") == 5
    with pytest.raises(ExpressionError, match="not a TimeSpan"):
        run("TimeSpan.Parse('soon')")


# TypeScript declarations ------------------------------------------------------------------------


def test_typescript_declarations_cover_helpers_variables_and_the_variables_class() -> None:
    # Given two variables and one whose name Elsa gives no accessor
    text = typescript_declarations([("total", "Int32"), ("Customer", "Object"), ("bad-name", None)])
    lines = text.splitlines()
    # Then every helper is declared, RunJavaScript's only for RunJavaScript
    assert "declare function getVariable(name: string): any;" in lines
    assert "declare function setOutcome(name: string): void;" not in lines
    # And each valid variable has a typed getter and setter and a member of WorkflowVariables
    assert "declare function getTotal(): number;" in lines
    assert "declare function setTotal(value: number): void;" in lines
    assert "declare function getCustomer(): any;" in lines
    assert not any("bad" in line.lower() for line in lines)
    start = lines.index("declare class WorkflowVariables {")
    assert lines[start + 1 : start + 4] == ["total: number;", "Customer: any;", "}"]
    assert text.endswith("}\n")


def test_typescript_declarations_for_run_javascript_include_set_outcome() -> None:
    text = typescript_declarations([], activity_type="Elsa.RunJavaScript")
    assert "declare function setOutcomes(names: string[]): void;" in text.splitlines()


@pytest.mark.parametrize(
    ("type_name", "expected"),
    [
        ("String", "string"),
        ("Int32", "number"),
        ("System.Int64, System.Private.CoreLib", "number"),
        ("Boolean", "boolean"),
        ("Object", "any"),
        ("String[]", "string[]"),
        ("Byte[]", "number[]"),
        ("DateTime", "string"),
        ("Acme.Invoice", "any"),
        (None, "any"),
    ],
)
def test_typescript_types_of_elsa_type_names(type_name: str | None, expected: str) -> None:
    assert typescript_type(type_name) == expected


def test_pascalize_and_valid_names_follow_elsa() -> None:
    assert pascalize("http_call") == "HttpCall"
    assert pascalize("statusCode") == "StatusCode"
    assert pascalize("my  var") == "MyVar"
    assert is_valid_name("Total2")
    assert not is_valid_name("bad-name")
    assert not is_valid_name("")
