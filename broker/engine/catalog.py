"""Activity type names -> implementations (Elsa's names, plus the seed's aliases).

A type that is not listed here is a workflow-definition activity when the node names a
``workflowDefinitionId`` or a loaded definition is usable as an activity under that type name.
"""

from __future__ import annotations

from broker.engine.activities import control, data, dispatch, email, flow, http, waits
from broker.engine.activities.base import Behaviour
from broker.engine.activity_context import ActivityContext
from broker.engine.definition import TYPE_ALIASES, Activity
from broker.engine.lookup import DefinitionLookup
from broker.engine.outcomes import WORKFLOW_TYPE
from broker.errors import WorkflowFault

CATALOG: dict[str, Behaviour] = {
    WORKFLOW_TYPE: control.WorkflowScope(),
    "Elsa.Sequence": control.Sequence(),
    "Elsa.If": control.If(),
    "Elsa.Switch": control.Switch(),
    "Elsa.ForEach": control.ForEach(),
    "Elsa.ParallelForEach": control.ParallelForEach(),
    "Elsa.For": control.For(),
    "Elsa.While": control.While(),
    "Elsa.Break": control.Break(),
    "Elsa.Fork": control.Fork(),
    "Elsa.Parallel": control.Parallel(),
    "Elsa.Flowchart": flow.Flowchart(),
    "Elsa.FlowDecision": flow.FlowDecision(),
    "Elsa.FlowSwitch": flow.FlowSwitch(),
    "Elsa.FlowFork": flow.FlowFork(),
    "Elsa.FlowJoin": flow.FlowJoin(),
    "Elsa.FlowNode": flow.FlowNode(),
    "Elsa.Start": flow.Start(),
    "Elsa.End": flow.End(),
    "Elsa.SetVariable": data.SetVariable(),
    "Elsa.SetOutput": data.SetOutput(),
    "Elsa.WriteLine": data.WriteLine(),
    "Elsa.Correlate": data.Correlate(),
    "Elsa.SetName": data.SetName(),
    "Elsa.Fault": data.Fault(),
    "Elsa.Finish": data.Finish(),
    "Elsa.Complete": data.Complete(),
    "Elsa.RunJavaScript": data.RunJavaScript(),
    "Elsa.Event": waits.Event(),
    "Elsa.SignalReceived": waits.SignalReceived(),
    "Elsa.Delay": waits.Delay(),
    "Elsa.Timer": waits.Timer(),
    "Elsa.StartAt": waits.StartAt(),
    "Elsa.Cron": waits.Cron(),
    "Elsa.RunTask": waits.RunTask(),
    "Elsa.DispatchWorkflow": dispatch.DispatchWorkflow(),
    "Elsa.BulkDispatchWorkflows": dispatch.BulkDispatchWorkflows(),
    "Elsa.ExecuteWorkflow": dispatch.ExecuteWorkflow(),
    "Elsa.PublishEvent": dispatch.PublishEvent(),
    "Elsa.HttpEndpoint": http.HttpEndpoint(),
    "Elsa.WriteHttpResponse": http.WriteHttpResponse(),
    "Elsa.SendHttpRequest": http.SendHttpRequest(),
    "Elsa.FlowSendHttpRequest": http.FlowSendHttpRequest(),
    "Elsa.SendEmail": email.SendEmail(),
}
for _alias, _name in TYPE_ALIASES.items():
    CATALOG.setdefault(_alias, CATALOG[_name])

COMPOSITE = dispatch.Composite()


class Unknown(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        raise WorkflowFault(f"unknown activity type {ax.node.type!r}", activity_id=ax.node.id)


UNKNOWN = Unknown()


def behaviour_for(node: Activity, definitions: DefinitionLookup) -> Behaviour:
    found = CATALOG.get(node.type)
    if found is not None:
        return found
    if "workflowDefinitionId" in node.properties or definitions.by_activity_type(node.type):
        return COMPOSITE
    return UNKNOWN


def is_known_type(type_name: str, definitions: DefinitionLookup) -> bool:
    return type_name in CATALOG or definitions.by_activity_type(type_name) is not None
