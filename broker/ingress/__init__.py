"""The HTTP adapters: the mTLS client/admin API and the internal listener (Flask)."""

from broker.ingress.app import create_internal_app, create_public_app

__all__ = ["create_internal_app", "create_public_app"]
