"""The descriptions of the activities that arrange others: sequences, branches, loops, forks,
and flowcharts with their decisions, switches and joins (``activities.control`` and
``activities.flow``). ``broker.engine.descriptors`` gathers them with the rest.
"""

from __future__ import annotations

from broker.engine.activities import control, flow
from broker.engine.activities.base import Behaviour
from broker.engine.specs import ActivitySpec, InputSpec, OutputSpec

_CONDITION = InputSpec("Condition", "Boolean", "The condition to evaluate.", ui_hint="singleline")
_MODES = ("WaitAny", "WaitAll", "WaitAllActive")
_SWITCH_MODES = ("MatchFirst", "MatchAny")

COMPOSITION_SPECS: dict[type[Behaviour], ActivitySpec] = {
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
}
