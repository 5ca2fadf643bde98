"""A team's own activities in Python: ``@activity`` declares one (type name, Studio description,
typed inputs, outputs, outcomes, retry policy, Celery queue); ``Result`` and ``Wait`` are what it
returns; ``load_activities`` finds the declared packages at start (docs/activities.md)."""

from broker.activities.adapter import DECLARED, activity
from broker.activities.declaring import ActivityDeclaration, Input, Retry
from broker.activities.discovery import ENTRY_POINT_GROUP, load_activities
from broker.activities.results import Result, Wait
from broker.errors import RetryLater

__all__ = [
    "DECLARED",
    "ENTRY_POINT_GROUP",
    "ActivityDeclaration",
    "Input",
    "Result",
    "Retry",
    "RetryLater",
    "Wait",
    "activity",
    "load_activities",
]
