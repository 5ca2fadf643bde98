"""Saving one engine step in the caller's transaction (docs/design.md, section 3): ``step`` holds
the fenced save, ``commands`` the rows the engine's commands become, ``target`` the types both
share."""

from broker.runtime.persist.commands import (
    add_pending_instance,
    notify_parent,
    save_commands,
)
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
    "add_pending_instance",
    "notify_parent",
    "open_start",
    "save_commands",
    "save_step",
]
