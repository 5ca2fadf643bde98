"""Property tests of the expression engines: any expression either evaluates or raises
``ExpressionError``, within the time limit.

JavaScript scripts are generated from a small grammar of the language (literals, Elsa's functions,
operators, regexes, loops that never end, recursion without end, huge allocations, throws,
Promises) plus arbitrary text; Liquid templates from its tags, outputs and filters plus arbitrary
text; and any expression object (any type name, any value, any target type) goes through
``evaluate``. A JavaScript evaluation must end within its limit (a generous allowance on top for
a shared machine); Liquid has no clock limit, so its loop and output limits must end it as fast.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.engine.expr.expressions import SUPPORTED_TYPES, evaluate
from broker.errors import ExpressionError
from tests.unit.engine.test_expressions import DictScope

TIME_LIMIT = 0.25
#: the most one evaluation may take, its limit included, on a busy 2-core machine
CEILING = 10.0
FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TRIED: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\nexpression fuzzing: {sum(TRIED.values())} expressions ({TRIED})")


def fresh_scope() -> DictScope:
    return DictScope(
        variables={"Counter": 3, "Customer": {"Name": "Ada"}, "Items": [1, "two", None]},
        inputs={"keys": {"id": "k1"}, "payload": {"amount": 5}},
    )


def run(kind: str, value: Any, type_name: str | None = None, *, label: str = "") -> None:
    """Evaluate; only ``ExpressionError`` may come out, and only within the ceiling."""
    TRIED[label or kind] = TRIED.get(label or kind, 0) + 1
    started = time.monotonic()
    with contextlib.suppress(ExpressionError):
        evaluate(
            {"type": kind, "value": value},
            fresh_scope(),
            type_name=type_name,
            js_time_limit=TIME_LIMIT,
            js_memory_limit=16 * 1024 * 1024,
        )
    elapsed = time.monotonic() - started
    assert elapsed < CEILING, f"{kind} expression took {elapsed:.1f} s: {value!r}"


# JavaScript ---------------------------------------------------------------------------------------

JS_TEXT = st.text(st.characters(codec=None, categories=None), max_size=8)
JS_ATOMS = st.one_of(
    st.integers(min_value=-(2**60), max_value=2**60).map(str),
    st.floats().map(lambda f: repr(f).replace("inf", "Infinity").replace("nan", "NaN")),
    JS_TEXT.map(lambda t: json.dumps(t)),
    st.sampled_from(
        [
            "Counter",
            "Customer",
            "Customer.Name",
            "Items",
            "Items[7]",
            "undefined",
            "null",
            "true",
            "this",
            "globalThis",
            "arguments",
            "x",
            "NaN",
            "Infinity",
            "-0",
            "1n",
            'getVariable("Counter")',
            'getVariable("Missing")',
            'getInput("keys")',
            'getInput("payload").amount',
            "getCorrelationId()",
            "getWorkflowInstanceId()",
            "new Date()",
            "Date.now()",
            "Math.random()",
            "[]",
            "{}",
            "Symbol()",
            "Promise.resolve(1)",
            "new Proxy({}, {})",
            "/[a-z]+/g",
            "/(a|b)*c/.exec('ababab')",
            "'x'.repeat(1000)",
            "'x'.repeat(1e9)",
            "new Array(1e7).fill(0)",
            "Array.from({length: 1e6}, (_, i) => i)",
            "(function f() { return f(); })()",
            "eval('1 + 1')",
            "Function('return this')()",
            "JSON.parse('{\"a\": [1, 2]}')",
            "require('fs')",
            "import('x')",
        ]
    ),
)
JS_BINARY = [
    "+",
    "-",
    "*",
    "/",
    "%",
    "**",
    "==",
    "===",
    "!=",
    "<",
    ">=",
    "&&",
    "||",
    "??",
    "&",
    "|",
    "^",
    "<<",
    ">>>",
    ",",
    " in ",
    " instanceof ",
]


def _js_compound(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, st.sampled_from(JS_BINARY), children).map(
            lambda t: f"({t[0]}{t[1]}{t[2]})"
        ),
        st.tuples(st.sampled_from(["!", "-", "typeof ", "void ", "~", "await "]), children).map(
            "".join
        ),
        st.lists(children, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
        children.map(lambda c: "{a: " + c + "}"),
        children.map(lambda c: f"setVariable('Out', {c})"),
        children.map(lambda c: f"JSON.stringify({c})"),
        children.map(lambda c: f"String({c}).length"),
        children.map(lambda c: f"({c})()"),
        children.map(lambda c: f"({c}).toString()"),
        children.map(lambda c: f"(() => {c})()"),
        children.map(lambda c: f"(async () => {c})()"),
        children.map(lambda c: f"{c} ? 1 : 2"),
        st.tuples(children, st.text(max_size=5)).map(lambda t: f"{t[0]}[{json.dumps(t[1])}]"),
    )


JS_EXPRESSIONS = st.recursive(JS_ATOMS, _js_compound, max_leaves=8)
JS_STATEMENTS = st.one_of(
    JS_EXPRESSIONS.map(lambda e: f"{e};"),
    JS_EXPRESSIONS.map(lambda e: f"let v = {e};"),
    JS_EXPRESSIONS.map(lambda e: f"throw {e};"),
    JS_EXPRESSIONS.map(lambda e: f"if ({e}) {{ Counter = 1; }} else {{ Counter = 2; }}"),
    JS_EXPRESSIONS.map(lambda e: f"try {{ {e}; }} catch (err) {{ err; }} finally {{ 1; }}"),
    st.sampled_from(
        [
            "while (true) {}",
            "for (;;) { Counter++; }",
            "do {} while (1);",
            "let s = ''; while (true) { s += 'xxxxxxxx'; }",
            "Promise.resolve().then(function again() { return Promise.resolve().then(again); });",
            "var Counter = 'shadow';",
            "delete globalThis.getVariable;",
            "Object.prototype.polluted = 1;",
            "return 1;",
            "debugger;",
        ]
    ),
)
JS_SCRIPTS = st.one_of(
    st.tuples(st.lists(JS_STATEMENTS, max_size=3), JS_EXPRESSIONS).map(
        lambda t: " ".join([*t[0], t[1]])
    ),
    JS_EXPRESSIONS,
    st.text(max_size=40),
)


@FUZZ
@given(code=JS_SCRIPTS)
def test_any_javascript_evaluates_or_raises_an_expression_error_within_its_limit(
    code: str,
) -> None:
    run("JavaScript", code)


# Liquid -------------------------------------------------------------------------------------------

LIQUID_PARTS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(
        [
            "{{ Variables.Counter }}",
            "{{ Counter | plus: 1 }}",
            "{{ Customer.Name | upcase | append: '!' }}",
            "{{ Input.payload.amount | times: 2.5 }}",
            "{{ CorrelationId }}",
            "{{ Items | join: ',' }}",
            "{{ Items | size }}",
            "{{ 'x' | append: 'y' | replace: 'x', 'yy' }}",
            "{{ 10 | divided_by: 0 }}",
            "{{ 1e308 | times: 1e308 }}",
            "{{ nothing.at.all }}",
            "{{ 'now' | date: '%Y' }}",
            "{% assign a = Counter | plus: 1 %}{{ a }}",
            "{% for i in (1..1000000) %}x{% endfor %}",
            "{% for i in (1..100000) %}{% for j in (1..100000) %}{% endfor %}{% endfor %}",
            "{% for i in Items %}{{ i }}{% endfor %}",
            "{% if Counter > 2 %}big{% else %}small{% endif %}",
            "{% case Counter %}{% when 3 %}three{% endcase %}",
            "{% capture c %}{{ Counter }}{% endcapture %}{{ c }}",
            "{% raw %}{{ not rendered }}{% endraw %}",
            "{% comment %}x{% endcomment %}",
            "{% include 'other' %}",
            "{% render 'other' %}",
            "{% cycle 'a', 'b' %}",
            "{% increment n %}",
            "{%",
            "{{",
            "}}",
            "%}",
            "{% endfor %}",
            "{% if %}",
            "{{ | }}",
            "{{ Counter | nosuchfilter }}",
        ]
    ),
)
LIQUID_TEMPLATES = st.one_of(st.lists(LIQUID_PARTS, max_size=6).map("".join), st.text(max_size=40))


@FUZZ
@given(template=LIQUID_TEMPLATES)
def test_any_liquid_template_renders_or_raises_an_expression_error_quickly(
    template: str,
) -> None:
    run("Liquid", template)


# Any expression object ----------------------------------------------------------------------------

ANY_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@FUZZ
@given(
    kind=st.one_of(st.sampled_from(sorted(SUPPORTED_TYPES - {"JavaScript"})), st.text(max_size=8)),
    value=ANY_VALUE,
    type_name=st.one_of(
        st.none(),
        st.sampled_from(
            [
                "Int32",
                "Int64",
                "Double",
                "Decimal",
                "Boolean",
                "String",
                "Object",
                "DateTime",
                "DateTimeOffset",
                "TimeSpan",
                "Guid",
                "System.Int32",
                "Dictionary<string, object>",
            ]
        ),
        st.text(max_size=8),
    ),
)
def test_any_expression_object_evaluates_or_raises_an_expression_error(
    kind: str, value: Any, type_name: str | None
) -> None:
    run(kind, value, type_name, label="expression object")
