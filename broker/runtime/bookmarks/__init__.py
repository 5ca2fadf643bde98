"""Waiting and waking: the bookmark queue, schedule triggers and the triggers that start
workflows (docs/design.md, section 6)."""

__all__ = [
    "queue",
    "schedules",
    "triggers",
]
