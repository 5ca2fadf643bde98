"""The transactional outbox and its delivery: rows, the relay, the fast-path publisher, locks and
the pause flag (docs/design.md, section 5)."""

__all__ = [
    "locks",
    "outcome",
    "pause",
    "publisher",
    "rows",
]
