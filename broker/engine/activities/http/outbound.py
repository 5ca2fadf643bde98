"""HTTP out: SendHttpRequest and FlowSendHttpRequest route every status to Elsa's outcomes, and
retry a status or a failed connection only when their resilience strategy says so
(docs/design.md, "HTTP statuses and resilience")."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import Behaviour, CompletedChild, activity
from broker.engine.activities.http.endpoint import headers_of
from broker.engine.model.convert import format_timespan
from broker.engine.model.resilience import (
    EXPRESSION,
    LEGACY_STRATEGY,
    TRANSIENT_STATUSES,
    HttpStrategy,
    StrategyError,
    parse_strategy,
    strategy_config,
)
from broker.engine.model.specs import ActivitySpec, InputSpec, OutputSpec
from broker.engine.model.values import as_bool, as_int, as_list, as_text
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.ports import HttpRequest, HttpResponse
from broker.errors import RetryLater, WorkflowFault

logger = logging.getLogger(__name__)

#: the inputs of an outbound request, shared by the HTTP activities that send one
REQUEST_INPUTS = (
    InputSpec("Url", "String", "The URL to send the request to."),
    InputSpec(
        "Method",
        "String",
        "The HTTP method to use when sending the request.",
        options=("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"),
        default="GET",
    ),
    InputSpec(
        "Content",
        "Object",
        "The content to send with the request. Can be a string, an object, a byte array or a "
        "stream.",
        ui_hint="multiline",
    ),
    InputSpec("ContentType", "String", "The content type to use when sending the request."),
    InputSpec(
        "Authorization",
        "String",
        "The Authorization header value to send with the request. For example: Bearer "
        "{some-access-token}",
    ),
    InputSpec(
        "DisableAuthorizationHeaderValidation",
        "Boolean",
        "A value that allows to add the Authorization header without validation.",
    ),
    InputSpec(
        "RequestHeaders",
        "Object",
        "The headers to send along with the request.",
        ui_hint="json-editor",
    ),
    InputSpec("Timeout", "TimeSpan", "How long to wait for the answer."),
)
#: Elsa's obsolete switch for a built-in retry pipeline (eight exponential retries)
ENABLE_RESILIENCY = InputSpec(
    "EnableResiliency", "Boolean", "Obsolete. Use the common Resilience Strategy setting instead."
)
RESPONSE_OUTPUTS = (
    OutputSpec("StatusCode", "Int32", "The HTTP response status code"),
    OutputSpec("ParsedContent", "Object", "The parsed content, if any."),
    OutputSpec("ResponseHeaders", "Object", "The response headers that were received."),
)
#: RetryLater reasons -> Elsa's outcomes of the flow activities, and SendHttpRequest's ports
FAILURE_OUTCOMES = {"connect": "Failed to connect", "timeout": "Timeout"}
FAILURE_PORTS = {"Failed to connect": "failedToConnect", "Timeout": "timeout"}
# RFC 9110 credentials: a token scheme, then optionally its parameters
_AUTHORIZATION = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+( +\S.*)?$")


def build_request(
    ax: ActivityContext, *, content: str = "content", kind: str = "contentType"
) -> HttpRequest:
    """The request an HTTP activity's inputs describe (``content``/``kind``: the names of its
    body and content-type inputs)."""
    url = as_text(ax.get("url"))
    if not url:
        raise WorkflowFault(f"activity {ax.node.id!r} has no url", activity_id=ax.node.id)
    body_value = ax.get(content)
    content_type = ax.get(kind)
    headers = headers_of(ax.get("requestHeaders"))
    body: bytes | None = None
    if isinstance(body_value, dict | list):
        body = json.dumps(body_value).encode()
        content_type = content_type or "application/json"
    elif body_value is not None:
        body = as_text(body_value).encode()
    if content_type:
        headers.setdefault("Content-Type", as_text(content_type))
    authorization = ax.get("authorization")
    if authorization:
        value = as_text(authorization).strip()
        validate = not as_bool(ax.get("disableAuthorizationHeaderValidation", False))
        if validate and not _AUTHORIZATION.match(value):
            raise WorkflowFault(
                f"activity {ax.node.id!r}: the Authorization value is not a scheme and "
                "credentials (e.g. 'Bearer <token>')",
                activity_id=ax.node.id,
            )
        headers["Authorization"] = value
    timeout = ax.get("timeout")
    return HttpRequest(
        method=as_text(ax.get("method", "GET")).upper() or "GET",
        url=url,
        headers=headers,
        body=body,
        idempotency_key=f"{ax.instance_id}:{ax.id}",
        timeout=float(timeout) if isinstance(timeout, int | float) else None,
    )


def strategy_of(ax: ActivityContext) -> HttpStrategy | None:
    """The resilience strategy the activity names (``customProperties.resilienceStrategy``, by
    id from the configured ones or by an expression), or the obsolete ``enableResiliency``
    pipeline; None: no retry on a status."""
    if as_bool(ax.get("enableResiliency", False)):
        return LEGACY_STRATEGY
    config = strategy_config(ax.node.custom_properties)
    if config is None:
        return None
    mode, value = config
    if mode == EXPRESSION:
        value = ax.evaluate(value)
        if isinstance(value, Mapping):
            try:
                return parse_strategy(value, where="resilienceStrategy.expression")
            except StrategyError as exc:
                raise WorkflowFault(str(exc), activity_id=ax.node.id) from exc
        if not isinstance(value, str):
            return None
    found = ax.services.strategies.get(str(value))
    if found is None:  # as Elsa's catalog: an unknown id means no strategy
        logger.warning(
            "activity %s of instance %s names the resilience strategy %r, which is not "
            "configured (BROKER_RESILIENCE_STRATEGIES); it runs without retries",
            ax.node.id,
            ax.instance_id,
            value,
            extra={"instance_id": ax.instance_id},
        )
    return found


def send(ax: ActivityContext, request: HttpRequest, *, resilient: bool) -> HttpResponse:
    """Send through the engine's HTTP client. With a resilience strategy, a transient status or
    a failed connection is retried as the strategy says (a ``RetryLater`` naming it, resumed at
    this activity); the last answer, or failure, is the caller's to route."""
    client = ax.services.http
    if client is None:
        raise WorkflowFault("no HTTP client is configured", activity_id=ax.node.id)
    strategy = strategy_of(ax) if resilient else None
    attempt = int(ax.props.get("retryAttempt", 0))
    request = dataclasses.replace(request, attempt=attempt)
    try:
        response = client.send(request)
    except RetryLater as exc:
        if strategy is not None and exc.reason == "connect":
            _retry(ax, strategy, attempt, exc.message, {})
        raise
    if strategy is not None and response.status_code in TRANSIENT_STATUSES:
        details = {
            "StatusCode": str(response.status_code),
            "Content-Type": _header(response, "Content-Type") or "application/octet-stream",
            "Retry-After": _header(response, "Retry-After"),
        }
        _retry(ax, strategy, attempt, f"answered {response.status_code}", details)
    return response


