"""The Celery application: ``celery -A tasks worker|beat|flower``."""
