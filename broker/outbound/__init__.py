"""Every call the broker makes outward: URLs read once, the SSRF guard, HTTP for activities and
webhooks, and mail."""

__all__ = [
    "guard",
    "http_client",
    "mail",
    "urls",
]
