"""Cron expressions as Elsa reads them (Cronos with seconds): six fields, seconds first, in UTC;
a five-field expression is refused, as Elsa refuses it."""

from __future__ import annotations

import datetime as dt

from croniter import croniter

FIELDS = 6


def check_cron(expression: str) -> str:
    """The expression stripped, or ``ValueError`` naming what is wrong with it."""
    text = expression.strip()
    count = len(text.split())
    if count != FIELDS:
        raise ValueError(
            f"cron expression {expression!r} has {count} fields; Elsa's has 6, seconds first "
            "(second minute hour day month day-of-week)"
        )
    if not croniter.is_valid(text, second_at_beginning=True):
        raise ValueError(f"cron expression {expression!r} is not valid")
    return text


def next_occurrence(expression: str, after: dt.datetime) -> dt.datetime:
    """The first time strictly after ``after`` (UTC) that ``expression`` names."""
    start = after.astimezone(dt.UTC)
    found = croniter(check_cron(expression), start, second_at_beginning=True).get_next(dt.datetime)
    assert isinstance(found, dt.datetime)
    return found.astimezone(dt.UTC)
