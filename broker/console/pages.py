"""The console's pages: Studio's elements at stable paths, and the broker's own views
(docs/design.md, section 1)."""

from __future__ import annotations

import datetime as dt
import logging
import urllib.parse
from typing import Any

from flask import Blueprint, redirect, render_template, request, url_for
from sqlalchemy.orm import Session, sessionmaker
from werkzeug.wrappers import Response as BaseResponse

from broker.console import assets, audit, auth
from broker.console.api.params import MAX_PAGE
from broker.console.forms import csrf, protect_form, settings
from broker.console.roles import current, require
from broker.console.sign_in_limits import throttle
from broker.engine.model.diagram import to_mermaid
from broker.errors import BadRequest, BrokerError, Conflict, RateLimited
from broker.runtime.admin import alteration_jobs, dead_letters, instances
from broker.runtime.admin.runtime_status import runtime_view
from broker.runtime.outbox.pause import set_paused
from broker.runtime.parts import Alterations
from broker.runtime.requests import queries as request_queries
from broker.safety.bounded import parse_int
from broker.store import credentials, operator_actions
from broker.store import db as store

logger = logging.getLogger(__name__)

bp = Blueprint("pages", __name__)

LETTER_KINDS = ("request", "outbox", "bookmark")
PAGE_SIZE = 50
STATUSES = ("Queued", "Processing", "Completed", "Faulted", "Cancelled")


def _factory() -> sessionmaker[Session]:
    return auth.context().session_factory


def _studio_page(
    title: str,
    element: str,
    attributes: dict[str, str],
    callbacks: tuple[str, ...] = (),
    *,
    retry_url: str | None = None,
    **context: Any,
) -> str:
    """A page hosting one of Studio's elements; ``callbacks`` are the element's navigation
    callbacks that ``static/studio-links.js`` answers with the console's pages."""
    principal = current()
    assert principal is not None  # the route requires a role
    return render_template(
        "studio.html",
        title=title,
        element=element,
        attributes={
            "remote-endpoint": request.host_url + "elsa/api",
            "access-token": auth.access_token_for(principal),
            **attributes,
        },
        callbacks=callbacks,
        principal=principal,
        studio_installed=assets.installed(settings(), assets.STUDIO),
        install_hint=assets.INSTALL_HINT,
        retry_url=retry_url,
        **{"message": request.args.get("message"), **context},
    )


# Sign-in ------------------------------------------------------------------------------------------


def _safe_next(target: str | None) -> str:
    """Only a path on this console (no scheme, no host, no protocol-relative ``//``)."""
    if not target:
        return url_for("pages.workflows")
    parts = urllib.parse.urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return url_for("pages.workflows")
    return target


@bp.get("/")
def home() -> BaseResponse:
    return redirect(url_for("pages.workflows"))


@bp.get("/sign-in")
def sign_in_form() -> str:
    return render_template("sign_in.html", next=_safe_next(request.args.get("next")), error=None)


@bp.post("/sign-in")
def sign_in() -> BaseResponse | tuple[str, int] | tuple[str, int, dict[str, str]]:
    csrf.protect()
    form = request.form
    target = _safe_next(form.get("next"))
    principal = None
    key = form.get("apiKey", "").strip()
    username, password = form.get("username", "").strip(), form.get("password", "")
    try:
        throttle(username if not key else None)  # before any hashing
    except RateLimited as exc:
        page = render_template("sign_in.html", next=target, error=exc.message)
        return page, 429, {"Retry-After": str(exc.retry_after)}
    with store.transaction(_factory(), write=False) as db:
        if key:
            principal = auth.principal_of(credentials.find_key(db, key))
        elif username and password:
            principal = auth.principal_of(credentials.verify_user(db, username, password))
    if principal is None:
        logger.info("console: failed sign-in")
        error = "Wrong user name, password or API key."
        return render_template("sign_in.html", next=target, error=error), 401
    auth.sign_in(principal)
    return redirect(target)


@bp.post("/sign-out")
def sign_out() -> BaseResponse:
    protect_form()
    auth.sign_out()
    return redirect(url_for("pages.sign_in_form"))


# Studio's elements --------------------------------------------------------------------------------


@bp.get("/workflows")
@require("viewer")
def workflows() -> str:
    registry = auth.context().registry
    return _studio_page(
        "Workflows",
        "elsa-workflow-definition-list",
        {},
        ("editWorkflowDefinition",),
        problems=registry.shown_problems() if registry is not None else [],
    )


