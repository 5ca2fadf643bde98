"""JavaScript expressions in a QuickJS sandbox, with Elsa's helper functions.

Each thread owns one QuickJS context (QuickJS runtimes must not move between threads) that is
reused across evaluations, because creating a context costs ~100 us while a cached evaluation
costs a few. Reuse is safe because the context is locked down before any workflow code runs:

- every intrinsic reachable from the global object (and the hidden ones: generator, async and
  iterator prototypes) is frozen, and so is the global object, so no evaluation can leave state
  behind for the next one (a write to an undeclared name is a ReferenceError, and so is
  ``Array.prototype.x = 1``); ``toString``/``constructor``/``name``/``message`` on the shared
  prototypes stay overridable on one's own objects (the "override mistake");
- workflow code runs in strict mode inside a function, so its declarations are local;
- Promise jobs are drained before the evaluation ends; results must not be Promises;
- the context has no module loader, no ``std``/``os``/``require``/``fetch`` and no Python
  callable: nothing in it can reach files, the network, processes or the host.

Names an expression sees: ``getVariable``, ``setVariable``, ``getInput``, ``getCorrelationId``,
``getWorkflowInstanceId``, ``getCurrentValue``, ``getOutputFrom(activity, output?)``,
``isNullOrWhiteSpace``, ``isNullOrEmpty``, ``newGuid``, ``parseGuid``, ``toJson``; every variable
as a global; ``getX()``/``setX(v)`` for each variable ``X`` (also with the first letter
capitalised), ``getX()`` for each input, and ``getOutputFromA()`` for each activity name ``A``.
Values cross the boundary as JSON (dates as ISO text, durations as seconds). Writes, by
``setVariable``, ``setX`` or assignment to the global, and in-place changes to an object variable
the script read (``getItems().push(1)``) reach ``Scope.set_variable`` once, when the evaluation
succeeds; a failing script writes nothing.

The engine is QuickJS-ng (the ``quickjs-ng`` package). Its limits are set before any of the
code is parsed, so they cover compilation as well as execution; the time limit interrupts the
regex engine too (a backtracking pattern stops at the limit). It is measured in process CPU time
per call into the context (Promise jobs share one wall-clock deadline): a loaded machine
stretches it in wall time, and CPU burnt by other threads of the process counts against it. A
workflow step as a whole is bounded by ``BROKER_STEP_TIME_LIMIT`` (the runtime's hard ceiling).

Workflow code is never pasted into a wrapper: it runs as a script of its own (a direct eval of
the text, strict, inside ``with (scope)``); Elsa's function-body form (``return`` at the top) is
compiled as a function declaration behind a ``throw`` and used only when the engine's own parse
of it spans exactly the code, so text written to close a wrapper is refused before any of it
runs.

Code is a script whose completion value is the result (``1 + 2``, a template literal,
``var a = 1; a + 1``), or, as Elsa allows, one that returns from its top level. Errors, time and
memory limits raise ``ExpressionError`` naming the activity and the expression.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import enum
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import quickjs

from broker.engine.scope import Scope
from broker.errors import ExpressionError

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIME_LIMIT",
    "evaluate_javascript",
]

logger = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT = 1.0  # seconds; BROKER_JS_TIME_LIMIT
DEFAULT_MEMORY_LIMIT = 32 * 1024 * 1024  # bytes; BROKER_JS_MEMORY_LIMIT

_EXPRESSION_PREVIEW = 200
_SHAPE_CACHE_SIZE = 128
# A sandbox is replaced after this many evaluations, bounding whatever a long-lived runtime
# accumulates (atoms, fragmentation) without measurable cost.
_EVALUATIONS_PER_SANDBOX = 20_000

_BOOTSTRAP = r"""
(function () {
  "use strict";
  const PROBE = Object.freeze({});
  const MISSING = Object.freeze({});
  const hasOwn = Object.prototype.hasOwnProperty;
  const globalEval = eval;
  const shapes = new WeakMap();
  let current = null;

  function active() {
    if (current === null) throw new Error("no expression is being evaluated");
    return current;
  }
  // A name the scope has but whose value was not supplied: record it and stop; the host runs
  // the evaluation again with the value (nothing has been written back yet).
  function missing(kind, key) {
    active().missing.push([kind, key]);
    throw MISSING;
  }
  function snapshotOf(value) {
    return value !== null && typeof value === "object" ? JSON.stringify(value) : null;
  }
  function readVariable(name) {
    const evaluation = active();
    const entry = evaluation.cache.get(name);
    if (entry !== undefined) return entry.value;
    if (!hasOwn.call(evaluation.data.v, name)) {
      if (evaluation.known.variables.has(name)) missing("variable", name);
      return undefined;
    }
    const value = evaluation.data.v[name];
    evaluation.cache.set(name, { value, json: snapshotOf(value), dirty: false });
    return value;
  }
  function writeVariable(name, value) {
    active().cache.set(name, { value, json: null, dirty: true });
  }
  function readInput(name) {
    const evaluation = active();
    if (hasOwn.call(evaluation.data.i, name)) return evaluation.data.i[name];
    if (evaluation.known.inputs.has(name)) missing("input", name);
    return undefined;
  }
  function readOutput(activity, output) {
    const evaluation = active();
    const key = output === null ? activity : activity + "\u0000" + output;
    if (hasOwn.call(evaluation.data.o, key)) return evaluation.data.o[key];
    if (evaluation.known.activities.has(activity)) missing("output", key);
    return undefined;
  }
  function readCurrent() {
    const evaluation = active();
    if (!hasOwn.call(evaluation.data, "cur")) missing("current", "");
    return evaluation.data.cur;
  }
  const hex = () => Math.floor(Math.random() * 16).toString(16);
  const GUID = /^[{(]?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}[)}]?$/i;
  const helpers = {
    getVariable: (name) => readVariable(String(name)),
    setVariable: (name, value) => { writeVariable(String(name), value); },
    getInput: (name) => readInput(String(name)),
    getCorrelationId: () => active().data.c,
    getWorkflowInstanceId: () => active().data.w,
    getCurrentValue: () => readCurrent(),
    getOutputFrom: (activity, output) => readOutput(String(activity),
      output === undefined || output === null ? null : String(output)),
    isNullOrWhiteSpace: (value) => value === null || value === undefined
      || String(value).trim() === "",
    isNullOrEmpty: (value) => value === null || value === undefined || String(value) === "",
    newGuid: () => "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx".replace(/[xy]/g,
      (c) => (c === "x" ? hex() : "89ab"[Math.floor(Math.random() * 4)])),
    parseGuid: (text) => {
      const value = String(text).trim();
      if (!GUID.test(value)) throw new TypeError("not a GUID: " + value);
      const digits = value.replace(/[^0-9a-f]/gi, "").toLowerCase();
      return [digits.slice(0, 8), digits.slice(8, 12), digits.slice(12, 16),
        digits.slice(16, 20), digits.slice(20)].join("-");
    },
    toJson: (value) => JSON.stringify(value),
  };
  const RESERVED = new Set(["eval", "arguments", "__elsaBody"]);

  function makeScope(spec) {
    const { variables, inputs, activities } = JSON.parse(spec);
    const scope = Object.create(null);
    const define = (key, descriptor) => {
      if (!RESERVED.has(key) && !(key in scope)) {
        Object.defineProperty(scope, key, { enumerable: true, ...descriptor });
      }
    };
    const capitalised = (name) => name.charAt(0).toUpperCase() + name.slice(1);
    for (const key of Object.keys(helpers)) define(key, { value: helpers[key] });
    for (const name of variables) {
      define(name, { get: () => readVariable(name), set: (value) => writeVariable(name, value) });
    }
    for (const name of variables) {
      for (const suffix of new Set([name, capitalised(name)])) {
        define("get" + suffix, { value: () => readVariable(name) });
        define("set" + suffix, { value: (value) => { writeVariable(name, value); } });
      }
    }
    for (const name of inputs) {
      for (const suffix of new Set([name, capitalised(name)])) {
        define("get" + suffix, { value: () => readInput(name) });
      }
    }
    for (const name of activities) {
      define("getOutputFrom" + name, { value: () => readOutput(name, null) });
    }
    shapes.set(scope, harden({
      variables: new Set(variables), inputs: new Set(inputs), activities: new Set(activities) }));
    return harden(scope);
  }

  // Workflow code is never pasted into a wrapper: it is evaluated as a script of its own (a
  // direct eval of the text as a value, in strict mode, inside `with (scope)`), or, when it
  // is a function body (Elsa allows `return` at the top), compiled as a function declaration
  // behind a `throw` (nothing in it can run) and accepted only when the engine's parse of
  // that declaration spans exactly the code: text that closes the function it is compiled in
  // is refused before any of it runs.
  const makeRunners = globalEval(
    "(function (scope) { with (scope) { return [\n" +
    "function () { \"use strict\"; return eval(arguments[0]); },\n" +
    "function () { var __elsaBody; try { eval(arguments[0]); }\n" +
    "  catch (error) { if (error !== arguments[1]) throw error; } return __elsaBody; }\n" +
    "]; } })");
  const fnToString = Function.prototype.toString;
  const BODY_HEAD = "function __elsaBody() {\"use strict\";\n";
  const runners = new WeakMap();
  const kinds = new Map();
  const KINDS_LIMIT = 512;

  function runnersOf(scope) {
    let found = runners.get(scope);
    if (found === undefined) {
      const [script, declare] = makeRunners(scope);
      found = { script: harden(script), declare, bodies: new Map() };
      runners.set(scope, found);
    }
    return found;
  }
  function kindOf(code) {
    let kind = kinds.get(code);
    if (kind !== undefined) return kind;
    try {
      // Parsing precedes execution: when the probe is what gets thrown, the code parsed as a
      // script and none of it ran.
      eval("throw PROBE;\n" + code);
    } catch (error) {
      if (error === PROBE) kind = "script";
      else if (!(error instanceof SyntaxError)) throw error;
      else kind = error;
    }
    if (kind !== "script") {
      const fn = bodyOf(runnersOf(EMPTY_SCOPE), code);
      if (fn === null) throw kind;  // neither a script nor a function body: the script's error
      kind = "body";
    }
    if (kinds.size >= KINDS_LIMIT) kinds.clear();
    kinds.set(code, kind);
    return kind;
  }
  function bodyOf(runner, code) {
    let fn = runner.bodies.get(code);
    if (fn !== undefined) return fn;
    const text = BODY_HEAD + code + "\n}";
    try {
      fn = runner.declare("throw arguments[1];\n" + text, PROBE);
    } catch (error) {
      if (error instanceof SyntaxError) return null;
      throw error;
    }
    if (typeof fn !== "function" || fnToString.call(fn) !== text) {
      throw new SyntaxError("the code closes the function it is compiled in");
    }
    fn = harden(fn);
    if (runner.bodies.size >= KINDS_LIMIT) runner.bodies.clear();
    runner.bodies.set(code, fn);
    return fn;
  }
  function evaluate(code, scope) {
    const runner = runnersOf(scope);
    if (kindOf(code) === "script") return runner.script(code);
    return bodyOf(runner, code)();
  }
  const EMPTY_SCOPE = Object.freeze(Object.create(null));

  function begin(code, scope, data) {
    current = { known: shapes.get(scope), data: JSON.parse(data), cache: new Map(),
      missing: [], result: undefined };
    try {
      current.result = evaluate(code, scope);
    } catch (error) {
      if (current.missing.length === 0) throw error;
    }
  }
  // Ends the evaluation: a number, boolean or null when that is the result and nothing is to
  // be written back (the common case, spared a JSON round trip), else JSON text
  // {r: result, w: [[name, value], ...]} or {m: [[kind, key], ...]} for values not supplied.
  function finish() {
    const evaluation = active();
    current = null;
    if (evaluation.missing.length > 0) return JSON.stringify({ m: evaluation.missing });
    const writes = [];
    for (const [name, entry] of evaluation.cache) {
      if (entry.dirty || entry.json !== null) {
        const text = JSON.stringify(entry.value);
        if (entry.dirty || text !== entry.json) {
          writes.push([name, text === undefined ? null : JSON.parse(text)]);
        }
      }
    }
    const result = evaluation.result;
    const type = typeof result;
    if (writes.length === 0) {
      if (result === undefined || result === null) return null;
      if (type === "boolean") return result;
      if (type === "number") return Number.isFinite(result) ? result : null;
    }
    if (result !== null && (type === "object" || type === "function")
        && typeof result.then === "function") {
      throw new TypeError("the result is a Promise; asynchronous results are not supported");
    }
    return JSON.stringify({ r: result, w: writes });
  }
  function run(code, scope, data) {
    begin(code, scope, data);
    return finish();
  }
  function abort() { current = null; }

  function harden(root) {
    const seen = new Set();
    const pending = [root];
    while (pending.length > 0) {
      const value = pending.pop();
      if (value === null || (typeof value !== "object" && typeof value !== "function")
          || seen.has(value)) continue;
      seen.add(value);
      Object.freeze(value);
      pending.push(Object.getPrototypeOf(value));
      for (const key of Reflect.ownKeys(value)) {
        const descriptor = Object.getOwnPropertyDescriptor(value, key);
        if (descriptor === undefined) continue;
        if ("value" in descriptor) pending.push(descriptor.value);
        else pending.push(descriptor.get, descriptor.set);
      }
    }
    return root;
  }
  function allowOverride(target, key) {
    const descriptor = Object.getOwnPropertyDescriptor(target, key);
    if (descriptor === undefined || !("value" in descriptor) || !descriptor.configurable) return;
    const value = descriptor.value;
    Object.defineProperty(target, key, {
      get() { return value; },
      set(replacement) {
        if (this === target) {
          throw new TypeError("Cannot assign to read only property '" + String(key) + "'");
        }
        Object.defineProperty(this, key, {
          value: replacement, writable: true, enumerable: true, configurable: true });
      },
      enumerable: descriptor.enumerable,
      configurable: false,
    });
  }
  function lockdown() {
    for (const name of ["__elsaBegin", "__elsaFinish", "__elsaRun", "__elsaAbort", "__elsaScope",
                        "__elsaLockdown", "WeakRef", "FinalizationRegistry"]) {
      delete globalThis[name];
    }
    for (const key of Reflect.ownKeys(Object.prototype)) allowOverride(Object.prototype, key);
    const errors = [Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError,
      URIError, InternalError, AggregateError];
    for (const type of errors) {
      for (const key of ["name", "message", "toString", "constructor"]) {
        allowOverride(type.prototype, key);
      }
    }
    for (const target of [Function.prototype, Array.prototype]) {
      for (const key of ["toString", "constructor"]) allowOverride(target, key);
    }
    const hidden = [
      function* () {}, async function () {}, async function* () {}, async () => {},
      (function* () {})(), [][Symbol.iterator](), new Map()[Symbol.iterator](),
      new Set()[Symbol.iterator](), ""[Symbol.iterator](), /x/[Symbol.matchAll](""),
    ];
    for (const value of hidden) harden(Object.getPrototypeOf(value));
    harden(globalThis);
  }

  globalThis.__elsaBegin = begin;
  globalThis.__elsaFinish = finish;
  globalThis.__elsaRun = run;
  globalThis.__elsaAbort = abort;
  globalThis.__elsaScope = makeScope;
  globalThis.__elsaLockdown = lockdown;
})();
"""


def evaluate_javascript(
    code: str,
    scope: Scope,
    *,
    time_limit: float = DEFAULT_TIME_LIMIT,
    memory_limit: int = DEFAULT_MEMORY_LIMIT,
) -> Any:
    """Run ``code`` against ``scope`` and return its result as a JSON-like Python value.

    ``time_limit`` (seconds) bounds the whole evaluation, Promise jobs included;
    ``memory_limit`` (bytes) bounds the sandbox's heap. Variables the script assigned or mutated
    are written back through ``scope.set_variable`` only when it succeeds. Raises
    ``ExpressionError``.
    """
    sandbox = _acquire(memory_limit)
    try:
        return sandbox.run(code, scope, time_limit)
    finally:
        sandbox.evaluations += 1
        if sandbox.broken or sandbox.evaluations >= _EVALUATIONS_PER_SANDBOX:
            _discard(sandbox)


_local = threading.local()


def _acquire(memory_limit: int) -> _Sandbox:
    sandbox: _Sandbox | None = getattr(_local, "sandbox", None)
    if sandbox is None:
        sandbox = _Sandbox()
        _local.sandbox = sandbox
    elif sandbox.busy:
        # Re-entered while evaluating (a Scope whose getter evaluates expressions itself): use
        # a private sandbox rather than disturb the one mid-evaluation.
        sandbox = _Sandbox()
    sandbox.set_memory_limit(memory_limit)
    return sandbox


def _discard(sandbox: _Sandbox) -> None:
    if getattr(_local, "sandbox", None) is sandbox:
        _local.sandbox = None


@dataclasses.dataclass(frozen=True)
class _Needs:
    """What an evaluation of one expression text supplies to the script: the names seen in its
    text, plus what earlier runs asked for that was not supplied (``getVariable(name)``)."""

    names: frozenset[str]
    activities: frozenset[str]
    current: bool = False
    learned: frozenset[tuple[str, str]] = frozenset()
    # Set once the script was seen to queue Promise jobs: it then runs in two steps, the jobs
    # drained in between while the evaluation is still open.
    asynchronous: bool = False

    def learn(self, misses: Iterable[tuple[str, str]]) -> _Needs:
        learned = self.learned | frozenset(misses)
        return dataclasses.replace(
            self,
            names=self.names | {key for kind, key in learned if kind in ("variable", "input")},
            current=self.current or any(kind == "current" for kind, _ in learned),
            learned=learned,
        )


_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")
_needs_cache: dict[str, _Needs] = {}
_NEEDS_CACHE_SIZE = 4096


def _needs_of(code: str) -> _Needs:
    needs = _needs_cache.get(code)
    if needs is not None:
        return needs
    tokens = set(_IDENTIFIER.findall(code))
    names = set(tokens)
    activities = set(tokens)
    for token in tokens:
        if token.startswith(("get", "set")) and len(token) > 3:
            rest = token[3:]
            names.update((rest, rest[0].lower() + rest[1:]))
        if token.startswith("getOutputFrom") and len(token) > 13:
            activities.add(token[13:])
    needs = _Needs(frozenset(names), frozenset(activities), current="getCurrentValue" in tokens)
    _remember(code, needs)
    return needs


def _remember(code: str, needs: _Needs) -> None:
    if len(_needs_cache) >= _NEEDS_CACHE_SIZE:
        _needs_cache.clear()  # rare (thousands of distinct texts); cheaper than an LRU per hit
    _needs_cache[code] = needs


class _Sandbox:
    """One locked-down QuickJS context and the caches that make its reuse cheap.

    No Python callable is registered in the context (the binding refuses calls into Python
    while a time limit is set, and it keeps the sandbox closed): the values a script may read
    are supplied up front as JSON, chosen from the identifiers in its text; a script that asks
    for one that was not supplied is run again with it, which is safe because its writes are
    applied only after a successful run.
    """

    def __init__(self) -> None:
        _check_engine()
        self.evaluations = 0
        self.busy = False
        # Set after a time, memory or stack limit hit or an internal error: QuickJS recovers
        # from those, but a fresh context costs little and rules out a half-updated one.
        self.broken = False
        self._time_limit = -1.0
        self._memory_limit = -1
        self._shapes: dict[tuple[tuple[str, ...], ...], quickjs.Object] = {}
        self._context = quickjs.Context()
        self._context.eval(_BOOTSTRAP)
        get = self._context.get
        self._begin = get("__elsaBegin")
        self._finish = get("__elsaFinish")
        self._run = get("__elsaRun")
        self._abort = get("__elsaAbort")
        self._make_scope = get("__elsaScope")
        get("__elsaLockdown")()

    def set_memory_limit(self, limit: int) -> None:
        if limit != self._memory_limit:
            self._context.set_memory_limit(limit)
            self._memory_limit = limit

    def _set_time_limit(self, limit: float) -> None:
        if limit != self._time_limit:
            self._context.set_time_limit(limit)
            self._time_limit = limit

    def run(self, code: str, scope: Scope, time_limit: float) -> Any:
        self.busy = True
        try:
            outcome = self._run_to_completion(code, scope, time_limit)
        finally:
            self.busy = False
        if outcome is None or isinstance(outcome, bool | int | float):
            return outcome
        parsed: dict[str, Any] = json.loads(outcome)
        for name, value in parsed["w"]:
            try:
                scope.set_variable(name, value)
            except Exception as exc:
                raise _fail(scope, code, f"setting variable {name!r}: {exc}", time_limit) from exc
        return parsed.get("r")

    def _run_to_completion(self, code: str, scope: Scope, time_limit: float) -> Any:
        deadline = time.monotonic() + time_limit
        needs = _needs_of(code)
        shape = self._scope_object(scope)
        # The limits hold before any of the code is parsed: compiling is part of the evaluation.
        self._set_time_limit(time_limit)
        try:
            for _attempt in range(_MAX_ATTEMPTS):
                data = self._supply(code, scope, needs, time_limit)
                if needs.asynchronous:
                    self._begin(code, shape, data)
                    self._drain(deadline)
                    outcome = self._finish()
                else:
                    outcome = self._run(code, shape, data)
                    if self._context.execute_pending_job():
                        # Promise jobs ran after the evaluation closed: drain them (they fail,
                        # seeing no evaluation) and run it again in two steps.
                        self._drain(deadline)
                        needs = dataclasses.replace(needs, asynchronous=True)
                        _remember(code, needs)
                        continue
                if not (isinstance(outcome, str) and outcome.startswith('{"m":')):
                    return outcome
                needs = needs.learn((str(kind), str(key)) for kind, key in json.loads(outcome)["m"])
                _remember(code, needs)
                self._set_time_limit(max(deadline - time.monotonic(), 0.001))
        except quickjs.JSException as exc:
            message = str(exc)
            if message.startswith("InternalError") or isinstance(exc, quickjs.StackOverflow):
                self.broken = True
            else:
                self._close(deadline)
            raise _fail(scope, code, message, time_limit) from exc
        raise _fail(scope, code, "the script kept asking for values not supplied", time_limit)

    def _close(self, deadline: float) -> None:
        """After a failed evaluation: end it, and run its queued Promise jobs now (they see
        no evaluation) so that none of them can run inside the next one."""
        try:
            self._abort()
            self._drain(deadline)
        except quickjs.JSException:
            self.broken = True

    def _drain(self, deadline: float) -> None:
        while self._context.execute_pending_job():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.broken = True
                raise quickjs.JSException("InternalError: interrupted")
            self._set_time_limit(remaining)

    def _supply(self, code: str, scope: Scope, needs: _Needs, time_limit: float) -> str:
        try:
            return _supply(scope, needs)
        except (TypeError, ValueError) as exc:
            raise _fail(
                scope, code, f"a value cannot be passed to JavaScript: {exc}", time_limit
            ) from exc

    def _scope_object(self, scope: Scope) -> quickjs.Object:
        key = (
            tuple(scope.variable_names()),
            tuple(scope.input_names()),
            tuple(scope.activity_names()),
        )
        shape = self._shapes.get(key)
        if shape is None:
            spec = json.dumps({"variables": key[0], "inputs": key[1], "activities": key[2]})
            shape = self._make_scope(spec)
            if len(self._shapes) >= _SHAPE_CACHE_SIZE:
                self._shapes.clear()
            self._shapes[key] = shape
        return shape


_MAX_ATTEMPTS = 4
_engine_checked = False


def _check_engine() -> None:
    """Refuse to run on the old ``quickjs`` package (a 2021 QuickJS whose time limit misses the
    regex engine): it installs the same module name, and an upgraded environment may still
    load its binary."""
    global _engine_checked
    if _engine_checked:
        return
    if quickjs.Context().eval("typeof Iterator") != "function":
        raise RuntimeError(
            "the JavaScript engine is the old quickjs package, not quickjs-ng: run "
            "`pip uninstall -y quickjs quickjs-ng && pip install quickjs-ng`"
        )
    _engine_checked = True


def _supply(scope: Scope, needs: _Needs) -> str:
    """The JSON text of the values this evaluation may read."""
    data: dict[str, Any] = {"c": scope.correlation_id, "w": scope.workflow_instance_id}
    names = needs.names
    variables: dict[str, Any] = {}
    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    if names:
        for name in scope.variable_names():
            if name in names and name not in variables:
                with contextlib.suppress(KeyError):
                    variables[name] = scope.get_variable(name)
        for name in scope.input_names():
            if name in names:
                with contextlib.suppress(KeyError):
                    inputs[name] = scope.get_input(name)
        for name in scope.activity_names():
            if name in needs.activities:
                with contextlib.suppress(KeyError):
                    outputs[name] = scope.get_activity_output(name)
    for kind, key in needs.learned:
        if kind == "output":
            activity, _, output = key.partition("\u0000")
            with contextlib.suppress(KeyError):
                outputs[key] = scope.get_activity_output(activity, output or None)
    data["v"] = variables
    data["i"] = inputs
    data["o"] = outputs
    if needs.current:
        data["cur"] = scope.current_value()
    return _ENCODER.encode(data)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a {type(value).__name__} is not JSON")


_ENCODER = json.JSONEncoder(default=_json_default, separators=(",", ":"), allow_nan=False)


_STACK_OVERFLOW = ("InternalError: stack overflow", "RangeError: Maximum call stack size exceeded")


def _fail(scope: Scope, code: str, message: str, time_limit: float) -> ExpressionError:
    """An ExpressionError for a JavaScript failure, with QuickJS's stack trace trimmed."""
    first_line = message.strip().splitlines()[0] if message.strip() else "unknown error"
    if first_line == "InternalError: interrupted":
        first_line = f"time limit of {time_limit:g}s exceeded"
    elif first_line in ("InternalError: out of memory", "null"):
        # QuickJS reports an allocation failure inside its error machinery as a bare null.
        first_line = "memory limit exceeded"
    elif first_line in _STACK_OVERFLOW:
        first_line = "stack overflow (recursion too deep)"
    return ExpressionError(
        f"{first_line} (in: {preview(code, 80)})",
        activity_id=scope.activity_id,
        expression_type="JavaScript",
        expression=preview(code),
    )


def preview(code: str, limit: int = _EXPRESSION_PREVIEW) -> str:
    """The expression text as errors show it: whitespace collapsed, at most ``limit`` chars."""
    text = " ".join(code.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
