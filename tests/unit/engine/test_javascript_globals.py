"""JavaScript names as Elsa's Jint engine exposes them: on the global object (so globalThis,
indirect eval and the Function constructor reach them), Elsa's type registry, and the rule that
an author's variable wins over any built-in name."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from broker.engine.expr.javascript import evaluate_javascript, run_script
from broker.errors import ExpressionError
from tests.unit.engine.dict_scope import DictScope


def run(code: str, scope: DictScope | None = None, **limits: Any) -> Any:
    return evaluate_javascript(code, scope if scope is not None else DictScope(), **limits)


def workflow() -> DictScope:
    return DictScope(
        variables={"MyVariable": 42},
        inputs={"Order": {"id": 7}},
        outputs={"Lookup": {"result": "found", "statusCode": 200}},
    )


# globalThis, indirect eval, new Function ------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        # Elsa's ReferencedGlobalTests, each an escape that reaches a global without naming it
        ("return typeof globalThis['getMyVariable'];", "function"),
        ('return eval("typeof getMyVariable");', "function"),
        ("return new Function('return getMyVariable()')();", 42),
        ("var e = eval; return e('typeof getMyVariable');", "function"),
        ("(0, eval)('getMyVariable()')", 42),
        # every kind of accessor, through each escape
        ("globalThis['get' + 'Order']().id", 7),
        ("(0, eval)('getResultFromLookup()')", "found"),
        ("new Function('return getStatusCodeFromLookup()')()", 200),
        ("globalThis.variables.MyVariable", 42),
        ('Function(\'return getVariable("MyVariable") + getInput("Order").id\')()', 49),
        ("[globalThis.getWorkflowInstanceId(), globalThis.toJson([1])]", ["instance-1", "[1]"]),
        ("this.getMyVariable()", 42),
    ],
)
def test_accessors_are_reachable_through_the_global_object(code: str, expected: Any) -> None:
    # Given a workflow with a variable, an input and an activity output
    # When code reaches an accessor through globalThis, eval, indirect eval or new Function
    # Then it finds it, as on Elsa's engine
    assert run(code, workflow()) == expected


@pytest.mark.parametrize(
    "code",
    [
        "new Function('setMyVariable(99)')()",
        "(0, eval)('setMyVariable(99)')",
        "globalThis['setMyVariable'](99)",
        "new Function('variables.MyVariable = 99')()",
    ],
)
def test_writes_through_the_global_object_reach_the_workflow(code: str) -> None:
    scope = workflow()
    run(code, scope)
    assert scope.variables["MyVariable"] == 99


def test_a_variable_whose_name_appears_nowhere_is_still_reachable_by_a_built_name() -> None:
    # Given a variable not named in the code text (the accessor is found at run time)
    scope = DictScope(variables={"Hidden": 7})
    # When code builds the accessor's name / Then the value arrives
    assert run("globalThis['get' + ['Hid', 'den'].join('')]()", scope) == 7


@pytest.mark.parametrize(
    "code",
    [
        "new Function('while (true) {}')()",
        "(0, eval)('while (true) {}')",
        "new Function('return new Function(\"for (;;) {}\")()')()",
        "Promise.resolve().then(new Function('while (true) {}')); 1",
    ],
)
def test_a_runaway_function_body_or_indirect_eval_is_stopped_by_the_time_limit(
    code: str,
) -> None:
    with pytest.raises(ExpressionError, match="time limit"):
        run(code, time_limit=0.2)
    assert run("1 + 1") == 2


def test_memory_allocated_by_a_function_body_is_bounded() -> None:
    with pytest.raises(ExpressionError, match=r"memory|too long"):
        run(
            "new Function(\"const a = []; while (true) a.push('x'.repeat(1000));\")()",
            memory_limit=8 * 1024 * 1024,
            time_limit=5.0,
        )
    assert run("[1].length") == 1


# Elsa's common functions on the global object ----------------------------------------------


def test_common_functions_are_writable_configurable_not_enumerable_globals() -> None:
    result = run(
        "var d = Object.getOwnPropertyDescriptor(globalThis, 'getVariable');"
        " [d.writable, d.enumerable, d.configurable, 'getVariable' in globalThis,"
        " Object.getOwnPropertyNames(globalThis).includes('toJson'),"
        " Object.keys(globalThis).includes('getVariable'), getVariable === getVariable]"
    )
    assert result == [True, False, True, True, True, False, True]


def test_a_replaced_common_function_does_not_outlive_its_evaluation() -> None:
    # Given a script that replaces toJson (Elsa's CommonFunctionsCanBeOverwritten)
    assert run("toJson = function() { return 'replaced'; }; return toJson();") == "replaced"
    # When the next evaluation calls it / Then it is Elsa's again
    assert run("toJson({a: 1})") == '{"a":1}'


# The type registry --------------------------------------------------------------------------

REGISTERED = [
    "DateTime",
    "DateTimeOffset",
    "TimeSpan",
    "Guid",
    "Random",
    "LogPersistenceMode",
    "ExpandoObject",
    "JsonElement",
    "JsonNode",
    "JsonObject",
    "Stream",
    "Decimal",
]


@pytest.mark.parametrize("name", REGISTERED)
def test_the_types_elsa_registers_are_functions_under_their_name(name: str) -> None:
    assert run(f"return typeof {name};") == "function"


def test_registered_types_are_enumerable_globals_and_unusable_names_are_absent() -> None:
    assert run(
        "['' + Object.keys(globalThis).includes('DateTime'), typeof globalThis['IDictionary`2'],"
        " typeof globalThis['Byte[]']]"
    ) == ["true", "undefined", "undefined"]


def test_guid_behaves_as_dotnets() -> None:
    empty, made, parsed, formats = run(
        "['' + Guid.Empty, Guid.NewGuid().ToString(),"
        " Guid.Parse('{6F9619FF-8B86-D011-B42D-00C04FC964FF}').toString(),"
        " [Guid.Parse('6f9619ff8b86d011b42d00c04fc964ff').ToString('B'),"
        "  new Guid('6f9619ff-8b86-d011-b42d-00c04fc964ff').ToString('N')]]"
    )
    assert empty == "00000000-0000-0000-0000-000000000000"
    assert uuid.UUID(made).version == 4
    assert parsed == "6f9619ff-8b86-d011-b42d-00c04fc964ff"
    assert formats == ["{6f9619ff-8b86-d011-b42d-00c04fc964ff}", "6f9619ff8b86d011b42d00c04fc964ff"]
    # .NET's byte order (the first three groups little-endian) survives a round trip
    text = "6f9619ff-8b86-d011-b42d-00c04fc964ff"
    assert run(f"Guid.Parse('{text}').ToByteArray()") == list(uuid.UUID(text).bytes_le)
    assert run(f"new Guid(Guid.Parse('{text}').ToByteArray()).toString()") == text
    assert run(f"Guid.Parse('{text}').Equals(new Guid('{text.upper()}'))") is True
    with pytest.raises(ExpressionError, match="Unrecognized Guid format"):
        run("Guid.Parse('nope')")


def test_random_logpersistencemode_and_decimal_behave_as_dotnets() -> None:
    rolls = run("const r = new Random(); Array.from({length: 200}, () => r.Next(1, 7))")
    assert set(rolls) <= {1, 2, 3, 4, 5, 6}
    assert len(set(rolls)) > 1
    assert run("new Random(42).Next(100) === new Random(42).Next(100)") is True
    assert run("[LogPersistenceMode.Include, LogPersistenceMode.Exclude]") == [
        "Include",
        "Exclude",
    ]
    # .NET rounds a decimal half to even unless told otherwise
    assert run(
        "[Decimal.Round(2.345, 2), Decimal.Round(2.355, 2), Decimal.Round(2.5),"
        " Decimal.Round(2.5, 0, 'AwayFromZero'), Decimal.Parse('12.50')]"
    ) == [
        2.34,
        2.36,
        2,
        3,
        12.5,
    ]


def test_a_guid_result_crosses_back_as_its_text() -> None:
    scope = DictScope()
    run("setVariable('Id', Guid.Parse('6F9619FF-8B86-D011-B42D-00C04FC964FF'))", scope)
    assert scope.variables["Id"] == "6f9619ff-8b86-d011-b42d-00c04fc964ff"


# An author's variable always wins -------------------------------------------------------------


def test_a_variable_named_current_value_is_read_by_its_accessor() -> None:
    # Given a workflow variable named CurrentValue (the While case of the issue)
    scope = DictScope(variables={"CurrentValue": 3})
    # When its generated accessors are used / Then they read and write the variable
    assert run("setCurrentValue(getCurrentValue() + 1); getCurrentValue()", scope) == 4
    assert scope.variables["CurrentValue"] == 4


def test_there_is_no_current_value_function_without_such_a_variable() -> None:
    # Elsa has no getCurrentValue function: only a variable of that name makes one
    assert run("[typeof getCurrentValue, typeof getGuid]") == ["undefined", "undefined"]


@pytest.mark.parametrize(
    ("variable", "code", "expected"),
    [
        # an accessor named like a common function replaces it, as on Elsa's engine
        ("Variable", "getVariable()", "mine"),
        ("LastResult", "getLastResult()", "mine"),
        ("CorrelationId", "getCorrelationId()", "mine"),
        ("workflowInstanceId", "getWorkflowInstanceId()", "mine"),
    ],
)
def test_a_variable_accessor_wins_over_a_common_function(
    variable: str, code: str, expected: Any
) -> None:
    assert run(code, DictScope(variables={variable: "mine"})) == expected


def test_a_variable_accessor_wins_over_runjavascripts_functions() -> None:
    scope = DictScope(variables={"Outcome": "x"})
    ran = run_script("setOutcome('Yes'); getOutcome()", scope, activity_type="Elsa.RunJavaScript")
    assert (ran.result, ran.outcomes, scope.variables["Outcome"]) == ("Yes", None, "Yes")


def test_input_and_output_accessors_win_in_elsas_order() -> None:
    # Elsa installs variable accessors, then input accessors, then output accessors, each
    # overwriting the one before
    scope = DictScope(
        variables={"Order": "variable"},
        inputs={"Order": "input"},
        outputs={"Lookup": {"result": "output"}},
    )
    assert run("getOrder()", scope) == "input"
    scope = DictScope(variables={"ResultFromLookup": "variable"}, outputs={"Lookup": {"result": 1}})
    assert run("getResultFromLookup()", scope) == 1


def test_a_variable_named_like_a_builtin_does_not_hide_it() -> None:
    # Elsa makes no global of a variable's own name: the broker's does, but never over a name
    # the script would otherwise see
    scope = DictScope(variables={"JSON": 1, "Guid": 2, "toJson": 3, "input": 4})
    assert run("[typeof JSON.parse, typeof Guid.NewGuid, toJson(1), input]", scope) == [
        "function",
        "function",
        "1",
        4,
    ]


def test_elsas_function_list_is_exactly_the_common_functions() -> None:
    # The names ConfigureEngineWithCommonFunctions installs at the pinned commit
    elsa = {
        "getWorkflowDefinitionId", "getWorkflowDefinitionVersionId",
        "getWorkflowDefinitionVersion", "getWorkflowInstanceId", "setCorrelationId",
        "getCorrelationId", "setWorkflowInstanceName", "getWorkflowInstanceName", "setVariable",
        "getVariable", "getInput", "getOutputFrom", "getLastResult", "isNullOrWhiteSpace",
        "isNullOrEmpty", "toJson", "parseGuid", "newGuid", "newGuidString", "newShortGuid",
        "bytesToString", "bytesFromString", "bytesToBase64", "bytesFromBase64", "stringToBase64",
        "stringFromBase64", "streamToBytes", "streamToBase64", "getGuidString", "getShortGuid",
    }  # fmt: skip
    names = run(
        "Object.getOwnPropertyNames(globalThis).filter((name) =>"
        " typeof globalThis[name] === 'function' && /^[a-z]/.test(name)"
        " && !Object.getOwnPropertyDescriptor(globalThis, name).enumerable"
        " && Object.getOwnPropertyDescriptor(globalThis, name).configurable)"
    )
    assert set(names) == elsa
    assert all(re.fullmatch(r"[a-z]\w+", name) for name in names)


def test_an_expression_has_elsas_empty_args_and_a_runjavascript_script_has_none() -> None:
    # Elsa's JavaScriptExpressionHandler sets `args` for expressions; RunJavaScript does not
    assert run("[typeof args, Object.keys(args).length]") == ["object", 0]
    ran = run_script("typeof args", DictScope(), activity_type="Elsa.RunJavaScript")
    assert ran.result == "undefined"
