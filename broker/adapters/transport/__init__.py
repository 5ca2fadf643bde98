"""The Celery application's configuration and the broker's own kombu transports."""

__all__ = [
    "celery_config",
    "filesystem",
    "redis_channel",
]
