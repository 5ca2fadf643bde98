"""Waiting and waking: the bookmark queue, schedule triggers, the triggers that start workflows
and the HTTP calls that resume waiting endpoints (docs/design.md, section 6)."""

__all__ = [
    "endpoints",
    "queue",
    "schedules",
    "triggers",
]
