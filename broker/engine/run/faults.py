"""How a failed activity reads in its fault and incident: the message and the exception (type,
message, inner exception) worded as Elsa records them (``ExceptionState``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from broker.engine.model.definition import Activity
from broker.errors import BrokerError, ExpressionError, InputEvaluationError, WorkflowFault

__all__ = ["FAULT_WITHOUT_MESSAGE", "Described", "describe", "input_descriptor_name"]

# Elsa serialises an exception's type by its registered alias (FaultException,
# JavaScriptException, TimeoutException, ...), else as an unregistered CLR type name.
_INPUT_EVALUATION = (
    "UnregisteredClrType:Elsa.Workflows.Exceptions.InputEvaluationException, Elsa.Workflows.Core"
)
_JINT = {
    "MemoryLimitExceededException": "UnregisteredClrType:Jint.Runtime."
    "MemoryLimitExceededException, Jint",
    "RecursionDepthOverflowException": "UnregisteredClrType:Jint.Runtime."
    "RecursionDepthOverflowException, Jint",
}
# .NET's message of an exception created without one (Elsa's Fault with no Message).
FAULT_WITHOUT_MESSAGE = "Exception of type 'Elsa.Workflows.Exceptions.FaultException' was thrown."


@dataclasses.dataclass(frozen=True)
class Described:
    """A failure as a fault or an incident records it."""

    message: str
    code: str | None
    exception: dict[str, Any]


def input_descriptor_name(name: str) -> str:
    """The name Elsa's input descriptor has for an input written ``name`` in workflow JSON (the
    activity's property name: ``condition`` is ``Condition``)."""
    return name[:1].upper() + name[1:]


def describe(exc: BaseException, node: Activity) -> Described:
    """The message, code and exception state of ``exc``, raised by activity ``node``."""
    exception = _exception_state(exc, node)
    if isinstance(exc, WorkflowFault):
        code = exc.fault_code
    elif isinstance(exc, BrokerError):
        code = exc.code
    else:
        code = type(exc).__name__
    return Described(str(exception["message"]), code, exception)


def _exception_state(exc: BaseException, node: Activity) -> dict[str, Any]:
    if isinstance(exc, InputEvaluationError):
        cause = exc.__cause__
        inner = _exception_state(cause, node) if cause is not None else None
        return _state(_INPUT_EVALUATION, exc.message, inner)
    if isinstance(exc, ExpressionError):
        if exc.error_type is not None and exc.reason is not None:
            return _state(_JINT.get(exc.error_type, exc.error_type), exc.reason)
        return _state("Exception", exc.message)
    if isinstance(exc, WorkflowFault):
        return _state("FaultException" if node.type == "Elsa.Fault" else "Exception", exc.message)
    if isinstance(exc, BrokerError):
        return _state("Exception", exc.message)
    return _state(type(exc).__name__, f"activity {node.id!r} ({node.type}) failed: {exc}")


def _state(type_name: str, message: str, inner: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": type_name, "message": message, "innerException": inner}
