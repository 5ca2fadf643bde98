"""The ``broker`` command (``main``) and its command groups, one module each; ``ops`` holds the
operator commands that call the public API."""

__all__ = [
    "apiclient",
    "certs",
    "console",
    "db",
    "grants",
    "main",
    "ops",
    "profile",
    "supervise",
    "webhooks",
    "workflows",
]