def _retry(
    ax: ActivityContext, strategy: HttpStrategy, attempt: int, why: str, details: dict[str, Any]
) -> None:
    """Raise the strategy's retry unless its attempts are spent (then return: the caller routes
    the last answer, as Polly hands it back)."""
    if attempt >= strategy.max_retry_attempts:
        return
    delay = strategy.retry_delay(attempt)
    attempts = list(ax.props.get("retryAttempts") or [])
    attempts.append(
        {
            "attemptNumber": attempt,
            "retryDelay": format_timespan(delay),
            "details": {k: v for k, v in details.items() if v is not None},
        }
    )
    ax.props["retryAttempts"] = attempts
    ax.props["retryAttempt"] = attempt + 1
    raise RetryLater(
        f"activity {ax.node.id!r}: {why}; resilience strategy {strategy.id!r} retries "
        f"({attempt + 1} of {strategy.max_retry_attempts})",
        delay=delay,
        strategy=strategy.id,
    )


def _header(response: HttpResponse, name: str) -> str | None:
    wanted = name.lower()
    return next((str(v) for k, v in response.headers.items() if k.lower() == wanted), None)


def set_response_outputs(ax: ActivityContext, response: HttpResponse) -> None:
    ax.set_output("statusCode", response.status_code)
    ax.set_output("parsedContent", response.content)
    ax.set_output("responseHeaders", dict(response.headers))
    ax.set_output(
        "result",
        {
            "statusCode": response.status_code,
            "headers": dict(response.headers),
            "content": response.content,
        },
    )


