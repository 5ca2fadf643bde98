"""JavaScript expressions in a locked-down QuickJS sandbox reused per thread, with Elsa's helper
functions (docs/design.md, section 1)."""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
import logging
import re
import threading
import time
from collections.abc import Iterable
from typing import Any

import quickjs

from broker.engine.expr.jsapi import HELPERS
from broker.engine.expr.jsvalues import Needs, needs_of, remember, supply
from broker.engine.expr.scope import Scope
from broker.errors import ExpressionError

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIME_LIMIT",
    "ScriptResult",
    "evaluate_javascript",
    "run_script",
]

logger = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT = 1.0  # seconds; BROKER_JS_TIME_LIMIT
DEFAULT_MEMORY_LIMIT = 32 * 1024 * 1024  # bytes; BROKER_JS_MEMORY_LIMIT

_EXPRESSION_PREVIEW = 200
_SHAPE_CACHE_SIZE = 128
# A sandbox is replaced after this many evaluations, bounding whatever a long-lived runtime
# accumulates (atoms, fragmentation) without measurable cost.
_EVALUATIONS_PER_SANDBOX = 20_000


# The bootstrap lives beside this module (JavaScript is easier to read and lint as its own file),
# with the .NET types in a file of their own.
def _package_text(name: str) -> str:
    return importlib.resources.files("broker.engine.expr").joinpath(name).read_text("utf-8")


_BOOTSTRAP = (
    _package_text("sandbox.js")
    .replace("/*DOTNET*/", _package_text("dotnet.js"))
    .replace(
        "/*HELPERS*/",
        ",\n".join(
            f"[{json.dumps(helper.name)}, {json.dumps(helper.activity)}, ({helper.source}),"
            f" {json.dumps(helper.kind)}]"
            for helper in HELPERS
            if helper.source is not None
        ),
    )
)


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
    (and the instance's correlation id and name, ``setCorrelationId``/``setWorkflowInstanceName``)
    are written back through ``scope`` only when it succeeds. Raises ``ExpressionError``.
    """
    return run_script(code, scope, time_limit=time_limit, memory_limit=memory_limit).result


@dataclasses.dataclass(frozen=True)
class ScriptResult:
    """What a script produced: its value, and the outcomes it chose (``setOutcome``), if any."""

    result: Any
    outcomes: tuple[str, ...] | None = None


def run_script(
    code: str,
    scope: Scope,
    *,
    activity_type: str | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    memory_limit: int = DEFAULT_MEMORY_LIMIT,
) -> ScriptResult:
    """``evaluate_javascript`` for the script of an activity of ``activity_type``, which also
    sees that activity's helpers (``RunJavaScript``'s ``setOutcome``/``setOutcomes``)."""
    sandbox = _acquire(memory_limit)
    try:
        return sandbox.run(code, scope, time_limit, activity_type)
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
        self._shapes: dict[tuple[Any, ...], quickjs.Object] = {}
        self._context = quickjs.Context()
        self._context.eval(_BOOTSTRAP)
        get = self._context.get
        self._begin = get("__elsaBegin")
        self._finish = get("__elsaFinish")
        self._run = get("__elsaRun")
        self._abort = get("__elsaAbort")
        self._reset = get("__elsaReset")
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

    def run(
        self, code: str, scope: Scope, time_limit: float, activity_type: str | None = None
    ) -> ScriptResult:
        self.busy = True
        try:
            outcome = self._run_to_completion(code, scope, time_limit, activity_type)
        finally:
            self.busy = False
        if outcome is None or isinstance(outcome, bool | int | float):
            return ScriptResult(outcome)
        parsed: dict[str, Any] = json.loads(outcome)
        for name, value in parsed["w"]:
            try:
                scope.set_variable(name, value)
            except Exception as exc:
                raise _fail(scope, code, f"setting variable {name!r}: {exc}", time_limit) from exc
        for key, value in (parsed.get("s") or {}).items():
            scope.set_workflow_info(key, value)
        outcomes = parsed.get("o")
        return ScriptResult(
            parsed.get("r"), tuple(str(o) for o in outcomes) if outcomes is not None else None
        )

    def _run_to_completion(
        self, code: str, scope: Scope, time_limit: float, activity_type: str | None
    ) -> Any:
        deadline = time.monotonic() + time_limit
        needs = needs_of(code)
        shape = self._scope_object(scope, activity_type)
        # The limits hold before any of the code is parsed: compiling is part of the evaluation.
        self._set_time_limit(time_limit)
        try:
            for _attempt in range(_MAX_ATTEMPTS):
                data = self._supply(code, scope, needs, time_limit)
                if needs.asynchronous:
                    self._begin(code, shape, data)
                    self._drain(deadline)
                    outcome = self._finish()
                    if self._context.execute_pending_job():
                        # Jobs queued while the result was serialised: they see no evaluation
                        # and leave nothing behind (the global object is restored after them).
                        self._drain(deadline)
                        self._reset()
                else:
                    outcome = self._run(code, shape, data)
                    if self._context.execute_pending_job():
                        # Promise jobs ran after the evaluation closed: drain them (they fail,
                        # seeing no evaluation), restore the global object after them, and run
                        # the evaluation again in two steps.
                        self._drain(deadline)
                        self._reset()
                        needs = dataclasses.replace(needs, asynchronous=True)
                        remember(code, needs)
                        continue
                if not (isinstance(outcome, str) and outcome.startswith('{"m":')):
                    return outcome
                needs = needs.learn((str(kind), str(key)) for kind, key in json.loads(outcome)["m"])
                remember(code, needs)
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
        no evaluation) so that none of them can run inside the next one; then restore the
        global object after them."""
        try:
            self._abort()
            self._drain(deadline)
            self._reset()
        except quickjs.JSException:
            self.broken = True

    def _drain(self, deadline: float) -> None:
        while self._context.execute_pending_job():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.broken = True
                raise quickjs.JSException("InternalError: interrupted")
            self._set_time_limit(remaining)

    def _supply(self, code: str, scope: Scope, needs: Needs, time_limit: float) -> str:
        try:
            return supply(scope, needs)
        except (TypeError, ValueError) as exc:
            raise _fail(
                scope, code, f"a value cannot be passed to JavaScript: {exc}", time_limit
            ) from exc

    def _scope_object(self, scope: Scope, activity_type: str | None) -> quickjs.Object:
        outputs = tuple(
            (label, tuple(_outputs_of(scope, label))) for label in scope.activity_names()
        )
        key = (
            tuple(scope.variable_names()),
            tuple(scope.input_names()),
            outputs,
            activity_type,
        )
        shape = self._shapes.get(key)
        if shape is None:
            spec = {
                "variables": key[0],
                "inputs": key[1],
                "outputs": dict(outputs),
                "activity": activity_type,
            }
            shape = self._make_scope(json.dumps(spec))
            if len(self._shapes) >= _SHAPE_CACHE_SIZE:
                self._shapes.clear()
            self._shapes[key] = shape
        return shape


