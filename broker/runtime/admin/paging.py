"""Admin lists: one zero-based page (as Elsa pages), newest first, with the total count."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session


def newest_first_page(
    session: Session,
    model: Any,
    where: Sequence[ColumnElement[bool]],
    view: Callable[[Any], dict[str, Any]],
    *,
    page: int,
    page_size: int,
) -> dict[str, Any]:
    """``{items, totalCount, page, pageSize}`` for rows of ``model`` matching ``where``."""
    total = session.scalar(select(func.count()).select_from(model).where(*where)) or 0
    rows = session.scalars(
        select(model)
        .where(*where)
        .order_by(model.created_at.desc(), model.id.desc())
        .offset(page * page_size)
        .limit(page_size)
    )
    return {
        "items": [view(r) for r in rows],
        "totalCount": int(total),
        "page": page,
        "pageSize": page_size,
    }
