"""Structured control flow: the workflow root, Sequence, If, Switch, loops, Fork, Break."""

from __future__ import annotations

from typing import Any

from broker.engine.activities.base import DONE, Behaviour, CompletedChild, activity
from broker.engine.model.enums import FORK_JOIN_MODES, SWITCH_MODES, enum_value
from broker.engine.model.specs import ActivitySpec, InputSpec, OutputSpec
from broker.engine.model.values import as_bool, as_int, as_list
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.state import new_scope
from broker.errors import WorkflowFault

CONDITION_INPUT = InputSpec(
    "Condition", "Boolean", "The condition to evaluate.", ui_hint="singleline"
)
SWITCH_MODE_OPTIONS = ("MatchFirst", "MatchAny")

#: set on the containers a Break passes on its way up (Elsa's ``IsBreaking`` property)
BREAKING = "isBreaking"
#: Elsa's ``ITerminalNode`` activities: a Sequence ends when one of them completes in it
TERMINAL_TYPES = frozenset({"Elsa.Break", "Elsa.Complete", "Elsa.End", "Elsa.Finish"})


def declare_locals(ax: ActivityContext) -> None:
    """Containers with their own ``variables`` open a scope for their children."""
    if ax.node.variables:
        ax.ctx["scope"] = new_scope(ax.node.variables, kind="local")
        for variable in ax.node.variables:
            if variable.value is not None:
                # as a workflow's variable: the default value converted to the variable's type
                literal = {"type": "Literal", "value": variable.value}
                ax.ctx["scope"]["vars"][variable.name] = ax.evaluate(literal, variable.type_name)


@activity(
    "Elsa.Workflow",
    ActivitySpec(
        "Workflows",
        "The top of a workflow; holds its root activity.",
        ports=("Root",),
        container=True,
        browsable=False,
    ),
)
class WorkflowScope(Behaviour):
    """The top of a workflow (and of a composite): runs the root, ends with its outcomes."""

    def execute(self, ax: ActivityContext) -> None:
        ax.schedule(ax.node.ports["root"])

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        self.finish(ax, None)

    def finish(self, ax: ActivityContext, outcomes: tuple[str, ...] | None) -> None:
        scope = ax.ctx["scope"]
        chosen = outcomes or tuple(scope.get("outcomes") or ()) or DONE
        if scope.get("root"):
            ax.state["output"].update(scope["outputs"])
        ax.complete(*chosen)


