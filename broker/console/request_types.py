"""A workflow's request type for authors: see and set it, see and grant who may submit it."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from flask import Blueprint, redirect, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from broker.clients.entries import RequestTypeRule
from broker.clients.registry import ClientRegistry
from broker.console import auth
from broker.console.client_rules import check_name, grant, parse_keys, rules_for
from broker.console.forms import protect_form, settings
from broker.console.roles import current, require
from broker.errors import BadRequest, NotFound
from broker.registry import WorkflowRegistry
from broker.runtime.admin import drafts
from broker.settings import Settings
from broker.store import db as store

logger = logging.getLogger(__name__)

bp = Blueprint("request_types", __name__)


@dataclasses.dataclass(frozen=True)
class RequestTypeView:
    """What the designer's page shows about a definition's request type."""

    definition_id: str
    latest: str | None  # the latest version's (the draft's when there is one)
    published: str | None  # the one the published version serves
    rules: tuple[RequestTypeRule, ...]  # who may submit ``latest or published``
    clients: tuple[str, ...]  # every known client id, for the grant form


def client_registry(settings: Settings) -> ClientRegistry:
    """The console's one client allowlist (built by the wiring floor; ``settings`` is kept for
    the callers' symmetry)."""
    return auth.context().client_registry()


def _request_type_of(document: dict[str, Any]) -> str | None:
    custom = document.get("customProperties")
    value = custom.get("requestType") if isinstance(custom, dict) else None
    return value if isinstance(value, str) and value.strip() else None


def view(
    settings: Settings, registry: WorkflowRegistry, definition_id: str
) -> RequestTypeView | None:
    """The page's view of ``definition_id`` (None for a definition that does not exist yet)."""
    with store.transaction(auth.context().session_factory, write=False) as session:
        draft = drafts.draft(session, definition_id)
    served = registry.get_definition(definition_id, published=False)
    if draft is None and served is None:
        return None
    latest_doc = draft.document if draft is not None else dict(served.document) if served else {}
    published = registry.get_definition(definition_id)
    published_type = published.request_type if published is not None else None
    latest = _request_type_of(latest_doc)
    clients = client_registry(settings)
    shown = latest or published_type
    return RequestTypeView(
        definition_id=definition_id,
        latest=latest,
        published=published_type,
        rules=rules_for(clients, shown) if shown else (),
        clients=tuple(sorted((c.client_id for c in clients.clients()), key=str.lower)),
    )


def set_request_type(
    registry: WorkflowRegistry, definition_id: str, request_type: str | None, who: str
) -> None:
    """Put ``request_type`` (None: none) into the definition's draft, made from the latest
    version when there is no draft; the next publish serves it."""
    factory = auth.context().session_factory
    with store.transaction(factory) as session:
        draft = drafts.draft(session, definition_id)
        if draft is not None:
            document = dict(draft.document)
        else:
            served = registry.get_definition(definition_id, published=False)
            if served is None:
                raise NotFound(f"Workflow definition '{definition_id}' not found")
            document = {
                k: v for k, v in dict(served.document).items() if k not in ("id", "version")
            }
        custom = dict(document.get("customProperties") or {})
        if request_type is None:
            custom.pop("requestType", None)
        else:
            custom["requestType"] = request_type
        document["customProperties"] = custom
        drafts.save_draft_txn(session, definition_id, document, who)
    logger.info(
        "request type of %s set to %s from the console by %s",
        definition_id,
        request_type,
        who,
    )


# Routes ------------------------------------------------------------------------------------------


def _who() -> str:
    principal = current()
    return principal.name if principal is not None else "?"


def _back(definition_id: str, message: str, *, error: bool = False) -> BaseResponse:
    """Back to the designer's page, which shows ``message`` (as an error when ``error``)."""
    if error:
        return redirect(url_for("pages.designer", definition_id=definition_id, error=message))
    return redirect(url_for("pages.designer", definition_id=definition_id, message=message))


@bp.post("/workflows/<definition_id>/request-type")
@require("designer")
def set_type(definition_id: str) -> BaseResponse:

    protect_form()
    raw = request.form.get("requestType", "")
    registry = auth.context().registry
    try:
        name = check_name(raw) if raw.strip() else None
        if registry is None:
            raise NotFound("the console has no workflow registry")
        set_request_type(registry, definition_id, name, _who())
    except (BadRequest, NotFound) as exc:
        return _back(definition_id, exc.message, error=True)
    if name:
        return _back(definition_id, f"Request type set to {name}: publish to serve it")
    return _back(definition_id, "Request type removed: publish to stop serving it")


def _grantable_type(registry: WorkflowRegistry, definition_id: str, asked: str) -> str:
    """The request type this definition's page may grant: its own (the draft's, else the one
    its published version serves), and only when the form asks for exactly that one."""
    found = view(settings(), registry, definition_id)
    own = (found.latest or found.published) if found is not None else None
    if own is None:
        raise NotFound(f"Workflow definition '{definition_id}' serves no request type to grant")
    if asked.strip().lower() != own.lower():
        raise BadRequest(
            f"This page grants only {own}, the request type of {definition_id}, "
            f"not {asked.strip()!r}",
            field="requestType",
        )
    return own


@bp.post("/workflows/<definition_id>/request-type/grants")
@require("operator")
def grant_type(definition_id: str) -> BaseResponse:

    protect_form()
    form = request.form
    registry = auth.context().registry
    principal = current()
    try:
        if registry is None:
            raise NotFound("the console has no workflow registry")
        request_type = _grantable_type(registry, definition_id, form.get("requestType", ""))
        rule = grant(
            client_registry(settings()),
            form.get("clientId", ""),
            request_type,
            parse_keys(form.get("requiredKeys", "")),
            form.get("allowAdditionalKeys") == "on",
            actor=f"console:{_who()}",
            role=principal.role if principal is not None else None,
        )
    except (BadRequest, NotFound) as exc:
        return _back(definition_id, exc.message, error=True)
    logger.warning(
        "request type %s granted to client %s from the console by %s",
        rule.request_type,
        rule.client_id,
        _who(),
    )
    return _back(definition_id, f"{rule.client_id} may now submit {rule.request_type}")
