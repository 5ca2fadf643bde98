"""A request's life at the API: submission, status transitions, activation strategies, queries
and cancellation."""

__all__ = [
    "activation",
    "cancellation",
    "group_commit",
    "queries",
    "submission",
    "transitions",
]
