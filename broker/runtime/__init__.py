"""The domain's use-cases, the one layer that changes state: requests, steps, outbox, bookmarks,
failures, admin and webhooks. It takes its parts through ``parts`` (built by ``broker.wiring``)
and never imports the adapters, the web floor or the wiring."""

__all__ = [
    "admin",
    "bookmarks",
    "definitions",
    "failures",
    "ids",
    "outbox",
    "parts",
    "persist",
    "ports",
    "requests",
    "steps",
    "webhooks",
]
