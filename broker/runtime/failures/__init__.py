"""Failure bookkeeping at the bottom of the runtime: dead-letter rows and the retry policy
(docs/design.md, section 7)."""

__all__ = [
    "dead_letters",
    "retry",
]
