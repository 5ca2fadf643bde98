"""What each activity implementation accepts and produces, as a designer needs to know it.

The catalog (``broker.engine.catalog.CATALOG``) is the one list of activity type names; this module
describes each implementation class once (inputs, outputs, outcomes, category), so Elsa Studio's
activity descriptors are generated from the catalog rather than listed a second time. A class in
the catalog without a spec here is a bug that ``tests/unit/engine/test_descriptors.py`` catches.

Names follow Elsa: inputs and outputs are PascalCase here and camelCase in workflow JSON; types
are Elsa's aliases (``String``, ``Boolean``, ``Object``, ``TimeSpan``...).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from broker.engine.activities import control, data, dispatch, email, flow, http, waits
from broker.engine.activities.base import Behaviour

Kind = Literal["Action", "Trigger", "Task"]


@dataclasses.dataclass(frozen=True)
class InputSpec:
    name: str
    type_name: str = "String"
    description: str = ""
    ui_hint: str | None = None  # derived from the type when not given (as Elsa does)
    default: Any = None
    wrapped: bool = True  # an expression (Input<T>) rather than a plain value
    options: tuple[str, ...] = ()  # the items of a dropdown
    syntax: str | None = None  # the default expression language
    browsable: bool = True


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    name: str
    type_name: str = "Object"
    description: str = ""


@dataclasses.dataclass(frozen=True)
class ActivitySpec:
    category: str
    description: str
    inputs: tuple[InputSpec, ...] = ()
    outputs: tuple[OutputSpec, ...] = ()
    outcomes: tuple[str, ...] = ()  # flow ports; none means the designer's single "Done"
    ports: tuple[str, ...] = ()  # embedded ports (child activities held in a property)
    kind: Kind = "Action"
    container: bool = False
    browsable: bool = True
    start: bool = False
    terminal: bool = False
    display_name: str | None = None


def ui_hint_for(spec: InputSpec) -> str:
    """Elsa's default UI hint for an input of this type (``ActivityDescriber.GetUIHint``)."""
    if spec.ui_hint is not None:
        return spec.ui_hint
    if spec.options:
        return "dropdown"
    lowered = spec.type_name.lower()
    if lowered == "boolean":
        return "checkbox"
    if lowered.endswith("[]") or lowered.startswith(("list", "ienumerable")):
        return "dropdown"
    return "singleline"


_RESULT = OutputSpec("Result", "Object", "The activity's result.")
_CONDITION = InputSpec("Condition", "Boolean", "The condition to evaluate.", ui_hint="singleline")
_CORRELATION = InputSpec("CorrelationId", "String", "The correlation id of the new instance.")
_WAIT = InputSpec("WaitForCompletion", "Boolean", "Wait until the child workflow finishes.")
_DEFINITION = InputSpec(
    "WorkflowDefinitionId",
    "String",
    "The definition id of the workflow to run.",
    ui_hint="workflow-definition-picker",
)
_MODES = ("WaitAny", "WaitAll", "WaitAllActive")
_SWITCH_MODES = ("MatchFirst", "MatchAny")

SPECS: dict[type[Behaviour], ActivitySpec] = {
    control.WorkflowScope: ActivitySpec(
        "Workflows",
        "The top of a workflow; holds its root activity.",
        ports=("Root",),
        container=True,
        browsable=False,
    ),
    control.Sequence: ActivitySpec(
        "Workflows", "Execute a set of activities in sequence.", container=True
    ),
    control.Parallel: ActivitySpec(
        "Workflows", "Execute a set of activities in parallel.", container=True
    ),
    control.If: ActivitySpec(
        "Branching",
        "Evaluate a Boolean condition and run Then or Else.",
        inputs=(_CONDITION,),
        outputs=(OutputSpec("Result", "Boolean"),),
        ports=("Then", "Else"),
    ),
    control.Switch: ActivitySpec(
        "Branching",
        "Run the activity of the first (or every) case whose condition holds.",
        inputs=(
            InputSpec("Mode", "String", "First match or every match.", options=_SWITCH_MODES),
            InputSpec("Cases", "Object", "The cases.", ui_hint="switch-editor", wrapped=False),
        ),
        ports=("Default",),
    ),
    control.ForEach: ActivitySpec(
        "Looping",
        "Run the body once for each item.",
        inputs=(InputSpec("Items", "Object", "The items to iterate.", ui_hint="multitext"),),
        outputs=(OutputSpec("CurrentValue", "Object"),),
        ports=("Body",),
    ),
    control.ParallelForEach: ActivitySpec(
        "Looping",
        "Run the body for every item in parallel.",
        inputs=(InputSpec("Items", "Object", "The items to iterate.", ui_hint="multitext"),),
        ports=("Body",),
    ),
    control.For: ActivitySpec(
        "Looping",
        "Run the body for each number from Start to End.",
        inputs=(
            InputSpec("Start", "Int32", "The first value.", default=0),
            InputSpec("End", "Int32", "The last value.", default=0),
            InputSpec("Step", "Int32", "The increment.", default=1),
            InputSpec("OuterBoundInclusive", "Boolean", "Include End.", default=True),
        ),
        outputs=(OutputSpec("CurrentValue", "Int32"),),
        ports=("Body",),
    ),
    control.While: ActivitySpec(
        "Looping",
        "Run the body while the condition holds.",
        inputs=(_CONDITION,),
        ports=("Body",),
    ),
    control.Break: ActivitySpec("Looping", "Leave the innermost loop."),
    control.Fork: ActivitySpec(
        "Control Flow",
        "Run branches in parallel.",
        inputs=(
            InputSpec(
                "JoinMode",
                "String",
                "When the fork completes.",
                options=("WaitAll", "WaitAny"),
            ),
        ),
        container=True,
    ),
    flow.Flowchart: ActivitySpec(
        "Workflows", "A graph of activities joined by connections.", container=True
    ),
    flow.FlowDecision: ActivitySpec(
        "Branching",
        "Evaluate a Boolean condition and follow True or False.",
        inputs=(_CONDITION,),
        outcomes=("True", "False"),
    ),
    flow.FlowSwitch: ActivitySpec(
        "Branching",
        "Follow the outcome of each case whose condition holds, else Default.",
        inputs=(
            InputSpec("Mode", "String", "First match or every match.", options=_SWITCH_MODES),
            InputSpec(
                "Cases",
                "Object",
                "The cases.",
                ui_hint="flow-switch-editor",
                wrapped=False,
            ),
        ),
        outcomes=("Default",),
    ),
    flow.FlowFork: ActivitySpec(
        "Branching",
        "Follow several outcomes at once.",
        inputs=(
            InputSpec(
                "Branches",
                "String[]",
                "The outcomes to follow.",
                ui_hint="dynamic-outcomes",
            ),
        ),
    ),
    flow.FlowJoin: ActivitySpec(
        "Branching",
        "Wait for inbound branches before going on.",
        inputs=(InputSpec("Mode", "String", "How many branches to wait for.", options=_MODES),),
    ),
    flow.FlowNode: ActivitySpec(
        "Workflows",
        "Runs its body as one node of a flowchart.",
        ports=("Body",),
        browsable=False,
    ),
    flow.Start: ActivitySpec("Workflows", "The start of a flowchart.", start=True),
    flow.End: ActivitySpec("Workflows", "Ends the flowchart.", terminal=True),
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
