"""What operators did: one audit row per operator action (a grant, an alteration, a key made or
revoked, a bulk action), with who, what and when, and never the values it carried."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import BigInteger, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from broker.store.models.base import Base, utcnow


class OperatorAction(Base):
    """One operator action, as the operator audit lists it."""

    __tablename__ = "operator_actions"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    #: who: ``console:<name>`` (a user or an API key) or ``cli:<os user>``
    actor: Mapped[str] = mapped_column(String(250))
    #: the role the actor acted with (console), None from the command line
    role: Mapped[str | None] = mapped_column(String(20))
    #: what, as ``<object>.<verb>``: ``grant.create``, ``alteration.run``, ``key.revoke``, ...
    action: Mapped[str] = mapped_column(String(100))
    #: on what: an id, a name, or a count of ids
    target: Mapped[str] = mapped_column(String(500))
    #: a bounded summary naming what changed (types, names, counts), never the values
    summary: Mapped[dict[str, Any] | None]

    __table_args__ = (Index("ix_operator_actions_at", "at"),)
