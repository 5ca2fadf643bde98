"""The transactional outbox and its delivery: rows, the relay, the fast-path publisher, each
delivery's start and worker deaths and the pause flag (docs/design.md, section 5)."""

__all__ = [
    "deliveries",
    "outcome",
    "pause",
    "publisher",
    "rows",
]
