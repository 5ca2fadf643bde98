"""Every error the broker raises, as one tree: each has a stable ``code`` and, where an HTTP client
sees it, a ``status``. Only ``RetryLater`` drives control flow (the task layer schedules a retry).
Raise with context and chain the cause (``raise X(...) from exc``)."""

from __future__ import annotations

from typing import Any


class BrokerError(Exception):
    """Raised for any failure the broker anticipates; the base of the tree."""

    code = "broker_error"
    status = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """The JSON body an HTTP client receives: ``{"error": message, "code": code, ...}``."""
        return {"error": self.message, "code": self.code, **self.details}


# Configuration and files ------------------------------------------------------------------------


class ConfigError(BrokerError):
    """Raised when a setting or a configuration file is invalid."""

    code = "config_error"


class ActivityDeclarationError(ConfigError):
    """Raised at start when a Python activity's declaration is bad (a duplicate or built-in type
    name, an unknown input type, a module that does not import); names the activity."""

    code = "activity_declaration_error"


class ClientFileError(ConfigError):
    """Raised when clients.json or requestTypes.json is malformed; names the file and entry."""

    code = "client_file_error"


# Workflow definitions and execution -------------------------------------------------------------


class WorkflowDefinitionError(BrokerError):
    """Raised when a workflow file cannot be parsed or validated; names file, JSON path, reason."""

    code = "invalid_workflow"
    status = 422

    def __init__(self, reason: str, *, file: str | None = None, path: str = "$") -> None:
        where = f"{file}: " if file else ""
        super().__init__(f"{where}{path}: {reason}", file=file, path=path, reason=reason)
        self.file = file
        self.path = path
        self.reason = reason


class ExpressionError(BrokerError):
    """Raised when an expression fails to evaluate; names the activity and the expression."""

    code = "expression_error"

    def __init__(
        self,
        message: str,
        *,
        activity_id: str | None = None,
        expression_type: str | None = None,
        expression: str | None = None,
        reason: str | None = None,
        error_type: str | None = None,
    ) -> None:
        where = f"activity {activity_id!r}: " if activity_id else ""
        kind = f"{expression_type} " if expression_type else ""
        super().__init__(
            f"{where}{kind}expression failed: {message}",
            activity_id=activity_id,
            expression_type=expression_type,
            expression=expression,
        )
        self.activity_id = activity_id
        self.expression_type = expression_type
        self.expression = expression
        #: the failure as the engine Elsa uses would word it (a JavaScript error's message, as
        #: Jint's JavaScriptException has it), and that exception's type, where known
        self.reason = reason
        self.error_type = error_type


class InputEvaluationError(BrokerError):
    """Raised when an activity's input cannot be evaluated; worded as Elsa's
    ``InputEvaluationException``, the cause chained."""

    code = "input_evaluation_error"

    def __init__(self, input_name: str, *, activity_id: str | None = None) -> None:
        super().__init__(
            f"Failed to evaluate activity input '{input_name}'",
            input_name=input_name,
            activity_id=activity_id,
        )
        self.input_name = input_name
        self.activity_id = activity_id


class WorkflowFault(BrokerError):
    """Raised when a workflow faults for good (Elsa.Fault, an invalid input, a failed activity)."""

    code = "workflow_fault"

    def __init__(
        self,
        message: str,
        *,
        fault_code: str | None = None,
        category: str | None = None,
        activity_id: str | None = None,
    ) -> None:
        super().__init__(message, fault_code=fault_code, category=category, activity_id=activity_id)
        self.fault_code = fault_code
        self.category = category
        self.activity_id = activity_id


