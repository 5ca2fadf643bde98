"""Elsa.Webhooks' WebhookEventReceived: starts a workflow, or resumes one waiting, when a webhook
event of its type arrives (``POST /webhook-events``; docs/design.md, "Inbound webhook events")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import Behaviour, activity
from broker.engine.model.specs import ActivitySpec, InputSpec, OutputSpec
from broker.engine.model.values import as_text
from broker.engine.run.activity_context import ActivityContext
from broker.errors import WorkflowFault
from broker.names import WEBHOOK_EVENT


@activity(
    WEBHOOK_EVENT,
    ActivitySpec(
        "Webhooks",
        "Handles webhook events of the given type.",
        inputs=(
            InputSpec(
                "EventType",
                "String",
                "The webhook event type to be received.",
                wrapped=False,
            ),
            InputSpec(
                "PayloadType",
                "Type",
                "The webhook event payload type to be received.",
                wrapped=False,
                browsable=False,
            ),
        ),
        outputs=(
            OutputSpec("Result", "WebhookEvent", "The received webhook event."),
            OutputSpec("Payload", "Object", "The webhook payload, if any."),
        ),
        kind="Trigger",
        display_name="Webhook Event Received",
    ),
    # Elsa names the class by its namespace (it has no [Activity] attribute)
    aliases=("Elsa.Http.Webhooks.Activities.WebhookEventReceived",),
    outbound=("Done",),
    trigger=WEBHOOK_EVENT,
)
class WebhookEventReceived(Behaviour):
    """The trigger of its workflow takes the event that started it; reached later, it waits for
    the next event of its type (a bookmark), as Elsa's does."""

    blocking = True

    def execute(self, ax: ActivityContext) -> None:
        event_type = as_text(ax.get("eventType")).strip()
        if not event_type:
            raise WorkflowFault(
                f"activity {ax.node.id!r} waits for a webhook event with no type",
                activity_id=ax.node.id,
            )
        trigger = ax.state.get("trigger") or {}
        if trigger.get("activityId") == ax.node.id and not ax.state.get("triggerConsumed"):
            ax.state["triggerConsumed"] = True
            self._received(ax, trigger.get("payload"))
            return
        ax.bookmark(WEBHOOK_EVENT, {"eventType": event_type})

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        self._received(ax, value)

    def _received(self, ax: ActivityContext, event: Any) -> None:
        """Elsa's outputs: ``Result`` the event (``{eventType, payload, timestamp}``),
        ``Payload`` its payload."""
        found = event if isinstance(event, Mapping) else {"payload": event}
        ax.set_output("result", dict(found))
        ax.set_output("payload", found.get("payload"))
        ax.complete()
