"""Saving one engine step: everything a RunResult implies, in the caller's transaction.

Instance state and checkpoint, journal rows, bookmarks and timers, outbox rows for the engine's
commands (children, events, tasks), a retry or a request dead letter, the request's status and
audit event: all commit together or not at all, so a redelivered task finds either the step done or
nothing of it. The instance row is the fence: it is updated only ``WHERE checkpoint = <the one this
step started from> AND status = Running``, so a stale, duplicated or cancelled run cannot overwrite
newer state. Terminal requests never change: every status UPDATE carries ``status NOT IN
(terminal)``.

``step`` holds the fenced save, ``commands`` the rows the engine's commands become, ``target`` the
types both share.
"""

from broker.runtime.persist.commands import notify_parent, save_children, save_commands
from broker.runtime.persist.step import open_start, save_step
from broker.runtime.persist.target import (
    PARENT_LINK,
    Saved,
    StaleStep,
    Start,
    Target,
)

__all__ = [
    "PARENT_LINK",
    "Saved",
    "StaleStep",
    "Start",
    "Target",
    "notify_parent",
    "open_start",
    "save_children",
    "save_commands",
    "save_step",
]