@bp.get("/workflows/<definition_id>")
@require("viewer")
def designer(definition_id: str) -> str:
    from broker.console import request_types

    registry = auth.context().registry
    panel = (
        request_types.view(settings(), registry, definition_id) if registry is not None else None
    )
    return _studio_page(
        f"Workflow {definition_id}",
        "elsa-workflow-definition-editor",
        {"definition-id": definition_id},
        request_type=panel,
        message=request.args.get("message"),
        error=request.args.get("error"),
    )


@bp.get("/instances")
@require("viewer")
def instance_list() -> str:
    return _studio_page("Instances", "elsa-workflow-instance-list", {}, ("viewWorkflowInstance",))


@bp.get("/instances/<instance_id>")
@require("viewer")
def instance_viewer(instance_id: str) -> str:
    return _studio_page(
        f"Instance {instance_id}",
        "elsa-workflow-instance-viewer",
        {"instance-id": instance_id},
        ("editWorkflowDefinition",),
        retry_url=_instance_retry_url(instance_id),
    )


def _instance_retry_url(instance_id: str) -> str | None:
    """Where the instance page's Retry button posts: for operators, on a faulted instance."""
    principal = current()
    if principal is None or principal.role != "operator":
        return None
    try:
        with store.transaction(_factory(), write=False) as db:
            faulted = instances.get(db, instance_id).sub_status == "Faulted"
    except BrokerError:
        return None
    return url_for("pages.retry_instance", instance_id=instance_id) if faulted else None


# Retry --------------------------------------------------------------------------------------------


def _runtime() -> Alterations:
    """What a retry runs on: the console's database and registry (built by the wiring floor)."""
    return auth.context().operations_parts()


def _actor() -> str:
    return audit.actor()


def _publish(outbox_ids: list[str], what: str) -> None:
    publisher = auth.context().publisher
    if outbox_ids and publisher is not None:
        try:
            publisher.publish(outbox_ids)
        except Exception:
            logger.exception("fast-path publish after retrying %s failed (relay retries)", what)


@bp.post("/requests/<request_id>/retry")
@require("operator")
def retry_request(request_id: str) -> BaseResponse:
    """The request page's Retry: its faulted activities run again (through its dead letter)."""
    protect_form()
    try:
        outbox_ids = alteration_jobs.retry_request(_runtime(), request_id, actor=_actor())
    except Conflict as exc:
        return redirect(url_for("pages.request_detail", request_id=request_id, message=exc.message))
    _publish(outbox_ids, request_id)
    logger.warning("request %s retried from the console by %s", request_id, _actor())
    message = "Retried: the request resumes at the failed activity"
    return redirect(url_for("pages.request_detail", request_id=request_id, message=message))


@bp.post("/instances/<instance_id>/retry")
@require("operator")
def retry_instance(instance_id: str) -> BaseResponse:
    """The instance page's Retry: Elsa's retry of the instance's faulted activities."""
    protect_form()
    (result,) = alteration_jobs.retry(_runtime(), [instance_id], None, actor=_actor())
    _publish(result.outbox_ids, instance_id)
    message = "; ".join(e["message"] for e in result.log.entries)
    return redirect(url_for("pages.instance_viewer", instance_id=instance_id, message=message))


# Studio's own routes, where its elements lead when no callback answers (the designer's Run):
# the same pages at those addresses.


@bp.get("/workflows/definitions/<definition_id>/edit")
@require("viewer")
def studio_designer_route(definition_id: str) -> str:
    return designer(definition_id)


@bp.get("/workflows/instances/<instance_id>/view")
@require("viewer")
def studio_viewer_route(instance_id: str) -> str:
    return instance_viewer(instance_id)


# Requests -----------------------------------------------------------------------------------------


@bp.get("/requests")
@require("viewer")
def request_list() -> str:
    status = request.args.get("status") or None
    if status is not None and status not in STATUSES:
        raise BadRequest(f"status must be one of {', '.join(STATUSES)}", field="status")
    query = request_queries.ListQuery(
        status=status,
        request_type=request.args.get("requestType") or None,
        limit=PAGE_SIZE,
        cursor=request.args.get("cursor") or None,
    )
    with store.transaction(_factory(), write=False) as db:
        items, cursor = request_queries.list_requests(db, None, query)
    return render_template(
        "requests.html", items=items, next_cursor=cursor, status=status, statuses=STATUSES
    )


