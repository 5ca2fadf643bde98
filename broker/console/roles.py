"""Console roles and the check every console route makes. Roles are ordered: a designer may do
what a viewer may, an operator what a designer may."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Literal, ParamSpec, TypeVar

from flask import abort, g

Role = Literal["viewer", "designer", "operator"]
ROLES: tuple[Role, ...] = ("viewer", "designer", "operator")

P = ParamSpec("P")
R = TypeVar("R")


@dataclasses.dataclass(frozen=True)
class Principal:
    """Who is calling: an API key's name or a console user's name, and the role it holds."""

    name: str
    role: Role
    kind: Literal["key", "user"]


def allows(held: Role, needed: Role) -> bool:
    """True when a principal holding ``held`` may do what ``needed`` guards."""
    return ROLES.index(held) >= ROLES.index(needed)


def current() -> Principal | None:
    principal = g.get("console_principal")
    return principal if isinstance(principal, Principal) else None


def require(role: Role) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a console route: 401 without a principal, 403 when its role is below ``role``."""

    def decorate(view: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(view)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            principal = current()
            if principal is None:
                abort(401)
            if not allows(principal.role, role):
                abort(403)
            return view(*args, **kwargs)

        guarded.required_role = role  # type: ignore[attr-defined]  # the OpenAPI document's
        return guarded

    return decorate
