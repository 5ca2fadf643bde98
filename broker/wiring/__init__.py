"""The wiring floor: the one place that builds long-lived parts (settings, session factory,
registries, client allowlist, locks, trust store, rate limiters, outbound HTTP, token issuer, the
Celery app), one builder per process. Everything below receives what it needs."""

__all__ = ["runtime"]