@bp.get("/requests/<request_id>")
@require("viewer")
def request_detail(request_id: str) -> str:
    with store.transaction(_factory(), write=False) as db:
        record = request_queries.get_owned(db, request_id, None)
        view = request_queries.request_view(db, record)
        events = request_queries.list_events(db, request_id, None)
        journal: list[dict[str, Any]] = []
        fault = None
        if record.instance_id:
            try:
                journal = instances.journal(db, record.instance_id)
                fault = instances.view(instances.get(db, record.instance_id))["fault"]
            except BrokerError:
                journal = []
        version_id = record.definition_version_id
    diagram = None
    registry = auth.context().registry
    published = registry.get_version(version_id) if (registry and version_id) else None
    if published is not None:
        diagram = to_mermaid(
            published.document,
            executed=[j["activityId"] for j in journal if j.get("activityId")],
            faulted=(fault or {}).get("activityId"),
        )
    return render_template(
        "request.html",
        record=view,
        events=events,
        journal=journal,
        diagram=diagram,
        mermaid_installed=assets.installed(settings(), assets.MERMAID),
        message=request.args.get("message"),
    )


# Dead letters -------------------------------------------------------------------------------------


def _kind_filter() -> tuple[str, ...]:
    kind = request.args.get("kind") or None
    if kind is None:
        return LETTER_KINDS
    if kind not in LETTER_KINDS:
        raise BadRequest(f"kind must be one of {', '.join(LETTER_KINDS)}", field="kind")
    return (kind,)


def _page_number() -> int:
    return parse_int(request.args.get("page") or "0", "page", low=0, high=MAX_PAGE)


@bp.get("/dead-letters")
@require("viewer")
def dead_letter_list() -> str:
    kinds, page = _kind_filter(), _page_number()
    with store.transaction(_factory(), write=False) as db:
        body = dead_letters.list_page(db, kinds, page=page, page_size=PAGE_SIZE)
    return render_template(
        "dead_letters.html",
        body=body,
        kind=request.args.get("kind") or "",
        kinds=LETTER_KINDS,
        page=page,
        message=request.args.get("message"),
    )


@bp.post("/dead-letters/<letter_id>/replay")
@require("operator")
def replay_dead_letter(letter_id: str) -> BaseResponse:
    protect_form()
    with store.transaction(_factory()) as db:
        outcome = dead_letters.replay(db, letter_id, LETTER_KINDS)
        audit.record(db, "dead-letter.replay", letter_id, {"replayedAs": outcome.new_id})
    publisher = auth.context().publisher
    if outcome.outbox_ids and publisher is not None:
        try:
            publisher.publish(list(outcome.outbox_ids))
        except Exception:
            logger.exception(
                "fast-path publish after replaying %s failed (relay retries)", letter_id
            )
    principal = current()
    logger.warning(
        "dead letter %s replayed from the console by %s",
        letter_id,
        principal.name if principal else "?",
    )
    return redirect(url_for("pages.dead_letter_list", message=f"Replayed {letter_id}"))


# Operator audit -----------------------------------------------------------------------------------


@bp.get("/audit")
@require("operator")
def operator_audit() -> str:
    page = _page_number()
    action = (request.args.get("action") or "").strip() or None
    with store.transaction(_factory(), write=False) as db:
        items, total = operator_actions.list_page(db, page=page, page_size=PAGE_SIZE, action=action)
    return render_template(
        "audit.html", items=items, total=total, page=page, page_size=PAGE_SIZE, action=action
    )


# Runtime ------------------------------------------------------------------------------------------


@bp.get("/runtime")
@require("viewer")
def runtime_page() -> str:
    with store.transaction(_factory(), write=False) as db:
        view = runtime_view(db)
    return render_template("runtime.html", view=view, now=dt.datetime.now(dt.UTC).isoformat())


@bp.post("/runtime/pause")
@require("operator")
def pause() -> BaseResponse:
    return _set_paused(True)


@bp.post("/runtime/resume")
@require("operator")
def resume() -> BaseResponse:
    return _set_paused(False)


def _set_paused(paused: bool) -> BaseResponse:
    protect_form()
    with store.transaction(_factory()) as db:
        set_paused(db, paused)
        audit.record(db, "runtime.pause" if paused else "runtime.resume", "workflow runtime")
    principal = current()
    logger.warning(
        "workflow runtime %s from the console by %s",
        "paused" if paused else "resumed",
        principal.name if principal else "?",
    )
    return redirect(url_for("pages.runtime_page"))
