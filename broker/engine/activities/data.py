"""Primitives: variables, outputs, WriteLine and ReadLine, naming, ending, faulting a workflow."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import DONE, Behaviour, activity
from broker.engine.activities.control import WorkflowScope
from broker.engine.expr.javascript import run_script
from broker.engine.model.specs import RESULT, ActivitySpec, InputSpec, OutputSpec
from broker.engine.model.values import as_outcomes, as_text
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.faults import FAULT_WITHOUT_MESSAGE
from broker.errors import WorkflowFault


@activity(
    "Elsa.SetVariable",
    ActivitySpec(
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
    outbound=("Done",),
)
class SetVariable(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        variable = ax.node.properties.get("variable")
        if not isinstance(variable, Mapping) or not (variable.get("id") or variable.get("name")):
            raise WorkflowFault(
                f"SetVariable {ax.node.id!r} names no variable", activity_id=ax.node.id
            )
        spec = ax.node.inputs.get("value")
        value = None
        if spec is not None and spec.expression is not None:
            value = ax.evaluate(spec.expression, variable.get("typeName") or spec.type_name)
        ax.run.capture(ax.ctx, ax.node, "inputs", "value", value)
        assign_variable(ax, variable, value)
        ax.complete()


def assign_variable(ax: ActivityContext, variable: Mapping[str, Any], value: Any) -> None:
    var_id, name = variable.get("id"), variable.get("name")
    for scope in ax.run.scopes(ax.ctx):
        if var_id in scope["ids"]:
            scope["vars"][scope["ids"][var_id]] = value
            return
        if name in scope["vars"]:
            scope["vars"][name] = value
            return
    ax.run.workflow_scope(ax.ctx)["vars"][name or var_id] = value


@activity(
    "Elsa.SetOutput",
    ActivitySpec(
        "Primitives",
        "Set an output of the workflow.",
        inputs=(
            InputSpec("OutputName", "String", "The workflow output.", ui_hint="output-picker"),
            InputSpec("OutputValue", "Object", "The value."),
        ),
    ),
    outbound=("Done",),
)
class SetOutput(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        name = as_text(ax.get("outputName"))
        if not name:
            raise WorkflowFault(
                f"SetOutput {ax.node.id!r} has no outputName", activity_id=ax.node.id
            )
        value = ax.get("outputValue")
        scope = ax.run.workflow_scope(ax.ctx)
        scope["outputs"][name] = value
        if scope.get("root"):
            ax.state["output"][name] = value
        ax.complete()


@activity(
    "Elsa.WriteLine",
    ActivitySpec(
        "Console",
        "Write a line to the log.",
        inputs=(InputSpec("Text", "String", "The text."),),
    ),
    outbound=("Done",),
)
class WriteLine(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        ax.write_line(as_text(ax.get("text")))
        ax.complete()


@activity(
    "Elsa.ReadLine",
    ActivitySpec(
        "Console",
        "Read a line of text from the console.",
        outputs=(OutputSpec("Result", "String", "The line read."),),
    ),
    outbound=("Done",),
)
class ReadLine(Behaviour):
    """Elsa's ``ReadLine``: one line from the standard input the engine was given (the testing
    kit's ``standard_in``); the broker's processes have no console, so in them it reads the end
    of an empty input: ``null``, as Elsa's ReadLine does at the end of its stream."""

    def execute(self, ax: ActivityContext) -> None:
        source = ax.services.read_line
        ax.set_output("result", source() if source is not None else None)
        ax.complete()


