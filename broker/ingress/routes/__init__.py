"""The public and internal listeners' routes, one blueprint module per resource."""

__all__ = [
    "admin",
    "events",
    "http_triggers",
    "internal",
    "request_types",
    "requests",
    "webhook_events",
    "webhooks",
]
