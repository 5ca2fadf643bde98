"""A durable, Celery-based request broker that runs Elsa 3 workflows."""

__version__ = "0.1.0"

__all__ = ["__version__"]
