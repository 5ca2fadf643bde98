"""Elsa.Resilience's HTTP retry strategy: its JSON shape (``Resilience:Strategies``, or an
expression's object), the statuses it retries, and the delay before each retry
(docs/design.md, "HTTP statuses and resilience")."""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from broker.engine.model.convert import parse_timespan

#: the ``$type`` discriminator of Elsa.Http's strategy (the one Elsa's HTTP activities accept)
HTTP_STRATEGY_TYPE = "HttpResilienceStrategy"
#: the resilience category of the HTTP activities (Studio lists only the strategies of it)
HTTP_CATEGORY = "HTTP"
#: Elsa's ``IsTransientStatusCode``: 408, 409, 429, 500, 502, 503, 504
TRANSIENT_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
BACKOFF_TYPES = ("Constant", "Linear", "Exponential")
#: the custom property naming an activity's strategy, and its two modes
CONFIG_PROPERTY = "resilienceStrategy"
IDENTIFIER, EXPRESSION = "Identifier", "Expression"


class StrategyError(ValueError):
    """Raised when a strategy's JSON is not an HTTP retry strategy Elsa would deserialize."""


@dataclasses.dataclass(frozen=True)
class HttpStrategy:
    """Elsa.Http's ``HttpResilienceStrategy`` (Polly's retry options): how many retries, how long
    between them. Retries a transient status (``TRANSIENT_STATUSES``) or a failed connection."""

    id: str
    display_name: str = ""
    max_retry_attempts: int = 3
    use_jitter: bool = False
    delay: float = 1.0  # seconds
    backoff_type: str = "Exponential"

    def retry_delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds before retry ``attempt`` (0 = the first retry), as Polly computes them:
        ``Constant`` delay, ``Linear`` delay x (attempt + 1), ``Exponential`` delay x 2^attempt;
        jitter spreads each by up to 25% either way."""
        if self.backoff_type == "Constant":
            seconds = self.delay
        elif self.backoff_type == "Linear":
            seconds = self.delay * (attempt + 1)
        else:
            seconds = self.delay * 2**attempt
        if self.use_jitter:
            seconds *= 0.75 + 0.5 * rand()
        return max(0.0, seconds)

    def to_json(self) -> dict[str, Any]:
        """The strategy as Elsa serializes it (``$type`` first, camelCase, TimeSpan text)."""
        return {
            "$type": HTTP_STRATEGY_TYPE,
            "id": self.id,
            "displayName": self.display_name,
            "maxRetryAttempts": self.max_retry_attempts,
            "useJitter": self.use_jitter,
            "delay": _timespan_text(self.delay),
            "backoffType": self.backoff_type,
        }


#: the obsolete ``EnableResiliency`` input's built-in pipeline (eight exponential retries from 1 s)
LEGACY_STRATEGY = HttpStrategy(id="EnableResiliency", max_retry_attempts=8, delay=1.0)


def parse_strategy(raw: Any, *, where: str = "strategy") -> HttpStrategy:
    """An ``HttpResilienceStrategy`` from its JSON object (property names in any case, numbers
    as text, ``delay`` as a TimeSpan); ``StrategyError`` names what is wrong."""
    if not isinstance(raw, Mapping):
        raise StrategyError(f"{where} must be a JSON object")
    fields = {str(k).lower(): v for k, v in raw.items()}
    kind = fields.get("$type", HTTP_STRATEGY_TYPE)
    if kind != HTTP_STRATEGY_TYPE:
        raise StrategyError(f"{where}: $type {kind!r} is not {HTTP_STRATEGY_TYPE!r}")
    strategy_id = fields.get("id")
    if not isinstance(strategy_id, str) or not strategy_id.strip():
        raise StrategyError(f"{where}: id must be a non-empty string")
    attempts = _integer(fields.get("maxretryattempts", 3), f"{where}.maxRetryAttempts")
    try:
        delay = parse_timespan(fields.get("delay", 1.0))
    except ValueError as exc:
        raise StrategyError(f"{where}.delay: {exc}") from exc
    backoff = _backoff(fields.get("backofftype", "Exponential"), f"{where}.backoffType")
    jitter = fields.get("usejitter", False)
    if isinstance(jitter, str):
        jitter = jitter.strip().lower() == "true"
    if attempts < 0 or delay < 0:
        raise StrategyError(f"{where}: maxRetryAttempts and delay must not be negative")
    return HttpStrategy(
        id=strategy_id,
        display_name=str(fields.get("displayname") or ""),
        max_retry_attempts=attempts,
        use_jitter=bool(jitter),
        delay=delay,
        backoff_type=backoff,
    )


def parse_strategies(text: str) -> dict[str, HttpStrategy]:
    """The strategies of a JSON array (Elsa's ``Resilience:Strategies`` section), by id."""
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise StrategyError(f"the strategies are not JSON: {exc}") from exc
    if not isinstance(raw, list):
        raise StrategyError("the strategies must be a JSON array of objects")
    found: dict[str, HttpStrategy] = {}
    for index, item in enumerate(raw):
        strategy = parse_strategy(item, where=f"strategies[{index}]")
        if strategy.id in found:
            raise StrategyError(f"strategies[{index}]: id {strategy.id!r} is declared twice")
        found[strategy.id] = strategy
    return found


def strategy_config(custom_properties: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(mode, strategy id or expression) of an activity's ``resilienceStrategy`` custom property
    (Elsa's ``ResilienceStrategyConfig``), or None when it names none."""
    raw = custom_properties.get(CONFIG_PROPERTY)
    if not isinstance(raw, Mapping):
        return None
    fields = {str(k).lower(): v for k, v in raw.items()}
    mode = fields.get("mode", IDENTIFIER)
    if mode in (0, "0") or str(mode).lower() == "identifier":
        strategy_id = fields.get("strategyid")
        return (IDENTIFIER, strategy_id) if isinstance(strategy_id, str) and strategy_id else None
    if mode in (1, "1") or str(mode).lower() == "expression":
        expression = fields.get("expression")
        return (EXPRESSION, expression) if isinstance(expression, Mapping) else None
    return None


def describe(strategies: Iterable[HttpStrategy]) -> list[dict[str, Any]]:
    """The strategies as Elsa's ``resilience/strategies`` endpoint lists them."""
    return [s.to_json() for s in strategies]


def _integer(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise StrategyError(f"{where} must be a whole number")
    try:
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError) as exc:
        raise StrategyError(f"{where} must be a whole number") from exc


def _backoff(value: Any, where: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 3:
        return BACKOFF_TYPES[value]  # Polly's DelayBackoffType, as a number
    for name in BACKOFF_TYPES:
        if str(value).strip().lower() == name.lower():
            return name
    raise StrategyError(f"{where} must be one of {', '.join(BACKOFF_TYPES)}")


def _timespan_text(seconds: float) -> str:
    whole = int(seconds)
    fraction = seconds - whole
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return text + f".{round(fraction * 10**7):07d}" if fraction else text
