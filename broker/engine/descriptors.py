"""What each activity implementation accepts and produces, as a designer needs to know it.

The catalog (``broker.engine.catalog.CATALOG``) is the one list of activity type names; this module
describes each implementation class once (inputs, outputs, outcomes, category), so Elsa Studio's
activity descriptors are generated from the catalog rather than listed a second time. A class in
the catalog without a spec here is a bug that ``tests/unit/console/test_api_descriptors.py``
catches. The activities that arrange others are described in ``broker.engine.composition_specs``;
the shape of a description is ``broker.engine.specs``.
"""

from __future__ import annotations

from broker.engine.activities import data, dispatch, email, http, waits
from broker.engine.activities.base import Behaviour
from broker.engine.composition_specs import COMPOSITION_SPECS
from broker.engine.specs import ActivitySpec, InputSpec, OutputSpec

_RESULT = OutputSpec("Result", "Object", "The activity's result.")
_CORRELATION = InputSpec("CorrelationId", "String", "The correlation id of the new instance.")
_WAIT = InputSpec("WaitForCompletion", "Boolean", "Wait until the child workflow finishes.")
_DEFINITION = InputSpec(
    "WorkflowDefinitionId",
    "String",
    "The definition id of the workflow to run.",
    ui_hint="workflow-definition-picker",
)

