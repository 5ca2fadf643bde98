"""JavaScript expressions: Elsa's helpers, write-back, the sandbox and its limits."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest

from broker.engine.expr.javascript import evaluate_javascript
from broker.errors import ExpressionError
from tests.unit.engine.dict_scope import DictScope


def run(code: str, scope: DictScope | None = None, **limits: Any) -> Any:
    return evaluate_javascript(code, scope if scope is not None else DictScope(), **limits)


# Shapes of code -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("1 + 2", 3),
        ("`Bar`", "Bar"),
        ("return false;", False),
        ('"Parent: " + "x";', "Parent: x"),
        ("var a = 1; a + 1", 2),
        ("const items = [1, 2]; return items.length;", 2),
        ("({ Message: 'Hello from parent' })", {"Message": "Hello from parent"}),
        ('["Apple", "Banana", "Cherry"]', ["Apple", "Banana", "Cherry"]),
        ("1.5 * 2", 3),
        ("0.1 + 0.2 > 0.3", True),
        ("", None),
        ("undefined", None),
        ("null", None),
        ("1 / 0", None),
        ("new Date(Date.UTC(2020, 0, 2))", "2020-01-02T00:00:00.000Z"),
        ("// just a comment\n42 // trailing", 42),
    ],
)
def test_plain_expressions_scripts_and_return_bodies_evaluate(code: str, expected: Any) -> None:
    # Given code in any of the shapes Elsa accepts / When it runs / Then its value comes back
    assert run(code) == expected


def test_corpus_template_literal_reads_a_variable_through_its_getter() -> None:
    # Given the variable TheSum (the corpus's calculator workflow)
    scope = DictScope(variables={"TheSum": 9})
    # When a template literal calls getTheSum() / Then it is interpolated
    assert run("`Result: ${getTheSum()}`", scope) == "Result: 9"


def test_getters_exist_for_inputs_and_lower_case_variable_names() -> None:
    # Given an input and a camel-case variable
    scope = DictScope(variables={"myNumber": 3}, inputs={"Input1": "Foo", "Message": "hi"})
    # When the getters are called with and without the capitalised first letter
    result = run(
        "[getInput1(), getMessage(), getmyNumber(), getMyNumber(), getInput('Input1')]", scope
    )
    # Then each reads the right value
    assert result == ["Foo", "hi", 3, 3, "Foo"]


def test_variables_are_globals_and_nested_objects_come_back_as_python_values() -> None:
    # Given an object variable (the corpus's ChildResult)
    scope = DictScope(variables={"ChildResult": {"output": {"Result": 42}}})
    # When code reads it as a global and through its getter
    text = run("`Parent received: ${getChildResult().output.Result}`", scope)
    whole = run("ChildResult", scope)
    # Then both see the same value
    assert text == "Parent received: 42"
    assert whole == {"output": {"Result": 42}}


def test_outputs_of_named_activities_and_the_current_loop_item_are_readable() -> None:
    # Given an activity output and a loop item (the CurrentValue variable a ForEach declares)
    scope = DictScope(
        outputs={"ChildWithOutput1": {"result": "Child output value", "Extra": 5}},
        variables={"CurrentValue": "Apple"},
    )
    # When read through Elsa's helpers
    result = run(
        "[getOutputFromChildWithOutput1(), getOutputFrom('ChildWithOutput1', 'Extra'),"
        " `Current fruit: ${getCurrentValue()}`]",
        scope,
    )
    # Then the values arrive
    assert result == ["Child output value", 5, "Current fruit: Apple"]


def test_ids_of_the_instance_and_correlation_are_available() -> None:
    assert run("getCorrelationId() + '/' + getWorkflowInstanceId()") == "request-1/instance-1"


def test_variable_read_by_dynamic_name_is_supplied_on_demand() -> None:
    # Given a variable whose name appears nowhere in the code text
    scope = DictScope(variables={"Hidden": 7})
    # When code builds the name at run time
    result = run("getVariable(['Hid', 'den'].join(''))", scope)
    # Then the value is still found
    assert result == 7


def test_unknown_names_read_as_undefined() -> None:
    assert run("[getVariable('nope') === undefined, getInput('nope') === undefined]") == [
        True,
        True,
    ]


def test_elsa_string_and_guid_helpers_work() -> None:
    result = run(
        "[isNullOrWhiteSpace('  '), isNullOrEmpty(''), isNullOrEmpty('a'),"
        " parseGuid('{6F9619FF-8B86-D011-B42D-00C04FC964FF}').toString(),"
        " newGuid().toString().length]"
    )
    assert result == [True, True, False, "6f9619ff-8b86-d011-b42d-00c04fc964ff", 36]


# Write-back -----------------------------------------------------------------------------------


def test_set_variable_writes_back_through_the_scope() -> None:
    # Given a scope with a counter
    scope = DictScope(variables={"Counter": 1})
    # When code sets variables three ways
    run(
        "setVariable('Counter', getCounter() + 1); setCounter(Counter + 1); Counter = Counter * 10;"
        " setVariable('Created', {a: [1]})",
        scope,
    )
    # Then the final values are in the scope, each written once
    assert scope.variables == {"Counter": 30, "Created": {"a": [1]}}
    assert sorted(name for name, _ in scope.writes) == ["Counter", "Created"]


def test_a_variable_mutated_in_place_is_written_back() -> None:
    # Given a list variable
    scope = DictScope(variables={"items": [1, 2], "untouched": {"k": 1}})
    # When code pushes to it and only reads the other
    run("items.push(3); untouched.k", scope)
    # Then the list is written back and the read-only object is not
    assert scope.variables["items"] == [1, 2, 3]
    assert [name for name, _ in scope.writes] == ["items"]


def test_nothing_is_written_back_when_the_script_fails() -> None:
    # Given a variable
    scope = DictScope(variables={"Counter": 1})
    # When code sets it and then throws
    with pytest.raises(ExpressionError):
        run("setCounter(99); throw new Error('late failure')", scope)
    # Then the scope is unchanged
    assert scope.variables == {"Counter": 1}
    assert scope.writes == []


def test_promise_jobs_run_before_the_evaluation_ends() -> None:
    # Given a script whose write happens in a Promise job
    scope = DictScope()
    # When it runs
    result = run("Promise.resolve(5).then(v => setVariable('Late', v)); 'sync'", scope)
    # Then the job ran inside the evaluation and its write arrived
    assert result == "sync"
    assert scope.variables == {"Late": 5}


# The sandbox ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "require",
        "std",
        "os",
        "process",
        "fetch",
        "XMLHttpRequest",
        "WeakRef",
        "FinalizationRegistry",
        "__elsaBegin",
    ],
)
def test_host_facilities_are_not_reachable(name: str) -> None:
    # Given a name that would reach files, network, processes or the sandbox's internals
    # When code probes it / Then it does not exist
    assert run(f"typeof {name}") == "undefined"
    with pytest.raises(ExpressionError, match="not defined"):
        run(f"{name}('x')")


def test_dynamic_import_of_std_and_os_fails() -> None:
    # Given code that tries to load QuickJS's std and os modules
    scope = DictScope()
    run(
        "const report = (name) => [() => setVariable(name, 'loaded'),"
        " (e) => setVariable(name, String(e))];"
        "import('std').then(...report('std')); import('os').then(...report('os'));"
        " 1",
        scope,
    )
    # Then both imports were rejected
    assert "could not load module" in scope.variables["std"]
    assert "could not load module" in scope.variables["os"]


def test_a_promise_result_is_an_error() -> None:
    with pytest.raises(ExpressionError, match="Promise"):
        run("import('std')")


@pytest.mark.parametrize(
    "code",
    [
        "Array.prototype.leak = 1",
        "Object.prototype.polluted = true",
        "leaked = 1",
        "globalThis.leaked = 1",
        "var e = eval; e('var leaked = 1')",
        "(0, eval)('function leaked() {}')",
        "new Function('leaked = 1')()",
        "this.leaked = 1",
        "JSON.parse = () => 0",
        "JSON = { parse: () => 0 }",
        "Math.random = () => 4",
        "toJson = () => 'poisoned'",
        "delete globalThis.toJson",
        "Object.defineProperty(globalThis, 'leaked', { value: 1 })",
        "Object.defineProperty(globalThis, 'toJson', { value: () => 'poisoned' })",
        "Object.setPrototypeOf(globalThis, { leaked: 1 })",
        "Object.preventExtensions(globalThis)",
        "Promise.resolve().then(() => { globalThis.leaked = 1; }); 1",
        "({ toJSON() { Promise.resolve().then(() => { globalThis.leaked = 1; }); return 1; } })",
    ],
)
def test_evaluations_cannot_leave_state_for_the_next_one(code: str) -> None:
    # Given an attempt to change shared state (allowed or not within its own evaluation)
    with contextlib.suppress(ExpressionError):
        run(code)
    # When the next evaluation runs / Then it sees pristine built-ins and Elsa's functions
    assert run(
        "[typeof [].leak, typeof ({}).polluted, typeof leaked, JSON.parse('1'),"
        " toJson({a: 1}), Math.random() < 1]"
    ) == ["undefined", "undefined", "undefined", 1, '{"a":1}', True]


def test_a_script_may_replace_a_global_for_its_own_evaluation() -> None:
    # Given Elsa's functions writable and configurable on the global object, as Jint has them
    # When a script replaces one, declares a global or assigns an undeclared name
    result = run(
        "toJson = () => 'mine'; var e = eval; e('var declared = 2'); assigned = 3;"
        " [toJson(1), declared, assigned, globalThis.assigned]"
    )
    # Then its own evaluation sees the change
    assert result == ["mine", 2, 3, 3]


def test_own_properties_that_shadow_builtin_methods_still_work() -> None:
    # Given frozen prototypes / When code overrides toString and name on its own objects
    result = run(
        "const o = {}; o.toString = () => 'mine'; const e = new Error('x');"
        " e.name = 'Custom'; return [String(o), e.name];"
    )
    # Then the override mistake does not bite
    assert result == ["mine", "Custom"]


def test_declarations_do_not_survive_an_evaluation() -> None:
    run("var kept = 1; let also = 2; function f() { return 3; } f()")
    assert run("[typeof kept, typeof also, typeof f]") == ["undefined", "undefined", "undefined"]


# Errors and limits ----------------------------------------------------------------------------


def test_errors_name_the_activity_the_type_and_the_expression() -> None:
    # Given a scope for activity "write-1"
    scope = DictScope(activity_id="write-1")
    # When the code throws
    with pytest.raises(ExpressionError) as caught:
        run("throw new Error('boom')", scope)
    # Then the error says where, what and which code
    error = caught.value
    assert error.activity_id == "write-1"
    assert error.expression_type == "JavaScript"
    assert error.expression == "throw new Error('boom')"
    assert "write-1" in str(error)
    assert "Error: boom" in str(error)


def test_a_syntax_error_is_an_expression_error() -> None:
    with pytest.raises(ExpressionError, match="SyntaxError"):
        run("1 +")


def test_long_expressions_are_truncated_in_errors() -> None:
    code = "throw new Error('x'); " + "/* padding */ " * 50
    with pytest.raises(ExpressionError) as caught:
        run(code)
    assert caught.value.expression is not None
    assert len(caught.value.expression) <= 200


def test_a_runaway_loop_is_stopped_by_the_time_limit() -> None:
    with pytest.raises(ExpressionError, match="time limit"):
        run("while (true) {}", time_limit=0.2)
    # The thread's sandbox is usable afterwards
    assert run("1 + 1") == 2


def test_an_endless_chain_of_promise_jobs_is_stopped_by_the_time_limit() -> None:
    with pytest.raises(ExpressionError, match="time limit"):
        run("(function loop() { Promise.resolve().then(loop); })(); 1", time_limit=0.2)
    assert run("2 + 2") == 4


def cpu_seconds_of(action: Any) -> float:
    """CPU seconds this process spends in ``action`` (QuickJS's limit is CPU time, so a loaded
    machine stretches wall time, never this)."""
    started = time.process_time()
    action()
    return time.process_time() - started


def test_a_backtracking_regex_is_stopped_by_the_time_limit() -> None:
    # Given the ReDoS pattern of the security review (exponential backtracking)
    code = "/^(a+)+$/.test('a'.repeat(40) + 'b')"

    # When it runs under a 0.3 s limit
    def attempt() -> None:
        with pytest.raises(ExpressionError, match="time limit"):
            run(code, time_limit=0.3)

    # Then the regex engine is interrupted at the limit, not after the match gives up
    assert cpu_seconds_of(attempt) < 2.0
    assert run("'ok'") == "ok"


@pytest.mark.parametrize(
    "code",
    [
        # closes the function it would have been pasted into, then loops
        "}); while(true){} (function(){",
        "} while (true) {} function again() {",
        "}}; while (true) {} ({ x: function () {",
        # closes a parenthesised expression wrapper
        "1); while (true) {} (1",
        # the same with a return, so that it only parses as a function body
        "return 1; } while (true) {} function again() {",
    ],
)
def test_code_that_closes_a_wrapper_never_runs_outside_the_sandbox(code: str) -> None:
    # Given code written to escape a wrapper it is pasted into
    # When it is evaluated under a short limit
    def attempt() -> None:
        with pytest.raises(ExpressionError, match=r"SyntaxError|time limit"):
            run(code, time_limit=0.3)

    # Then it fails within the limit (refused as it parses, or stopped while it runs)
    assert cpu_seconds_of(attempt) < 2.0
    assert run("2 * 3") == 6


def test_a_function_body_that_closes_its_function_is_refused_before_it_runs() -> None:
    # Given a body that would close the function and declare a loop after it
    code = "return 1; } while (true) {} function again() {"
    # When it is evaluated / Then it is refused as a syntax error, without running the loop
    with pytest.raises(ExpressionError, match="closes the function"):
        run(code, time_limit=5.0)


def test_an_endless_loop_in_a_function_body_is_stopped_by_the_time_limit() -> None:
    with pytest.raises(ExpressionError, match="time limit"):
        run("while (true) {} return 1;", time_limit=0.2)


def test_elsa_scripts_may_return_at_the_top_level() -> None:
    # Given Elsa's script form (Jint's AllowReturnOutsideFunction) reading a variable
    scope = DictScope(variables={"Amount": 1500})
    # When it returns from the top level / Then the value comes back
    assert run("if (Amount > 1000) { return 'large'; } return 'small';", scope) == "large"


@pytest.mark.parametrize(
    "code",
    [
        "new ArrayBuffer(512 * 1024 * 1024)",
        "'x'.repeat(1 << 29)",
        "const a = []; while (true) a.push('abcdefghijklmnop' + a.length);",
    ],
)
def test_huge_allocations_fail_within_the_memory_limit(code: str) -> None:
    with pytest.raises(ExpressionError, match=r"memory|too long"):
        run(code, memory_limit=8 * 1024 * 1024, time_limit=5.0)
    assert run("[1, 2].length") == 2


def test_deep_recursion_fails_cleanly() -> None:
    with pytest.raises(ExpressionError, match="stack overflow"):
        run("function f(n) { return f(n + 1) + 1; } f(0)")
    assert run("3") == 3


def test_a_failing_scope_write_is_an_expression_error() -> None:
    class ReadOnlyScope(DictScope):
        def set_variable(self, name: str, value: Any) -> None:
            raise PermissionError("read only")

    with pytest.raises(ExpressionError, match="read only") as caught:
        run("setVariable('x', 1)", ReadOnlyScope())
    assert isinstance(caught.value.__cause__, PermissionError)


def test_threads_evaluate_independently() -> None:
    # Given several threads, each with its own scope
    results: dict[int, Any] = {}

    def work(index: int) -> None:
        scope = DictScope(variables={"n": index})
        results[index] = [run("n * 2", scope) for _ in range(50)][-1]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    # When they evaluate at the same time
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # Then each saw its own values
    assert results == {0: 0, 1: 2, 2: 4, 3: 6}


def test_report_trivial_evaluation_rate(capsys: pytest.CaptureFixture[str]) -> None:
    # Not a timing assertion: prints the rate for the report (run with -s to see it).
    scope = DictScope(variables={"Counter": 1})
    count = 2000
    started = time.perf_counter()
    for _ in range(count):
        assert run("getCounter() + 1", scope) == 2
    rate = count / (time.perf_counter() - started)
    with capsys.disabled():
        print(f"\nJavaScript: {rate:,.0f} trivial evaluations/s")
