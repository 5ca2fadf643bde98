"""``/admin``: dead letters, bookmark-queue dead letters, workflow instances, runtime pause.
Each endpoint needs a scope from ``clients.json``; a client without it gets 403 naming the scope."""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, Response, jsonify
from sqlalchemy.orm import Session

from broker.clients import scopes
from broker.errors import BadRequest
from broker.ingress.auth import authenticate, require_scope
from broker.ingress.schemas import int_arg, str_arg
from broker.runtime.admin import dead_letters, instances
from broker.runtime.admin.dead_letters import BOOKMARK, WORK
from broker.runtime.admin.runtime_status import runtime_view
from broker.runtime.outbox.pause import set_paused
from broker.store import operator_actions
from broker.web.context import services, transaction

logger = logging.getLogger(__name__)

bp = Blueprint("admin", __name__, url_prefix="/admin")

MAX_PAGE = 1_000_000


def _page() -> tuple[int, int]:
    return int_arg("page", 0, 0, MAX_PAGE), int_arg("pageSize", 50, 1, 500)


def _replayed(outcome: dead_letters.Replayed) -> Response:
    if outcome.outbox_ids:
        try:
            services().publisher.publish(outcome.outbox_ids)
        except Exception:
            logger.exception(
                "fast-path publish of replayed %s failed; the relay will retry",
                outcome.dead_letter_id,
            )
    return jsonify({"replayed": True, "queueItemId": outcome.new_id, "reason": outcome.reason})


# Bookmark-queue dead letters ----------------------------------------------------------------------


@bp.get("/bookmark-queue/dead-letters")
@require_scope(scopes.READ_BOOKMARK_DEAD_LETTERS)
def list_bookmark_dead_letters() -> Response:
    page, size = _page()
    with transaction(write=False) as session:
        body = dead_letters.list_page(
            session, BOOKMARK, page=page, page_size=size, instance_id=str_arg("workflowInstanceId")
        )
    return jsonify(body)


@bp.get("/bookmark-queue/dead-letters/<letter_id>")
@require_scope(scopes.READ_BOOKMARK_DEAD_LETTERS)
def get_bookmark_dead_letter(letter_id: str) -> Response:
    with transaction(write=False) as session:
        return jsonify(dead_letters.view(dead_letters.get(session, letter_id, BOOKMARK)))


@bp.post("/bookmark-queue/dead-letters/<letter_id>/replay")
@require_scope(scopes.REPLAY_BOOKMARK_DEAD_LETTERS)
def replay_bookmark_dead_letter(letter_id: str) -> Response:
    with transaction() as session:
        outcome = dead_letters.replay(session, letter_id, BOOKMARK)
        _audit(session, "dead-letter.replay", letter_id, {"replayedAs": outcome.new_id})
    return _replayed(outcome)


@bp.delete("/bookmark-queue/dead-letters/<letter_id>")
@require_scope(scopes.DELETE_BOOKMARK_DEAD_LETTERS)
def delete_bookmark_dead_letter(letter_id: str) -> tuple[str, int]:
    with transaction() as session:
        dead_letters.remove(session, letter_id, BOOKMARK)
        _audit(session, "dead-letter.delete", letter_id)
    return "", 204


def _audit(
    session: Session, action: str, target: str, summary: dict[str, Any] | None = None
) -> None:
    """The operator audit's record of an admin client's action, in its transaction."""
    operator_actions.record(
        session,
        actor=f"client:{authenticate().client_id}",
        action=action,
        target=target,
        summary=summary,
    )


# Request and outbox dead letters ------------------------------------------------------------------


def _kinds() -> tuple[str, ...]:
    kind = str_arg("kind")
    if kind is None:
        return WORK
    if kind.lower() not in WORK:
        raise BadRequest("kind must be request, outbox or webhook", field="kind")
    return (kind.lower(),)


@bp.get("/dead-letters")
@require_scope(scopes.READ_DEAD_LETTERS)
def list_dead_letters() -> Response:
    kinds, (page, size) = _kinds(), _page()
    with transaction(write=False) as session:
        return jsonify(dead_letters.list_page(session, kinds, page=page, page_size=size))


@bp.get("/dead-letters/<letter_id>")
@require_scope(scopes.READ_DEAD_LETTERS)
def get_dead_letter(letter_id: str) -> Response:
    with transaction(write=False) as session:
        return jsonify(dead_letters.view(dead_letters.get(session, letter_id, WORK)))


@bp.post("/dead-letters/<letter_id>/replay")
@require_scope(scopes.REPLAY_DEAD_LETTERS)
def replay_dead_letter(letter_id: str) -> Response:
    with transaction() as session:
        outcome = dead_letters.replay(session, letter_id, WORK)
        _audit(session, "dead-letter.replay", letter_id, {"replayedAs": outcome.new_id})
    return _replayed(outcome)


# Workflow instances -------------------------------------------------------------------------------


@bp.get("/workflow-instances")
@require_scope(scopes.READ_INSTANCES)
def list_instances() -> Response:
    page, size = _page()
    with transaction(write=False) as session:
        body = instances.list_page(
            session,
            status=str_arg("status"),
            definition_id=str_arg("definitionId"),
            page=page,
            page_size=size,
        )
    return jsonify(body)


@bp.get("/workflow-instances/<instance_id>")
@require_scope(scopes.READ_INSTANCES)
def get_instance(instance_id: str) -> Response:
    with transaction(write=False) as session:
        return jsonify(instances.view(instances.get(session, instance_id)))


@bp.get("/workflow-instances/<instance_id>/journal")
@require_scope(scopes.READ_INSTANCES)
def get_journal(instance_id: str) -> Response:
    with transaction(write=False) as session:
        return jsonify({"items": instances.journal(session, instance_id)})


@bp.post("/workflow-instances/<instance_id>/cancel")
@require_scope(scopes.CANCEL_INSTANCES)
def cancel_instance(instance_id: str) -> tuple[Response, int]:
    with transaction() as session:
        body = instances.view(instances.cancel(session, instance_id))
        _audit(session, "instance.cancel", instance_id)
    return jsonify(body), 202


# Runtime ------------------------------------------------------------------------------------------


_runtime_view = runtime_view


@bp.get("/workflow-runtime/status")
@require_scope(scopes.READ_RUNTIME)
def runtime_status() -> Response:
    with transaction(write=False) as session:
        return jsonify(_runtime_view(session))


@bp.post("/workflow-runtime/pause")
@require_scope(scopes.MANAGE_RUNTIME)
def pause() -> Response:
    return _set_paused(True)


@bp.post("/workflow-runtime/resume")
@require_scope(scopes.MANAGE_RUNTIME)
def resume() -> Response:
    return _set_paused(False)


def _set_paused(paused: bool) -> Response:
    with transaction() as session:
        set_paused(session, paused)
        _audit(session, "runtime.pause" if paused else "runtime.resume", "workflow runtime")
        body = _runtime_view(session)
    logger.warning(
        "workflow runtime %s by %s", "paused" if paused else "resumed", authenticate().client_id
    )
    return jsonify(body)
