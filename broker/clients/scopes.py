"""The admin API's scopes, each written once: the routes require them, the OpenAPI document
names them, the certificate tooling grants them (``ADMIN_SCOPES``, the README's admin table)."""

from __future__ import annotations

READ_BOOKMARK_DEAD_LETTERS = "read:bookmark-queue:dead-letters"
REPLAY_BOOKMARK_DEAD_LETTERS = "replay:bookmark-queue:dead-letters"
DELETE_BOOKMARK_DEAD_LETTERS = "delete:bookmark-queue:dead-letters"
READ_DEAD_LETTERS = "read:dead-letters"
REPLAY_DEAD_LETTERS = "replay:dead-letters"
READ_INSTANCES = "read:workflow-instances"
CANCEL_INSTANCES = "cancel:workflow-instances"
READ_RUNTIME = "read:workflow-runtime"
MANAGE_RUNTIME = "manage:workflow-runtime"

#: every scope an admin endpoint can ask for, in the README's order
ADMIN_SCOPES: tuple[str, ...] = (
    READ_BOOKMARK_DEAD_LETTERS,
    REPLAY_BOOKMARK_DEAD_LETTERS,
    DELETE_BOOKMARK_DEAD_LETTERS,
    READ_DEAD_LETTERS,
    REPLAY_DEAD_LETTERS,
    READ_INSTANCES,
    CANCEL_INSTANCES,
    READ_RUNTIME,
    MANAGE_RUNTIME,
)
