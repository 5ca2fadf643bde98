"""Elsa.Resilience's API for Studio's Resilience tab: the strategies an HTTP activity may name
(``BROKER_RESILIENCE_STRATEGIES``; docs/design.md, section 13)."""

from __future__ import annotations

from typing import Any

from broker.console.api.base import blueprint
from broker.console.roles import require
from broker.engine.model.resilience import StrategyError, describe, parse_strategies
from broker.errors import ConfigError
from broker.web.context import services


@blueprint.get("/resilience/strategies")
@require("viewer")
def list_strategies() -> dict[str, Any]:
    try:
        strategies = parse_strategies(services().settings.resilience_strategies)
    except StrategyError as exc:
        raise ConfigError(f"BROKER_RESILIENCE_STRATEGIES: {exc}") from exc
    items = describe(strategies.values())
    return {"items": items, "count": len(items)}
