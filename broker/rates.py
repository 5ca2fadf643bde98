"""Rates and per-client limits as values: ``"100/second"`` parsed into a ``Rate``; the buckets that
enforce them are the ingress's (``broker.adapters.buckets``, docs/design.md, section 11)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

SUBMISSIONS = "submissions"
EVENTS = "events"
KINDS = (SUBMISSIONS, EVENTS)

_UNITS = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
_RATE = re.compile(r"^(\d+)\s*/\s*([a-z]+?)s?$")
_UNLIMITED_TEXTS = frozenset({"", "0", "unlimited"})


@dataclasses.dataclass(frozen=True)
class Rate:
    """``count`` per ``period`` seconds; ``count`` 0 is no limit."""

    count: int
    period: float
    text: str = dataclasses.field(default="unlimited", compare=False)

    @property
    def unlimited(self) -> bool:
        return self.count == 0

    @property
    def interval(self) -> float:
        """Seconds one token takes to refill."""
        return self.period / self.count

    def __str__(self) -> str:
        return self.text


UNLIMITED = Rate(0, 1.0)


def parse_rate(value: Any) -> Rate:
    """A rate from its text (or the number 0); ``ValueError`` saying what is wrong."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError('expected a rate such as "100/second", or "unlimited"')
    if isinstance(value, int):
        if value != 0:
            raise ValueError(f'a bare number ({value}) has no unit: write "{value}/second"')
        return UNLIMITED
    text = value.strip().lower()
    if text in _UNLIMITED_TEXTS:
        return UNLIMITED
    match = _RATE.match(text)
    unit = match.group(2) if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f'{value!r} is not a rate: expected "<count>/<unit>" with a unit of '
            f'{", ".join(_UNITS)} (e.g. "100/second"), or "unlimited"'
        )
    count = int(match.group(1))
    if count == 0:
        raise ValueError(f'{value!r} would refuse everything: write "unlimited" for no limit')
    return Rate(count, _UNITS[unit], f"{count}/{unit}")


@dataclasses.dataclass(frozen=True)
class ClientLimits:
    """A client's own rates (from clients.json); None for a kind means the default applies."""

    submissions: Rate | None = None
    events: Rate | None = None

    def for_kind(self, kind: str) -> Rate | None:
        found: Rate | None = getattr(self, kind)
        return found


#: a client that sets no rate of its own
DEFAULT_LIMITS = ClientLimits()


def parse_client_limits(value: Any) -> ClientLimits:
    """The ``rateLimits`` object of a clients.json entry.

    Raises ``ValueError`` whose message starts with the field at fault (``rateLimits.events: ...``).
    """
    if value is None:
        return DEFAULT_LIMITS
    if not isinstance(value, Mapping):
        raise ValueError(
            'rateLimits must be an object such as {"submissions": "100/second", '
            '"events": "50/second"}'
        )
    rates: dict[str, Rate] = {}
    for name, text in value.items():
        kind = str(name).lower()
        if kind not in KINDS:
            raise ValueError(f"rateLimits.{name}: unknown limit (expected {' or '.join(KINDS)})")
        try:
            rates[kind] = parse_rate(text)
        except ValueError as exc:
            raise ValueError(f"rateLimits.{name}: {exc}") from exc
    return ClientLimits(**rates)
