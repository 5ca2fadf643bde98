"""Durable execution, the one layer that changes state: requests, steps, outbox, bookmarks,
failures, admin and webhooks, composed by ``wiring``."""

__all__ = [
    "admin",
    "bookmarks",
    "definitions",
    "failures",
    "health",
    "ids",
    "outbox",
    "persist",
    "ports",
    "requests",
    "steps",
    "transport",
    "webhooks",
    "wiring",
]
