"""The console listener: Elsa Studio, the console pages and the Elsa API under ``/elsa/api``."""

__all__ = [
    "api",
    "app",
    "assets",
    "auth",
    "client_rules",
    "forms",
    "identity",
    "pages",
    "request_types",
    "roles",
    "studio",
    "tokens",
    "wsgi",
]