def _outputs_of(scope: Scope, activity: str) -> Iterable[str]:
    try:
        return list(scope.activity_outputs(activity))
    except KeyError:
        return ()


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


_STACK_OVERFLOW = ("InternalError: stack overflow", "RangeError: Maximum call stack size exceeded")


_JS_ERROR = re.compile(r"^((?:[A-Z]\w*)?Error): (.*)$")


def _fail(scope: Scope, code: str, message: str, time_limit: float) -> ExpressionError:
    """An ExpressionError for a JavaScript failure, with QuickJS's stack trace trimmed, and its
    reason worded as Jint's exception would word it (``reason``, ``error_type``)."""
    first_line = message.strip().splitlines()[0] if message.strip() else "unknown error"
    error_type = "JavaScriptException"
    if first_line == "InternalError: interrupted":
        first_line = f"time limit of {time_limit:g}s exceeded"
        error_type, reason = "TimeoutException", "The operation has timed out."
    elif first_line in ("InternalError: out of memory", "null"):
        # QuickJS reports an allocation failure inside its error machinery as a bare null.
        first_line = "memory limit exceeded"
        error_type, reason = "MemoryLimitExceededException", first_line
    elif first_line in _STACK_OVERFLOW:
        first_line = "stack overflow (recursion too deep)"
        error_type, reason = "RecursionDepthOverflowException", first_line
    else:
        # Jint's JavaScriptException carries a thrown error's message, else the thrown value.
        thrown = _JS_ERROR.match(first_line)
        reason = thrown.group(2) if thrown else first_line
    return ExpressionError(
        f"{first_line} (in: {preview(code, 80)})",
        activity_id=scope.activity_id,
        expression_type="JavaScript",
        expression=preview(code),
        reason=reason,
        error_type=error_type,
    )


def preview(code: str, limit: int = _EXPRESSION_PREVIEW) -> str:
    """The expression text as errors show it: whitespace collapsed, at most ``limit`` chars."""
    text = " ".join(code.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
