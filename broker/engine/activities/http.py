"""HTTP: the request entry, the response, outbound requests."""

from __future__ import annotations

import http
import json
import re
from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import Behaviour, CompletedChild, activity
from broker.engine.model.specs import RESULT, ActivitySpec, InputSpec, OutputSpec
from broker.engine.model.values import as_bool, as_int, as_list, as_text
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.ports import HttpRequest
from broker.errors import RetryLater, WorkflowFault


@activity(
    "Elsa.HttpEndpoint",
    ActivitySpec(
        "HTTP",
        "Start the workflow when an HTTP request arrives at a path.",
        inputs=(
            InputSpec("Path", "String", "The path, e.g. orders/{id}."),
            InputSpec(
                "SupportedMethods",
                "String[]",
                "The HTTP methods.",
                ui_hint="checklist",
                options=("GET", "POST", "PUT", "PATCH", "DELETE"),
                default=["GET"],
            ),
        ),
        outputs=(
            RESULT,
            OutputSpec("ParsedContent", "Object"),
            OutputSpec("RouteData", "Object"),
            OutputSpec("QueryStringData", "Object"),
            OutputSpec("Headers", "Object"),
        ),
        kind="Trigger",
    ),
    aliases=("Elsa.Http.HttpEndpoint",),
    outbound=("Done",),
)
class HttpEndpoint(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        data = ax.state["input"]
        trigger = ax.state.get("trigger") or {}
        if "keys" in data or "payload" in data:
            parsed: Any = {"keys": data.get("keys") or {}, "payload": data.get("payload")}
        else:
            parsed = trigger.get("body", data or None)
        ax.set_output("parsedContent", parsed)
        ax.set_output("headers", dict(trigger.get("headers") or data.get("headers") or {}))
        ax.set_output("queryStringData", dict(trigger.get("query") or {}))
        ax.set_output("routeData", dict(trigger.get("route") or {}))
        # Elsa's Result is the ASP.NET HttpRequest: a script reads its properties by their names
        ax.set_output("result", {"Method": trigger.get("method"), "Path": trigger.get("path")})
        ax.complete()


def status_code(value: Any, default: int = 200) -> int:
    """``200``, ``"200"``, ``"OK"``, ``"NoContent"`` -> the number."""
    if value is None or value == "":
        return default
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        return int(value)
    name = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", str(value).strip()).upper()
    try:
        return int(http.HTTPStatus[name])
    except KeyError as exc:
        raise WorkflowFault(f"unknown HTTP status {value!r}") from exc


def headers_of(value: Any) -> dict[str, str]:
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    if not isinstance(value, Mapping):
        return {}
    return {
        str(k): ",".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in value.items()
    }


@activity(
    "Elsa.WriteHttpResponse",
    ActivitySpec(
        "HTTP",
        "Write the response of the HTTP request that started the workflow.",
        inputs=(
            InputSpec("StatusCode", "Int32", "The status code.", default=200),
            InputSpec("Content", "Object", "The body.", ui_hint="multiline"),
            InputSpec("ContentType", "String", "The content type."),
            InputSpec("ResponseHeaders", "Object", "Extra headers.", ui_hint="json-editor"),
        ),
    ),
    aliases=("Elsa.Http.WriteHttpResponse",),
    outbound=("Done",),
)
class WriteHttpResponse(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        code = status_code(ax.get("statusCode"))
        ax.state["httpResponse"] = {
            "statusCode": code,
            # as Elsa's: a 204 No Content response carries no body
            "content": None if code == 204 else ax.get("content"),
            "contentType": ax.get("contentType"),
            "headers": headers_of(ax.get("responseHeaders")),
        }
        ax.complete()


#: the inputs of an outbound request, shared by SendHttpRequest and FlowSendHttpRequest
REQUEST_INPUTS = (
    InputSpec("Url", "String", "The URL."),
    InputSpec(
        "Method",
        "String",
        "The method.",
        options=("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"),
        default="GET",
    ),
    InputSpec("Content", "Object", "The body.", ui_hint="multiline"),
    InputSpec("ContentType", "String", "The content type."),
    InputSpec("Authorization", "String", "The Authorization header value."),
    InputSpec("RequestHeaders", "Object", "Extra headers.", ui_hint="json-editor"),
    InputSpec("Timeout", "TimeSpan", "How long to wait for the answer."),
)


@activity(
    "Elsa.SendHttpRequest",
    ActivitySpec(
        "HTTP",
        "Send an HTTP request (through the broker's outbound guard).",
        inputs=(
            *REQUEST_INPUTS,
            InputSpec(
                "ExpectedStatusCodes",
                "Object",
                "Status codes with their own branch.",
                ui_hint="http-status-codes",
                wrapped=False,
            ),
        ),
        outputs=(
            OutputSpec("StatusCode", "Int32"),
            OutputSpec("ParsedContent", "Object"),
            OutputSpec("ResponseHeaders", "Object"),
        ),
        ports=("UnmatchedStatusCode", "FailedToConnect", "Timeout"),
    ),
    aliases=("Elsa.Http.SendHttpRequest",),
)
class SendHttpRequest(Behaviour):
    """Sends the request; transient failures raise ``RetryLater`` (the runtime retries)."""

    flow = False

    def execute(self, ax: ActivityContext) -> None:
        client = ax.services.http
        if client is None:
            raise WorkflowFault("no HTTP client is configured", activity_id=ax.node.id)
        url = as_text(ax.get("url"))
        if not url:
            raise WorkflowFault(f"activity {ax.node.id!r} has no url", activity_id=ax.node.id)
        content = ax.get("content")
        content_type = ax.get("contentType")
        headers = headers_of(ax.get("requestHeaders"))
        body: bytes | None = None
        if isinstance(content, dict | list):
            body = json.dumps(content).encode()
            content_type = content_type or "application/json"
        elif content is not None:
            body = as_text(content).encode()
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
        request = HttpRequest(
            method=as_text(ax.get("method", "GET")).upper() or "GET",
            url=url,
            headers=headers,
            body=body,
            idempotency_key=f"{ax.instance_id}:{ax.id}",
            timeout=float(timeout) if isinstance(timeout, int | float) else None,
        )
        try:
            response = client.send(request)
        except RetryLater as exc:
            # Elsa's "Failed to connect" / "Timeout" when the file handles them; else a retry.
            if not self.handle_failure(ax, exc):
                raise
            return
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
        expected = [
            as_int(code)
            for code in as_list(ax.get("expectedStatusCodes"))
            if not isinstance(code, Mapping)
        ]
        code = str(response.status_code)
        if not self.flow:
            # Elsa runs the activity of the matching expected status code, else the
            # ``unmatchedStatusCode`` port, and completes when that child completes.
            ax.props["statusCode"] = code
            case = next((c for c in ax.node.cases if c.label == code), None)
            child = case.activity if case is not None else ax.node.ports.get("unmatchedStatusCode")
            if child is not None:
                ax.schedule(child)
            else:
                ax.complete("Done", code)
        elif not expected:  # as Elsa's: no expected codes, no status-code outcome
            ax.complete("Done")
        elif response.status_code in expected:
            ax.complete(code, "Done")
        else:
            ax.complete("Unmatched status code", "Done")

    def handle_failure(self, ax: ActivityContext, exc: RetryLater) -> bool:
        """Leave through ``Failed to connect`` / ``Timeout`` (flow) or run the
        ``failedToConnect`` / ``timeout`` port when the workflow has one; False otherwise."""
        outcome = FAILURE_OUTCOMES.get(exc.reason or "")
        if outcome is None:
            return False
        ax.set_output("error", exc.message)
        if self.flow:
            if not _connected(ax, outcome):
                return False
            ax.complete(outcome)
            return True
        port = ax.node.ports.get(FAILURE_PORTS[outcome])
        if port is None:
            return False
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
        "Send an HTTP request and follow the outcome of its status code.",
        inputs=(
            *REQUEST_INPUTS,
            InputSpec(
                "ExpectedStatusCodes",
                "Int32[]",
                "Status codes with their own outcome.",
                ui_hint="multitext",
            ),
        ),
        outputs=(
            OutputSpec("StatusCode", "Int32"),
            OutputSpec("ParsedContent", "Object"),
            OutputSpec("ResponseHeaders", "Object"),
        ),
        outcomes=("Unmatched status code", "Failed to connect", "Timeout", "Done"),
    ),
)
class FlowSendHttpRequest(SendHttpRequest):
    flow = True


#: RetryLater reasons -> Elsa's outcomes of FlowSendHttpRequest, and SendHttpRequest's ports
FAILURE_OUTCOMES = {"connect": "Failed to connect", "timeout": "Timeout"}
FAILURE_PORTS = {"Failed to connect": "failedToConnect", "Timeout": "timeout"}
# RFC 9110 credentials: a token scheme, then optionally its parameters
_AUTHORIZATION = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+( +\S.*)?$")


def _connected(ax: ActivityContext, outcome: str) -> bool:
    """Whether the flowchart holding this activity connects its ``outcome`` port."""
    for node in ax.run.definition(ax.ctx["def"]).nodes.values():
        graph = node.graph
        if graph is not None and ax.node.id in graph.outbound:
            return any(c.source_port == outcome for c in graph.outbound[ax.node.id])
    return False
