"""The operator audit on ``/elsa/api``: who did what and when (grants, alterations, keys and
users, bulk actions, replays, pauses), newest first, for operators."""

from __future__ import annotations

from typing import Any

from broker.console.api.base import blueprint
from broker.console.api.openapi import (
    PAGING,
    TEXT,
    documented,
)
from broker.console.api.params import arg, page_args
from broker.console.roles import require
from broker.store import operator_actions
from broker.web.context import transaction


@blueprint.get("/audit/operator-actions")
@require("operator")
@documented(query={"action": TEXT, **PAGING})
def list_operator_actions() -> dict[str, Any]:
    """``{items, totalCount, page, pageSize}``; ``action`` keeps one action or a family
    (``grant`` finds ``grant.create``)."""
    paging = page_args()
    with transaction(write=False) as session:
        items, total = operator_actions.list_page(
            session, page=paging.page, page_size=paging.page_size, action=arg("action")
        )
    return {"items": items, "totalCount": total, "page": paging.page, "pageSize": paging.page_size}