@activity(
    "Elsa.Correlate",
    ActivitySpec(
        "Primitives",
        "Set the correlation id of the workflow instance.",
        inputs=(InputSpec("CorrelationId", "String", "The correlation id."),),
    ),
    outbound=("Done",),
)
class Correlate(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        value = ax.get("correlationId")
        ax.state["correlationId"] = as_text(value) if value is not None else None
        ax.complete()


@activity(
    "Elsa.SetName",
    ActivitySpec(
        "Primitives",
        "Set the name of the workflow instance.",
        inputs=(InputSpec("Value", "String", "The name."),),
    ),
    outbound=("Done",),
)
class SetName(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        name = ax.get("value", ax.get("name"))
        ax.state["name"] = None if name is None else as_text(name)
        ax.complete()


@activity(
    "Elsa.Fault",
    ActivitySpec(
        "Primitives",
        "Fault the workflow with a message.",
        inputs=(
            InputSpec("Code", "String", "An error code."),
            InputSpec("Message", "String", "The error message."),
            InputSpec("Category", "String", "An error category."),
        ),
        terminal=True,
    ),
)
class Fault(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        message = ax.get("message")
        # Elsa's FaultException with no message has .NET's default one
        message = FAULT_WITHOUT_MESSAGE if message is None else as_text(message)
        code = ax.get("code")
        category = ax.get("category")
        raise WorkflowFault(
            message,
            # Elsa's defaults for an unset code and category
            fault_code=as_text(code) if code is not None else "0",
            category=as_text(category) if category is not None else "General",
            activity_id=ax.node.id,
        )


def finish_scope(ax: ActivityContext, scope_ctx: dict[str, Any], outcomes: tuple[str, ...]) -> None:
    """End a workflow scope (the workflow or a composite) through its own behaviour."""
    run = ax.run
    node = run.node(scope_ctx)
    behaviour = ax.behaviour(node)
    scope_ax = ActivityContext(run, scope_ctx, node)
    scope_ctx["scope"]["outcomes"] = list(outcomes)
    if isinstance(behaviour, WorkflowScope):
        behaviour.finish(scope_ax, outcomes)
    else:
        scope_ax.complete(*outcomes)


def nearest_workflow_scope(ax: ActivityContext) -> dict[str, Any]:
    parent = ax.ctx["parent"]
    while parent:
        ctx = ax.run.contexts[parent]
        scope = ctx.get("scope")
        if scope is not None and scope["kind"] == "workflow":
            return ctx
        parent = ctx["parent"]
    raise WorkflowFault("no workflow scope above this activity", activity_id=ax.node.id)


@activity(
    "Elsa.Finish",
    ActivitySpec("Primitives", "Finish the workflow instance at once.", terminal=True),
)
class Finish(Behaviour):
    """Ends the whole workflow instance at once."""

    def execute(self, ax: ActivityContext) -> None:
        root = ax.run.contexts[ax.state["rootContextId"]]
        ax.run.record(ax.ctx, ax.node, "Completed", "Done")
        finish_scope(ax, root, ("Done",))


@activity(
    "Elsa.Complete",
    ActivitySpec(
        "Primitives",
        "End the innermost workflow scope with outcomes.",
        inputs=(InputSpec("Outcomes", "String[]", "The outcomes.", ui_hint="outcome-picker"),),
        terminal=True,
    ),
)
class Complete(Behaviour):
    """Ends the innermost workflow scope (a composite, else the workflow) with outcomes."""

    def execute(self, ax: ActivityContext) -> None:
        outcomes = as_outcomes(ax.get("outcomes")) or ("Done",)
        scope = nearest_workflow_scope(ax)
        # It completes itself first (its journal shows it), then ends its scope, as in Elsa.
        ax.run.record(ax.ctx, ax.node, "Completed", ",".join(outcomes))
        finish_scope(ax, scope, outcomes)


@activity(
    "Elsa.RunJavaScript",
    ActivitySpec(
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
        outputs=(RESULT,),
    ),
)
class RunJavaScript(Behaviour):
    """Runs its script; ``setOutcome``/``setOutcomes`` in the script choose the ports it leaves
    through (else ``Done``), as in Elsa."""

    def execute(self, ax: ActivityContext) -> None:
        script = as_text(ax.get("script"))
        if not script.strip():
            ax.complete()
            return
        time_limit, memory_limit = ax.js_limits
        ran = run_script(
            script,
            ax.scope(),
            activity_type="Elsa.RunJavaScript",
            time_limit=time_limit,
            memory_limit=memory_limit,
        )
        ax.set_output("result", ran.result)
        ax.complete(*(ran.outcomes or DONE))
