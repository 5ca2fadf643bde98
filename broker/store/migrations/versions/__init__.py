"""Alembic revision files, loaded by Alembic (``broker db upgrade``), never imported."""

__all__: list[str] = []
