"""Alembic migrations of the broker's schema (a package, so installs ship ``env.py``)."""

__all__: list[str] = []