@activity(
    "Elsa.SendHttpRequest",
    ActivitySpec(
        "HTTP",
        "Send an HTTP request.",
        inputs=(
            *REQUEST_INPUTS,
            ENABLE_RESILIENCY,
            InputSpec(
                "ExpectedStatusCodes",
                "Object",
                "A list of expected status codes to handle and the corresponding activity to "
                "execute when the status code matches.",
                ui_hint="http-status-codes",
                wrapped=False,
            ),
        ),
        outputs=RESPONSE_OUTPUTS,
        ports=("UnmatchedStatusCode", "FailedToConnect", "Timeout"),
        kind="Task",
        display_name="HTTP Request",
    ),
    aliases=("Elsa.Http.SendHttpRequest",),
)
class SendHttpRequest(Behaviour):
    """Runs the activity of the expected status code that matches, else ``UnmatchedStatusCode``
    (none: completes); a connection that fails runs ``FailedToConnect`` or ``Timeout``, and
    without that port the broker's retry policy retries it."""

    flow = False
    #: Elsa's ``IResilientActivity`` (category HTTP): Studio offers its Resilience tab
    resilient = True

    def execute(self, ax: ActivityContext) -> None:
        try:
            response = send(ax, build_request(ax), resilient=True)
        except RetryLater as exc:
            if exc.strategy is not None or not self.handle_failure(ax, exc):
                raise
            return
        set_response_outputs(ax, response)
        self.route(ax, response.status_code)

    def route(self, ax: ActivityContext, status: int) -> None:
        code = str(status)
        ax.props["statusCode"] = code
        case = next((c for c in ax.node.cases if c.label == code), None)
        child = case.activity if case is not None else ax.node.ports.get("unmatchedStatusCode")
        if child is not None:
            ax.schedule(child)
        else:
            ax.complete("Done", code)

    def handle_failure(self, ax: ActivityContext, exc: RetryLater) -> bool:
        """Run the ``failedToConnect`` / ``timeout`` port when the workflow has one; False
        otherwise (the broker's retry policy then retries the call)."""
        outcome = FAILURE_OUTCOMES.get(exc.reason or "")
        if outcome is None:
            return False
        port = ax.node.ports.get(FAILURE_PORTS[outcome])
        if port is None:
            return False
        ax.set_output("error", exc.message)
        ax.props["failure"] = outcome
        ax.schedule(port)
        return True

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        if ax.props.get("failure"):
            ax.complete("Done")
            return
        ax.complete("Done", str(ax.props.get("statusCode", "")))


@activity(
    "Elsa.FlowSendHttpRequest",
    ActivitySpec(
        "HTTP",
        "Send an HTTP request.",
        inputs=(
            *REQUEST_INPUTS,
            ENABLE_RESILIENCY,
            InputSpec(
                "ExpectedStatusCodes",
                "Int32[]",
                "A list of expected status codes to handle.",
                ui_hint="multitext",
                default=[200],
            ),
        ),
        outputs=RESPONSE_OUTPUTS,
        outcomes=("Unmatched status code", "Failed to connect", "Timeout", "Done"),
        kind="Task",
        display_name="HTTP Request (flow)",
    ),
)
class FlowSendHttpRequest(SendHttpRequest):
    """Leaves through the expected status code's outcome (or ``Unmatched status code``) and
    ``Done``; with no expected codes through ``Done`` alone."""

    flow = True

    def route(self, ax: ActivityContext, status: int) -> None:
        ax.complete(*flow_outcomes(ax, status))

    def handle_failure(self, ax: ActivityContext, exc: RetryLater) -> bool:
        """Leave through ``Failed to connect`` / ``Timeout`` when the flowchart connects it."""
        outcome = FAILURE_OUTCOMES.get(exc.reason or "")
        if outcome is None or not connected(ax, outcome):
            return False
        ax.set_output("error", exc.message)
        ax.complete(outcome)
        return True


def flow_outcomes(ax: ActivityContext, status: int) -> tuple[str, ...]:
    """Elsa's outcomes of a flow HTTP activity for ``status``: the code (or ``Unmatched status
    code``) when expected codes are given, then ``Done``."""
    expected = [
        as_int(code)
        for code in as_list(ax.get("expectedStatusCodes"))
        if not isinstance(code, Mapping)
    ]
    if not expected:
        return ("Done",)
    return (str(status) if status in expected else "Unmatched status code", "Done")


def connected(ax: ActivityContext, outcome: str) -> bool:
    """Whether the flowchart holding this activity connects its ``outcome`` port."""
    for node in ax.run.definition(ax.ctx["def"]).nodes.values():
        graph = node.graph
        if graph is not None and ax.node.id in graph.outbound:
            return any(c.source_port == outcome for c in graph.outbound[ax.node.id])
    return False