SPECS: dict[type[Behaviour], ActivitySpec] = {
    **COMPOSITION_SPECS,
    data.SetVariable: ActivitySpec(
        "Primitives",
        "Assign a value to a variable.",
        inputs=(
            InputSpec(
                "Variable",
                "Object",
                "The variable.",
                ui_hint="variable-picker",
                wrapped=False,
            ),
            InputSpec("Value", "Object", "The value."),
        ),
    ),
    data.SetOutput: ActivitySpec(
        "Primitives",
        "Set an output of the workflow.",
        inputs=(
            InputSpec("OutputName", "String", "The workflow output.", ui_hint="output-picker"),
            InputSpec("OutputValue", "Object", "The value."),
        ),
    ),
    data.WriteLine: ActivitySpec(
        "Console",
        "Write a line to the log.",
        inputs=(InputSpec("Text", "String", "The text."),),
    ),
    data.Correlate: ActivitySpec(
        "Primitives",
        "Set the correlation id of the workflow instance.",
        inputs=(InputSpec("CorrelationId", "String", "The correlation id."),),
    ),
    data.SetName: ActivitySpec(
        "Primitives",
        "Set the name of the workflow instance.",
        inputs=(InputSpec("Value", "String", "The name."),),
    ),
    data.Fault: ActivitySpec(
        "Primitives",
        "Fault the workflow with a message.",
        inputs=(
            InputSpec("Code", "String", "An error code."),
            InputSpec("Message", "String", "The error message."),
            InputSpec("Category", "String", "An error category."),
        ),
        terminal=True,
    ),
    data.Finish: ActivitySpec("Primitives", "Finish the workflow instance at once.", terminal=True),
    data.Complete: ActivitySpec(
        "Primitives",
        "End the innermost workflow scope with outcomes.",
        inputs=(InputSpec("Outcomes", "String[]", "The outcomes.", ui_hint="outcome-picker"),),
        terminal=True,
    ),
    data.RunJavaScript: ActivitySpec(
        "Scripting",
        "Run JavaScript code.",
        inputs=(
            InputSpec(
                "Script",
                "String",
                "The script.",
                ui_hint="code-editor",
                wrapped=False,
                syntax="JavaScript",
            ),
        ),
        outputs=(_RESULT,),
    ),
    waits.Event: ActivitySpec(
        "Primitives",
        "Wait for an event (or start the workflow when one arrives).",
        inputs=(InputSpec("EventName", "String", "The name of the event."),),
        outputs=(_RESULT,),
        kind="Trigger",
    ),
    waits.SignalReceived: ActivitySpec(
        "Primitives",
        "Wait for a signal (an event by another name).",
        inputs=(InputSpec("Signal", "String", "The name of the signal."),),
        outputs=(_RESULT,),
        kind="Trigger",
        browsable=False,
    ),
    waits.Delay: ActivitySpec(
        "Scheduling",
        "Wait for a duration.",
        inputs=(InputSpec("TimeSpan", "TimeSpan", "How long to wait (hh:mm:ss)."),),
    ),
    waits.Timer: ActivitySpec(
        "Scheduling",
        "Start or resume the workflow at an interval.",
        inputs=(InputSpec("Interval", "TimeSpan", "The interval (hh:mm:ss)."),),
        kind="Trigger",
    ),
    waits.Cron: ActivitySpec(
        "Scheduling",
        "Start or resume the workflow at the times a cron expression names.",
        inputs=(
            InputSpec("CronExpression", "String", "Six fields, seconds first (0 */5 * * * *)."),
        ),
        kind="Trigger",
    ),
    waits.StartAt: ActivitySpec(
        "Scheduling",
        "Wait until a moment.",
        inputs=(InputSpec("DateTime", "DateTimeOffset", "When.", ui_hint="datetime-picker"),),
        kind="Trigger",
    ),
    waits.RunTask: ActivitySpec(
        "Primitives",
        "Ask an external worker to run a task and wait for its result.",
        inputs=(
            InputSpec("TaskName", "String", "The name of the task."),
            InputSpec("Args", "Object", "The task's arguments.", ui_hint="json-editor"),
        ),
        outputs=(_RESULT,),
        kind="Task",
    ),
    dispatch.DispatchWorkflow: ActivitySpec(
        "Composition",
        "Start a child workflow.",
        inputs=(
            _DEFINITION,
            _CORRELATION,
            InputSpec("Input", "Object", "The child's input.", ui_hint="json-editor"),
            _WAIT,
        ),
        outputs=(OutputSpec("ChildInstanceId", "String"), _RESULT),
    ),
    dispatch.BulkDispatchWorkflows: ActivitySpec(
        "Composition",
        "Start one child workflow per item.",
        inputs=(
            _DEFINITION,
            InputSpec("Items", "Object", "One input per child.", ui_hint="json-editor"),
            _CORRELATION,
            _WAIT,
        ),
        outputs=(_RESULT,),
        ports=("ChildCompleted", "ChildFaulted"),
    ),
    dispatch.ExecuteWorkflow: ActivitySpec(
        "Composition",
        "Run a child workflow and wait for it.",
        inputs=(
            _DEFINITION,
            _CORRELATION,
            InputSpec("Input", "Object", "The child's input.", ui_hint="json-editor"),
            _WAIT,
        ),
        outputs=(_RESULT,),
    ),
    dispatch.PublishEvent: ActivitySpec(
        "Primitives",
        "Publish an event that resumes waiting workflows.",
        inputs=(
            InputSpec("EventName", "String", "The name of the event."),
            InputSpec("CorrelationId", "String", "Only workflows with this correlation id."),
            InputSpec("IsLocal", "Boolean", "Only this workflow instance."),
            InputSpec("Payload", "Object", "The event payload.", ui_hint="json-editor"),
        ),
    ),
    http.HttpEndpoint: ActivitySpec(
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
            _RESULT,
            OutputSpec("ParsedContent", "Object"),
            OutputSpec("RouteData", "Object"),
            OutputSpec("QueryStringData", "Object"),
            OutputSpec("Headers", "Object"),
        ),
        kind="Trigger",
    ),
    http.WriteHttpResponse: ActivitySpec(
        "HTTP",
        "Write the response of the HTTP request that started the workflow.",
        inputs=(
            InputSpec("StatusCode", "Int32", "The status code.", default=200),
            InputSpec("Content", "Object", "The body.", ui_hint="multiline"),
            InputSpec("ContentType", "String", "The content type."),
            InputSpec("ResponseHeaders", "Object", "Extra headers.", ui_hint="json-editor"),
        ),
    ),
    http.SendHttpRequest: ActivitySpec(
        "HTTP",
        "Send an HTTP request (through the broker's outbound guard).",
        inputs=(
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
    http.FlowSendHttpRequest: ActivitySpec(
        "HTTP",
        "Send an HTTP request and follow the outcome of its status code.",
        inputs=(
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
    email.SendEmail: ActivitySpec(
        "Email",
        "Send an e-mail through the broker's SMTP settings.",
        inputs=(
            InputSpec("From", "String", "The sender."),
            InputSpec("To", "String[]", "The recipients.", ui_hint="multitext"),
            InputSpec("Cc", "String[]", "Copy to.", ui_hint="multitext"),
            InputSpec("Bcc", "String[]", "Blind copy to.", ui_hint="multitext"),
            InputSpec("Subject", "String", "The subject."),
            InputSpec("Body", "String", "The body.", ui_hint="multiline"),
        ),
    ),
}


def spec_for(behaviour: Behaviour) -> ActivitySpec | None:
    """The spec of an implementation's own class (a subclass is never described by its base)."""
    return SPECS.get(type(behaviour))