@activity(
    "Elsa.Sequence",
    ActivitySpec("Workflows", "Execute a set of activities in sequence.", container=True),
    outbound=("Done",),
)
class Sequence(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        declare_locals(ax)
        if not ax.node.activities:
            ax.complete()
            return
        ax.props["index"] = 0
        ax.schedule(ax.node.activities[0])

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        # Elsa: a Break below (no loop in between) or a terminal child ends the sequence.
        if ax.props.get(BREAKING) or child.node.type in TERMINAL_TYPES:
            ax.complete()
            return
        index = ax.props["index"] + 1
        if index < len(ax.node.activities):
            ax.props["index"] = index
            ax.schedule(ax.node.activities[index])
        else:
            ax.complete()


@activity(
    "Elsa.If",
    ActivitySpec(
        "Branching",
        "Evaluate a Boolean condition and run Then or Else.",
        inputs=(CONDITION_INPUT,),
        outputs=(OutputSpec("Result", "Boolean"),),
        ports=("Then", "Else"),
    ),
    outbound=("Done", "False", "True"),
)
class If(Behaviour):
    """Runs ``then`` or ``else``; as a flowchart node it also leaves through True/False."""

    def execute(self, ax: ActivityContext) -> None:
        result = as_bool(ax.get("condition", False))
        ax.props["result"] = result
        ax.set_output("result", result)
        branch = ax.node.ports.get("then" if result else "else")
        if branch is None:
            ax.complete(*self.outcomes(result))
        else:
            ax.schedule(branch)

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        ax.complete(*self.outcomes(ax.props["result"]))

    @staticmethod
    def outcomes(result: bool) -> tuple[str, ...]:
        return ("True" if result else "False", "Done")


@activity(
    "Elsa.Switch",
    ActivitySpec(
        "Branching",
        "Run the activity of the first (or every) case whose condition holds.",
        inputs=(
            InputSpec("Mode", "String", "First match or every match.", options=SWITCH_MODE_OPTIONS),
            InputSpec("Cases", "Object", "The cases.", ui_hint="switch-editor", wrapped=False),
        ),
        ports=("Default",),
    ),
    outbound=("Done",),
)
class Switch(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        match_any = enum_value(ax.get("mode"), SWITCH_MODES, "MatchFirst") == "MatchAny"
        scheduled = False
        for case in ax.node.cases:
            if as_bool(ax.evaluate(case.condition, "Boolean")):
                if case.activity is not None:
                    ax.schedule(case.activity)
                scheduled = True
                if not match_any:
                    break
        default = ax.node.ports.get("default")
        if not scheduled and default is not None:
            ax.schedule(default)
        if not ax.has_children():
            ax.complete()


class Loop(Behaviour):
    """Loops share Break: it completes the innermost loop."""

    is_loop = True


@activity(
    "Elsa.ForEach",
    ActivitySpec(
        "Looping",
        "Run the body once for each item.",
        inputs=(InputSpec("Items", "Object", "The items to iterate.", ui_hint="multitext"),),
        outputs=(OutputSpec("CurrentValue", "Object"),),
        ports=("Body",),
    ),
    outbound=("Done",),
)
class ForEach(Loop):
    def execute(self, ax: ActivityContext) -> None:
        items = ax.get("items")
        spec = ax.node.inputs.get("items")
        if items is None and spec is not None and spec.expression:
            # Elsa's ForEach lists its items: a collection that evaluates to null faults it.
            raise WorkflowFault("ForEach: items evaluated to null", activity_id=ax.node.id)
        ax.props["items"] = as_list(items)
        ax.props["index"] = -1
        self.next(ax)

    def next(self, ax: ActivityContext) -> None:
        items: list[Any] = ax.props["items"]
        index = ax.props["index"] + 1
        body = ax.node.ports.get("body")
        if index >= len(items) or body is None:
            ax.complete()
            return
        ax.props["index"] = index
        ax.set_output("currentValue", items[index])
        ax.schedule(body, props={"currentValue": items[index], "currentIndex": index})

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        self.next(ax)


@activity(
    "Elsa.ParallelForEach",
    ActivitySpec(
        "Looping",
        "Schedule an activity for each item in parallel.",
        inputs=(InputSpec("Items", "Object", "The items to iterate.", ui_hint="multitext"),),
        ports=("Body",),
    ),
    outbound=("Done",),
)
class ParallelForEach(Loop):
    def execute(self, ax: ActivityContext) -> None:
        body = ax.node.ports.get("body")
        items = as_list(ax.get("items"))
        if body is not None:
            for index, item in enumerate(items):
                ax.schedule(body, props={"currentValue": item, "currentIndex": index})
        if not ax.has_children():
            ax.complete()


@activity(
    "Elsa.For",
    ActivitySpec(
        "Looping",
        "Iterate over a sequence of steps between a start and an end number.",
        inputs=(
            InputSpec("Start", "Int32", "The first value.", default=0),
            InputSpec("End", "Int32", "The last value.", default=0),
            InputSpec("Step", "Int32", "The increment.", default=1),
            InputSpec("OuterBoundInclusive", "Boolean", "Include End.", default=True),
        ),
        outputs=(OutputSpec("CurrentValue", "Int32"),),
        ports=("Body",),
    ),
    outbound=("Done",),
)
class For(Loop):
    def execute(self, ax: ActivityContext) -> None:
        ax.props["step"] = as_int(ax.get("step", 1), 1) or 1
        ax.props["end"] = as_int(ax.get("end", 0))
        ax.props["inclusive"] = as_bool(ax.get("outerBoundInclusive", True))
        ax.props["current"] = as_int(ax.get("start", 0))
        self.iterate(ax)

    def iterate(self, ax: ActivityContext) -> None:
        current, end, step = ax.props["current"], ax.props["end"], ax.props["step"]
        inclusive = ax.props["inclusive"]
        if step > 0:
            more = current <= end if inclusive else current < end
        else:
            more = current >= end if inclusive else current > end
        body = ax.node.ports.get("body")
        if not more or body is None:
            ax.complete()
            return
        ax.set_output("currentValue", current)
        ax.schedule(body, props={"currentValue": current})

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        ax.props["current"] += ax.props["step"]
        self.iterate(ax)


@activity(
    "Elsa.While",
    ActivitySpec(
        "Looping",
        "Run the body while the condition holds.",
        inputs=(CONDITION_INPUT,),
        ports=("Body",),
    ),
    outbound=("Done",),
)
class While(Loop):
    def execute(self, ax: ActivityContext) -> None:
        self.iterate(ax)

    def iterate(self, ax: ActivityContext) -> None:
        body = ax.node.ports.get("body")
        if body is None or not as_bool(ax.get("condition", False)):
            ax.complete()
            return
        ax.schedule(body)

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        self.iterate(ax)


@activity("Elsa.Break", ActivitySpec("Looping", "Break out of a loop.", terminal=True))
class Break(Behaviour):
    """Elsa's break signal: it bubbles up to the innermost loop, which completes; every
    Sequence and Fork on the way is marked breaking and completes when its child does."""

    def execute(self, ax: ActivityContext) -> None:
        loop = ax.find_ancestor(lambda node: getattr(ax.behaviour(node), "is_loop", False))
        if loop is not None:
            ax.run.complete(loop, DONE)
            return
        parent = ax.ctx["parent"]
        while parent:
            ctx = ax.run.contexts[parent]
            ctx["props"][BREAKING] = True
            parent = ctx["parent"]
        ax.complete()


@activity(
    "Elsa.Fork",
    ActivitySpec(
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
    outbound=("Done",),
)
class Fork(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        mode = enum_value(ax.get("joinMode"), FORK_JOIN_MODES, "WaitAll")
        ax.props["waitAny"] = mode == "WaitAny"
        for branch in ax.node.branches:
            ax.schedule(branch)
        if not ax.has_children():
            ax.complete()

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        if ax.props["waitAny"] or ax.props.get(BREAKING) or not ax.has_children():
            ax.complete()


@activity(
    "Elsa.Parallel",
    ActivitySpec("Workflows", "Execute a set of activities in parallel.", container=True),
    outbound=("Done",),
)
class Parallel(Behaviour):
    """Elsa's ``Parallel``: schedules every child at once and completes when all completed."""

    def execute(self, ax: ActivityContext) -> None:
        declare_locals(ax)
        for child in ax.node.activities:
            ax.schedule(child)
        if not ax.has_children():
            ax.complete()

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        if not ax.has_children():
            ax.complete()
