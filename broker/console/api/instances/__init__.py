"""Workflow instances in Elsa's API: list and read (``routes``), filters, execution state, the
journal's activity executions and alterations."""

__all__ = [
    "alterations",
    "executions",
    "filters",
    "routes",
    "state",
]