class RetryLater(BrokerError):
    """Raised when work failed transiently and should run again after ``delay`` seconds.

    The one exception that drives control flow: activities raise it for connect errors and
    timeouts the workflow does not handle, and when their resilience strategy retries; the
    runtime turns it into a scheduled retry row.
    """

    code = "retry_later"
    status = 503

    def __init__(
        self,
        message: str,
        *,
        delay: float | None = None,
        status_code: int | None = None,
        reason: str | None = None,
        strategy: str | None = None,
        policy: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.delay = delay
        #: the retry policy the activity declares (``customProperties.retry``'s shape), if any
        self.policy = policy
        #: the HTTP status that caused it (429, 5xx), None for connect errors and timeouts
        self.status_code = status_code
        #: for an outbound call: ``connect`` (no connection) or ``timeout`` (ran out of time)
        self.reason = reason
        #: the resilience strategy that asked for the retry: it counts its own attempts and waits
        #: exactly ``delay``, outside the broker's retry policy (None: the policy decides)
        self.strategy = strategy


class OutboundBlocked(BrokerError):
    """Raised when an HTTP activity targets a host outside the outbound allowlist."""

    code = "outbound_blocked"


# Runtime ------------------------------------------------------------------------------------------


class LockNotAcquired(BrokerError):
    """Raised when a lock could not be taken within its timeout."""

    code = "lock_not_acquired"
    status = 503


class LockLost(BrokerError):
    """Raised when a lock's fence shows another holder took over; the work must not commit."""

    code = "lock_lost"
    status = 503


class RuntimePaused(BrokerError):
    """Raised when new work arrives while an operator has paused the runtime."""

    code = "runtime_paused"
    status = 503


class StoreUnavailable(BrokerError):
    """Raised when the database cannot be reached; clients should try again."""

    code = "store_unavailable"
    status = 503


# HTTP-facing --------------------------------------------------------------------------------------


class BadRequest(BrokerError):
    """Raised when a request is malformed: bad JSON, wrong types, unknown fields."""

    code = "bad_request"
    status = 400


class UnknownRequestType(BadRequest):
    """Raised when a client submits a request type it may not submit (elsa-broker's message)."""

    code = "unknown_request_type"

    def __init__(self, request_type: str, client_id: str) -> None:
        super().__init__(f"Unknown request type '{request_type}' for client '{client_id}'")


class MissingKeys(BadRequest):
    """Raised when a submission lacks required keys."""

    code = "missing_keys"

    def __init__(self, keys: list[str]) -> None:
        super().__init__("Missing required keys", keys=keys)


class UnexpectedKeys(BadRequest):
    """Raised when a submission carries keys its request type does not allow."""

    code = "unexpected_keys"

    def __init__(self, keys: list[str]) -> None:
        super().__init__("Unexpected keys", keys=keys)


class Unauthenticated(BrokerError):
    """Raised when no valid, allowlisted client certificate or callback secret was presented."""

    code = "unauthenticated"
    status = 401


class Forbidden(BrokerError):
    """Raised when a client acts on another client's record or lacks an admin scope."""

    code = "forbidden"
    status = 403


class NotFound(BrokerError):
    """Raised when a record does not exist."""

    code = "not_found"
    status = 404


class Conflict(BrokerError):
    """Raised when the record's state forbids the action (terminal, replayed, key reused)."""

    code = "conflict"
    status = 409


class UnsupportedMediaType(BrokerError):
    """Raised when a body's Content-Type is not JSON (``application/json`` or ``+json``)."""

    code = "unsupported_media_type"
    status = 415


class ActivationRefused(Conflict):
    """Raised when a workflow's activation strategy (Singleton, Correlation, CorrelatedSingleton)
    forbids a new instance while another one is running."""

    code = "activation_refused"


class PayloadTooLarge(BrokerError):
    """Raised when a body exceeds its size limit (BROKER_MAX_BODY_BYTES, the response or file
    caps)."""

    code = "payload_too_large"
    status = 413


class DefinitionRefused(BadRequest):
    """Raised when a workflow definition may not be saved or published as it is (it does not
    validate, or its request type is taken); ``errors`` lists every reason."""

    code = "definition_refused"

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors), errors=errors)


class RateLimited(BrokerError):
    """Raised when a client is over its rate for a kind of call; answered 429 with Retry-After."""

    code = "rate_limited"
    status = 429

    def __init__(self, message: str, *, limit: str, rate: str, retry_after: int) -> None:
        super().__init__(message, limit=limit, rate=rate, retryAfter=retry_after)
        self.retry_after = retry_after
