"""Runtime administration at Elsa's paths: bookmark-queue dead letters and the runtime's pause."""

from __future__ import annotations

import logging
from typing import Any

from broker.console import audit
from broker.console.api.base import blueprint
from broker.console.api.openapi import (
    PAGING,
    TEXT,
    documented,
)
from broker.console.api.params import arg, page_args
from broker.console.roles import current, require
from broker.runtime.admin import dead_letters
from broker.runtime.admin.dead_letters import BOOKMARK
from broker.runtime.admin.runtime_status import runtime_view
from broker.runtime.outbox import pause as runtime_pause
from broker.web.context import services, transaction

logger = logging.getLogger(__name__)


@blueprint.get("/bookmark-queue/dead-letters")
@require("viewer")
@documented(query={"workflowInstanceId": TEXT, **PAGING})
def list_dead_letters() -> dict[str, Any]:
    paging = page_args()
    with transaction(write=False) as session:
        found: dict[str, Any] = dead_letters.list_page(
            session,
            BOOKMARK,
            page=paging.page,
            page_size=paging.page_size,
            instance_id=arg("workflowInstanceId"),
        )
    return found


@blueprint.get("/bookmark-queue/dead-letters/<letter_id>")
@require("viewer")
def get_dead_letter(letter_id: str) -> dict[str, Any]:
    with transaction(write=False) as session:
        return dead_letters.view(dead_letters.get(session, letter_id, BOOKMARK))


@blueprint.post("/bookmark-queue/dead-letters/<letter_id>/replay")
@require("operator")
def replay_dead_letter(letter_id: str) -> dict[str, Any]:
    with transaction() as session:
        outcome = dead_letters.replay(session, letter_id, BOOKMARK)
        audit.record(session, "dead-letter.replay", letter_id, {"replayedAs": outcome.new_id})
    if outcome.outbox_ids:
        try:
            services().publisher.publish(outcome.outbox_ids)
        except Exception:
            logger.exception(
                "fast-path publish of replayed %s failed; the relay will retry", letter_id
            )
    return {"replayed": True, "queueItemId": outcome.new_id, "reason": outcome.reason}


@blueprint.delete("/bookmark-queue/dead-letters/<letter_id>")
@require("operator")
def delete_dead_letter(letter_id: str) -> tuple[str, int]:
    with transaction() as session:
        dead_letters.remove(session, letter_id, BOOKMARK)
        audit.record(session, "dead-letter.delete", letter_id)
    return "", 204


def status_body(view: dict[str, Any]) -> dict[str, Any]:
    """Elsa's ``StatusResponse`` with the broker's own figures beside it."""
    paused = bool(view["paused"])
    return {
        "state": {
            "reason": "AdministrativePause" if paused else "None",
            "isAcceptingNewWork": not paused,
            "pausedAt": view["updatedAt"] if paused else None,
            "drainStartedAt": None,
            "pauseReasonText": None,
            "pauseRequestedBy": None,
            "generationId": "broker",
        },
        "sources": [],
        "activeExecutionCycleCount": view["inFlight"],
        **view,
    }


@blueprint.get("/admin/workflow-runtime/status")
@blueprint.get("/workflow-runtime/status")
@require("viewer")
def runtime_status() -> dict[str, Any]:
    with transaction(write=False) as session:
        return status_body(runtime_view(session))


def set_paused(paused: bool) -> dict[str, Any]:
    with transaction() as session:
        runtime_pause.set_paused(session, paused)
        audit.record(session, "runtime.pause" if paused else "runtime.resume", "workflow runtime")
        view = runtime_view(session)
    principal = current()
    logger.warning(
        "workflow runtime %s from the console by %s",
        "paused" if paused else "resumed",
        principal.name if principal else "?",
    )
    return status_body(view)


@blueprint.post("/admin/workflow-runtime/pause")
@blueprint.post("/workflow-runtime/pause")
@require("operator")
def pause() -> dict[str, Any]:
    return set_paused(True)


@blueprint.post("/admin/workflow-runtime/resume")
@blueprint.post("/workflow-runtime/resume")
@require("operator")
def resume() -> dict[str, Any]:
    return set_paused(False)
