"""A definition's versions: revert to one (a new draft) and delete one (only a draft: published
versions stay in the history, as instances ran on them)."""

from __future__ import annotations

from typing import Any

from broker.console.api.base import blueprint
from broker.console.api.definitions.routes import by_version_id, one
from broker.console.api.definitions.views import Version, summary
from broker.console.api.params import VersionOptions
from broker.console.roles import current, require
from broker.errors import BadRequest, NotFound
from broker.registry.files import MAX_VERSION
from broker.runtime.admin import drafts as store
from broker.safety.bounded import parse_int
from broker.web.context import transaction


def delete_version_txn(v: Version) -> int:
    """Delete ``v`` when it is a draft (1); refuse any stored version with the reason."""
    if not v.is_draft:
        raise BadRequest(
            f"Version {v.version} of '{v.definition_id}' stays in the version history "
            "(instances may have run on it); only a draft can be deleted"
        )
    with transaction() as session:
        return 1 if store.delete_draft_txn(session, v.definition_id) else 0


@blueprint.delete("/workflow-definition-versions/<version_id>")
@require("designer")
def delete_version(version_id: str) -> tuple[str, int]:
    delete_version_txn(by_version_id(version_id))
    return "", 204


def version_number(raw: str) -> int:
    """A version number from the path (the broker's one number parser: 400, not a 500 from the
    database, for one out of range)."""
    return parse_int(raw, "version", low=1, high=MAX_VERSION)


@blueprint.delete("/workflow-definitions/<definition_id>/version/<version>")
@require("designer")
def delete_version_number(definition_id: str, version: str) -> tuple[str, int]:
    number = version_number(version)
    delete_version_txn(one(definition_id, VersionOptions("Specific", number)))
    return "", 204


@blueprint.post("/workflow-definitions/<definition_id>/revert/<version>")
@require("designer")
def revert(definition_id: str, version: str) -> tuple[dict[str, Any], int]:
    """Elsa's revert: version ``version``'s content becomes the new draft (201, its summary)."""
    number = version_number(version)
    chosen = one(definition_id, VersionOptions("Specific", number))
    if chosen.version != number:
        raise NotFound(f"Workflow definition '{definition_id}' has no version {version}")
    doc = {k: v for k, v in chosen.document.items() if k not in ("id", "version")}
    principal = current()
    with transaction() as session:
        store.save_draft_txn(session, definition_id, doc, principal.name if principal else None)
    return summary(one(definition_id, VersionOptions("Latest"))), 201
