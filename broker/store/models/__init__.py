"""The tables: SQLAlchemy 2 declarative models, one class per table, grouped by concern.
Importing this package registers every table on ``Base.metadata``; import the models from here."""

from broker.store.models.access import Client, ConsoleCredential, RateBucket, RequestTypeRule
from broker.store.models.base import (
    NAMING,
    Base,
    Id,
    JsonColumn,
    UTCDateTime,
    table_of,
    utcnow,
)
from broker.store.models.bookmarks import Bookmark, BookmarkQueueItem, Schedule, Timer
from broker.store.models.delivery import DeadLetter, Lease, OutboxRow, RuntimeFlag
from broker.store.models.operators import OperatorAction
from broker.store.models.requests import Request, RequestEvent
from broker.store.models.states import (
    DeadLetterKind,
    InstanceStatus,
    InstanceSubStatus,
    OutboxState,
    RequestStatus,
    WebhookDeliveryState,
)
from broker.store.models.webhooks import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from broker.store.models.workflows import (
    ActivityExecution,
    AlterationPlan,
    StepResult,
    Trigger,
    WorkflowDefinition,
    WorkflowDraft,
    WorkflowInstance,
)

__all__ = [
    "NAMING",
    "ActivityExecution",
    "AlterationPlan",
    "Base",
    "Bookmark",
    "BookmarkQueueItem",
    "Client",
    "ConsoleCredential",
    "DeadLetter",
    "DeadLetterKind",
    "Id",
    "InstanceStatus",
    "InstanceSubStatus",
    "JsonColumn",
    "Lease",
    "OperatorAction",
    "OutboxRow",
    "OutboxState",
    "RateBucket",
    "Request",
    "RequestEvent",
    "RequestStatus",
    "RequestTypeRule",
    "RuntimeFlag",
    "Schedule",
    "StepResult",
    "Timer",
    "Trigger",
    "UTCDateTime",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookDeliveryState",
    "WebhookEndpoint",
    "WorkflowDefinition",
    "WorkflowDraft",
    "WorkflowInstance",
    "table_of",
    "utcnow",
]
