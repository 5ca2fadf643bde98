"""Who may call the public API: the client registry (files and database), its entries, and the
certificates that identify a client."""

__all__ = [
    "certificates",
    "entries",
    "registry",
    "scopes",
]
