"""Workflow definitions in Elsa's API: list and save (``routes``), views, versions, bulk actions
and the designer's reads."""

__all__ = [
    "bulk",
    "designer",
    "imports",
    "routes",
    "versions",
    "views",
]
