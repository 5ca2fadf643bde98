"""HTTP in: the request entry (a trigger, or a wait in the middle of a workflow) and the
response to the request the instance is answering."""

from __future__ import annotations

import http
import json
import re
from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import Behaviour, activity
from broker.engine.model.specs import RESULT, ActivitySpec, InputSpec, OutputSpec
from broker.engine.model.values import as_list, as_text
from broker.engine.run.activity_context import ActivityContext
from broker.errors import WorkflowFault
from broker.names import HTTP_ENDPOINT

#: the bookmark (and trigger) name of HttpEndpoint, Elsa's ``HttpStimulusNames.HttpEndpoint``
#: Elsa's fault when a response activity has no HTTP request to answer
NO_HTTP_CONTEXT_CODE = "NoHttpContext"
NO_HTTP_CONTEXT = (
    "The HTTP context was lost during workflow execution. This typically occurs when a workflow "
    "initiated from an HTTP endpoint is suspended and later resumed in a different execution "
    "context (e.g., background processing, virtual actor, or after a workflow transition). The "
    "original HTTP request context that expects a response is no longer available."
)


def normalize_route(path: Any) -> str:
    """An endpoint path as its trigger and bookmark hold it: no surrounding slashes, lower case."""
    return as_text(path).strip().strip("/").lower()


def endpoint_payloads(path: Any, methods: Any) -> list[dict[str, str]]:
    """One ``{path, method}`` stimulus per supported method (Elsa's bookmark payloads)."""
    found = as_list(methods) or ["GET"]
    unique = dict.fromkeys(as_text(m).strip().lower() for m in found if as_text(m).strip())
    route = normalize_route(path)
    return [{"path": route, "method": method} for method in unique]


def http_context(ax: ActivityContext) -> Mapping[str, Any] | None:
    """The HTTP request the instance is answering, or None (Elsa's missing HttpContext): the
    request that started it (``POST /requests``, an HttpEndpoint trigger) or the call that
    resumed its HttpEndpoint last."""
    found = ax.state.get("httpContext")
    return found if isinstance(found, Mapping) else None


@activity(
    HTTP_ENDPOINT,
    ActivitySpec(
        "HTTP",
        "Wait for an inbound HTTP request that matches the specified path and methods.",
        inputs=(
            InputSpec("Path", "String", "The path to associate with the workflow."),
            InputSpec(
                "SupportedMethods",
                "String[]",
                "The HTTP methods to accept.",
                ui_hint="checklist",
                options=("GET", "POST", "PUT", "HEAD", "DELETE"),
                default=["GET"],
            ),
        ),
        outputs=(
            RESULT,
            OutputSpec("ParsedContent", "Object", "The parsed request content, if any."),
            OutputSpec("RouteData", "Object", "The parsed route data, if any."),
            OutputSpec("QueryStringData", "Object", "The querystring data, if any."),
            OutputSpec("Headers", "Object", "The headers, if any."),
        ),
        kind="Trigger",
        display_name="HTTP Endpoint",
    ),
    aliases=("Elsa.Http.HttpEndpoint",),
    outbound=("Done",),
    trigger=HTTP_ENDPOINT,
    trigger_aliases=("HttpEndpoint",),
)
class HttpEndpoint(Behaviour):
    """Receives the request that started the instance; reached later, it waits for its request
    (a bookmark per method, resumed by ``METHOD /workflows/{path}``), as Elsa's does."""

    blocking = True

    def execute(self, ax: ActivityContext) -> None:
        trigger = ax.state.get("trigger") or {}
        if trigger.get("activityId") == ax.node.id and not ax.state.get("triggerConsumed"):
            ax.state["triggerConsumed"] = True
            self._received(ax, trigger)
            return
        data = ax.state["input"]
        if ("keys" in data or "payload" in data) and not ax.state.get("requestReceived"):
            # A request type's entry: the submission (POST /requests) is its request.
            ax.state["requestReceived"] = True
            self._received(
                ax,
                {
                    "body": {"keys": data.get("keys") or {}, "payload": data.get("payload")},
                    "headers": data.get("headers"),
                },
            )
            return
        for payload in endpoint_payloads(ax.get("path"), ax.get("supportedMethods")):
            ax.bookmark(HTTP_ENDPOINT, payload)

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        request = value if isinstance(value, Mapping) else {"body": value}
        # The resuming call is now the request this instance answers (WriteHttpResponse).
        ax.state["httpContext"] = {"id": request.get("requestId"), "source": "resume"}
        self._received(ax, request)

    def _received(self, ax: ActivityContext, request: Mapping[str, Any]) -> None:
        ax.set_output("parsedContent", request.get("body"))
        ax.set_output("headers", dict(request.get("headers") or {}))
        ax.set_output("queryStringData", dict(request.get("query") or {}))
        ax.set_output("routeData", dict(request.get("route") or {}))
        # Elsa's Result is the ASP.NET HttpRequest: a script reads its properties by their names
        ax.set_output("result", {"Method": request.get("method"), "Path": request.get("path")})
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


def answering(ax: ActivityContext) -> Mapping[str, Any]:
    """The HTTP request this response answers; faults as Elsa does when there is none."""
    found = http_context(ax)
    if found is None:
        raise WorkflowFault(
            NO_HTTP_CONTEXT,
            fault_code=NO_HTTP_CONTEXT_CODE,
            category="HTTP",
            activity_id=ax.node.id,
        )
    return found


@activity(
    "Elsa.WriteHttpResponse",
    ActivitySpec(
        "HTTP",
        "Write a response to the current HTTP response object.",
        inputs=(
            InputSpec("StatusCode", "Int32", "The status code to return.", default=200),
            InputSpec(
                "Content",
                "Object",
                "The content to write back. String values will be sent as-is, while objects "
                "will be serialized to a JSON string.",
                ui_hint="multiline",
            ),
            InputSpec(
                "ContentType", "String", "The content type to write when sending the response."
            ),
            InputSpec(
                "ResponseHeaders",
                "Object",
                "The headers to send along with the response.",
                ui_hint="json-editor",
            ),
        ),
        display_name="HTTP Response",
    ),
    aliases=("Elsa.Http.WriteHttpResponse",),
    outbound=("Done",),
)
class WriteHttpResponse(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        request = answering(ax)
        code = status_code(ax.get("statusCode"))
        ax.state["httpResponse"] = {
            "statusCode": code,
            # as Elsa's: a 204 No Content response carries no body
            "content": None if code == 204 else ax.get("content"),
            "contentType": ax.get("contentType"),
            "headers": headers_of(ax.get("responseHeaders")),
            "requestId": request.get("id"),
        }
        ax.complete()
