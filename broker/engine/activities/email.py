"""E-mail: SendEmail hands one message to ``services.mailer``.

The message id is derived from the instance and activity instance ids, so a step run again sends
a message the mailer (and the recipient's server) can recognise as the same one.
"""

from __future__ import annotations

from broker.engine.activities.base import Behaviour
from broker.engine.activity_context import ActivityContext
from broker.engine.services import EmailMessage
from broker.engine.values import as_list, as_text
from broker.errors import WorkflowFault


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
