"""E-mail: SendEmail hands one message to ``services.mailer``."""

from __future__ import annotations

from broker.engine.activities.base import Behaviour, activity
from broker.engine.model.specs import ActivitySpec, InputSpec
from broker.engine.model.values import as_list, as_text
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.ports import EmailMessage
from broker.errors import WorkflowFault


@activity(
    "Elsa.SendEmail",
    ActivitySpec(
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
    aliases=("Elsa.Email.SendEmail",),
    outbound=("Done",),
)
class SendEmail(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        mailer = ax.services.mailer
        if mailer is None:
            raise WorkflowFault("no mailer is configured", activity_id=ax.node.id)
        to = tuple(as_text(a) for a in as_list(ax.get("to")))
        if not to:
            raise WorkflowFault(
                f"SendEmail {ax.node.id!r} has no recipient", activity_id=ax.node.id
            )
        sender = ax.get("from")
        mailer.send(
            EmailMessage(
                to=to,
                subject=as_text(ax.get("subject")),
                body=as_text(ax.get("body")),
                sender=as_text(sender) if sender else None,
                cc=tuple(as_text(a) for a in as_list(ax.get("cc"))),
                bcc=tuple(as_text(a) for a in as_list(ax.get("bcc"))),
                message_id=f"<{ax.instance_id}.{ax.id}@broker>",
            )
        )
        ax.complete()
